#!/bin/bash
# Session 35, run G (one GPU host): g = s35 at d5220b8 (run E's e + the staging ring made once the large copies repay
# it, with 16 MiB chunks). m = main before the session (ff5bef0).
# 1. g's facade GPU tests (the staged ones now make the ring at the first large copy; one new test of the payback)
#    and the quick diff-test.
# 2. Run E's one-shot `recall knn` forced to the GPU, 16 queries over 8,192 x 768 (24 MiB), m and g alternated.
# 3. g's one-shot decisions at 256 queries: `recall knn` over 500,000 x 768 (1.5 GB: the ring at once) and
#    `recall scores` over 200,000 x 768 (614 MB), auto against forced CPU (diff -r).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35G}
B=$(mktemp -d); for v in recall-m recall-g gpu-test-g; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-g --test-threads 1 > $W/gpu-test-g.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-g.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-g.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-g diff-test --arch sm_90 --quick > /tmp/dq.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' /tmp/dq.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
python3 -c "
import numpy as np
r = np.random.default_rng(9)
np.save('$D/small.npy', r.standard_normal((8192, 768), dtype=np.float32))
np.save('$D/corpus.npy', r.standard_normal((500000, 768), dtype=np.float32))
np.save('$D/c200k.npy', r.standard_normal((200000, 768), dtype=np.float32))
for q in (16, 256):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
for i in 1 2 3; do for v in m g; do echo -n "small r$i $v gpu: "; RECALL_DEVICE=gpu RECALL_CACHE_DIR=$(mktemp -d) timeout 60 $B/recall-$v knn --corpus $D/small.npy --queries $D/q16.npy --k 10 --out $D/s-$v-$i 2>&1 | tail -1; done; done | tee -a $W/console.txt
for o in $D/s-*; do diff -rq $D/s-m-1 $o > /dev/null && echo "  $(basename $o): identical to s-m-1" || echo "  $(basename $o): DIFFERS"; done | tee -a $W/console.txt
C=$(mktemp -d)
RECALL_CACHE_DIR=$C timeout 60 $B/recall-g knn --corpus $D/corpus.npy --queries $D/q256.npy --k 10 --out $D/warm > /dev/null 2>&1
RECALL_CACHE_DIR=$C timeout 60 $B/recall-g scores --corpus $D/c200k.npy --queries $D/q256.npy --out $D/warm2 > /dev/null 2>&1
for r in 1 2; do for v in auto cpu; do
  echo -n "knn q256 r$r $v: "; RECALL_DEVICE=$v RECALL_CACHE_DIR=$C timeout 60 $B/recall-g knn --corpus $D/corpus.npy --queries $D/q256.npy --k 10 --out $D/k-$v-$r 2>&1 | tail -1
  echo -n "scores q256 r$r $v: "; RECALL_DEVICE=$v RECALL_CACHE_DIR=$C timeout 60 $B/recall-g scores --corpus $D/c200k.npy --queries $D/q256.npy --out $D/p-$v-$r 2>&1 | tail -1
done; done 2>&1 | tee -a $W/console.txt
for o in $D/k-*; do diff -rq $D/k-cpu-1 $o > /dev/null && echo "  $(basename $o): identical to k-cpu-1" || echo "  $(basename $o): DIFFERS"; done | tee -a $W/console.txt
for o in $D/p-*; do diff -rq $D/p-cpu-1 $o > /dev/null && echo "  $(basename $o): identical to p-cpu-1" || echo "  $(basename $o): DIFFERS"; done | tee -a $W/console.txt
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
