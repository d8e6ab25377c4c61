#!/bin/bash
# Session 32, run C (H200): t = s32 tip (9a64895: k-means' overflow error; the host's parallel work inside a GPU call
# on a pool of its own, the out-of-core staging copy and k-means' member sort); m = 270c42c (the same branch before
# those two). The facade's GPU tests and the host-pool GPU tests on t (global rayon pool of one thread); the quick
# diff-test and the kmeans group in full on t; then k-means (1 M x 128, K = 1,024) and the out-of-core knn (1 M x 768
# through a 1.5 GiB budget, 1 and 64 queries), m and t alternated, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s32C}
B=$(mktemp -d); for v in recall-m recall-t gpu-test-t streamed-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core"; } > $W/info.txt 2>&1; cat $W/info.txt
for t in gpu-test-t streamed-t; do
  T0=$(date +%s); timeout 200 $B/$t --test-threads 1 > $W/$t.txt 2>&1; echo "$t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/$t.txt)"; grep -E "panicked|skip" $W/$t.txt | head -3
done
R=$B/recall-t
T0=$(date +%s); timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 100 $R diff-test --arch sm_90 --group kmeans > $W/diff-kmeans-t.txt 2>&1; echo "kmeans full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-kmeans-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
for rep in 1 2; do for v in m t; do
  timeout 100 $B/recall-$v bench kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 5 --no-cpu --peer-script /none --out $W/kmeans-$v-$rep.md > $W/kmeans-$v-$rep.log 2>&1
  echo "kmeans $rep $v: rc=$? $(grep -h '^| recall' $W/kmeans-$v-$rep.md | cut -c1-160 | tr '\n' ' ')"
  for q in 1 64; do
    RECALL_GPU_CORPUS_BUDGET_MIB=1536 timeout 100 $B/recall-$v bench stream --rows 1000000 --dim 768 --queries $q --k 10 --chunk-mib 256 --iters 5 --out $W/stream-q$q-$v-$rep.md > $W/stream-q$q-$v-$rep.log 2>&1
    echo "stream q$q $rep $v: rc=$? $(grep -h '^| ' $W/stream-q$q-$v-$rep.md | grep -iv 'what\|---' | cut -c1-150 | tr '\n' ' ')"
  done
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
