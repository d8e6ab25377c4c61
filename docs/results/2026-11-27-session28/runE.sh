#!/bin/bash
# Session 28, run E (H200 host): the facade's GPU tests at d54db10 (bit-identical cosine and clip-and-noise, the
# quick diff-test, and a bad value refused on the GPU as on the CPU: clip-and-noise, knn, similarity and
# cosine_similarity, the op's host check before upload); then clip-and-noise's rows per task (256 in the code)
# swept on the 16 Xeon cores with a throwaway binary (d54db10 plus X_ROWS read from the environment), two rounds.
N=${RUN:-s28E}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-s28e.xz > $B/gpu-test; xz -dc .device-carry/cpu-s28r.xz > $B/r; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|skipped|panicked" $W/gpu-test.txt
for rep in 1 2; do for r in 64 128 256 512 1024; do [ $(( $(date +%s) - S0 )) -lt 330 ] || break
  T0=$(date +%s); X_ROWS=$r timeout 40 $B/r --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/rows-$r-$rep.txt 2>&1; echo "rows $r $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/rows-$r-$rep.txt | head -1 | sed 's/ *time: *//')"; done; done
timeout 30 $B/r --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
