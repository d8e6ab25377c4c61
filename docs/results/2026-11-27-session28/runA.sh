#!/bin/bash
# Session 28, run A (H200 host): CPU clip-and-noise with its output written by non-temporal stores (staged rows,
# vmovntps; "n") against main 7773b00 ("m"), criterion cpu bench 'clip_noise' (as called, into a reused buffer,
# the AVX2 level into), alternated, three rounds; the bench's copy beside them; then n's GPU tests (the facade on
# the GPU, bit for bit, the quick diff-test, and the new bad-value test: the GPU path's host checks).
N=${RUN:-s28A}
B=$(mktemp -d); for v in m n; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
xz -dc .device-carry/gpu-test-s28n.xz > $B/gpu-test; chmod +x $B/gpu-test
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|L2|L3"; } > $W/info.txt 2>&1; cat $W/info.txt
# GPU tests first (short; a failure here matters more than a timing).
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|skipped" $W/gpu-test.txt
for rep in 1 2 3; do for v in m n; do [ $(( $(date +%s) - S0 )) -lt 420 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_noise' --warm-up-time 1 --measurement-time 4 > $W/cpu-bench-$v-$rep.txt 2>&1; echo "cpu $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/cpu-bench-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 40 $B/cpu-bench-n --bench 'copy_512' --warm-up-time 1 --measurement-time 4 > $W/cpu-bench-copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/cpu-bench-copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
