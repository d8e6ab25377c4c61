#!/bin/bash
# Session 35, run A (one GPU host): m = main (ff5bef0), n = s35 (staged uploads of caller slices, knn_batch).
# 1. n's GPU tests (facade, memory-pool) and the quick diff-test.
# 2. pool_bench: a 1 GiB corpus moved pageable, pinned, and through the staged ring (one and many host threads).
# 3. `recall knn` over a 500,000 x 768 .npy corpus, 16 to 1,024 queries: m and n under auto (each its own fresh
#    calibration cache, made by a first 512-query call), n forced to the CPU and to the GPU; alternated.
# 4. n's `recall bench break-even --ops knn,knn_batch` (calibrated against swept), fresh cache.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35A}
B=$(mktemp -d); for v in recall-m recall-n gpu-test-n pool-gpu-n pool-bench-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W; D=$(mktemp -d)
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test-n --test-threads 1 > $W/gpu-test-n.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-n.txt)"; grep -E "panicked|skip" $W/gpu-test-n.txt | head -5
T0=$(date +%s); timeout 100 $B/pool-gpu-n --test-threads 1 > $W/pool-gpu-n.txt 2>&1; echo "memory-pool gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-gpu-n.txt)"; grep -E "panicked|skip" $W/pool-gpu-n.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-n diff-test --arch sm_90 --quick > $W/diff-quick-n.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-n.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); RECALL_COMMIT=33ffded timeout 120 $B/pool-bench-n --corpus-mib 1024 --reps 5 --staged-chunk-mib 32 > $W/pool-bench-n.md 2>&1; echo "pool bench: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "pageable|staged|pinned \+ cuMemcpyHtoDAsync \(whole\)" $W/pool-bench-n.md | head -12
python3 -c "
import numpy as np
r = np.random.default_rng(5)
np.save('$D/corpus.npy', r.standard_normal((500000, 768), dtype=np.float32))
for q in (16, 64, 128, 256, 512, 1024):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
CM=$(mktemp -d); CN=$(mktemp -d)
for v in m n; do C=$CM; [ $v = n ] && C=$CN
  echo -n "first call ($v, calibrating): "; RECALL_CACHE_DIR=$C timeout 60 $B/recall-$v knn --corpus $D/corpus.npy --queries $D/q512.npy --k 10 --out $D/o-first-$v 2>&1 | tail -1 | tee -a $W/knn.txt
done
for q in 16 64 128 256 512 1024; do for v in m n n-cpu n-gpu; do
  C=$CM; [ $v != m ] && C=$CN; E=auto; case $v in n-cpu) E=cpu;; n-gpu) E=gpu;; esac; b=${v%%-*}
  echo -n "q$q $v: "; RECALL_DEVICE=$E RECALL_CACHE_DIR=$C timeout 60 $B/recall-$b knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/o-$q-$v 2>&1 | tail -1 | tee -a $W/knn.txt
done
  for v in n n-cpu n-gpu; do cmp -s $D/o-$q-m $D/o-$q-$v && echo "  q$q: m and $v answers identical" || echo "  q$q: m and $v answers DIFFER"; done | tee -a $W/knn.txt
done
ls $D/o-512-m* | head -3 > $W/outputs.txt
T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 150 $B/recall-n bench break-even --ops knn,knn_batch --out $W/break-even-n.md > $W/break-even-n.txt 2>&1; echo "break-even: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (knn|knn_batch) " $W/break-even-n.md
echo "total $(( $(date +%s) - S0 )) s"
true
