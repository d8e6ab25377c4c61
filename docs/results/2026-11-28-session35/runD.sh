#!/bin/bash
# Session 35, run D (one GPU host): d = s35 at 3862f61 (c + similarity_batch + `recall scores`).
# 1. `recall scores` over a 200,000 x 768 .npy corpus (cosine): 64, 256 and 512 queries, auto, forced CPU and forced
#    GPU, two rounds in opposite orders after the calibration cache is made; every output compared with the first
#    CPU answer (diff -r).
# 2. `recall bench break-even --ops similarity,similarity_batch`, fresh cache.
# 3. The quick diff-test and `recall demo`. At most 8 files come back, so few are written.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35D}
B=$(mktemp -d); xz -dc .device-carry/recall-d.xz > $B/recall-d; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/console.txt 2>&1; cat $W/console.txt
python3 -c "
import numpy as np
r = np.random.default_rng(7)
np.save('$D/corpus.npy', r.standard_normal((200000, 768), dtype=np.float32))
for q in (64, 256, 512):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
C=$(mktemp -d)
for q in 512 64; do RECALL_CACHE_DIR=$C timeout 60 $B/recall-d scores --corpus $D/corpus.npy --queries $D/q$q.npy --out $D/warm 2>&1 | tail -1 | sed 's/^/calibrating: /'; done | tee -a $W/console.txt
one() { local v=$1 q=$2 r=$3 E=auto; case $v in cpu) E=cpu;; gpu) E=gpu;; esac
  echo -n "q$q r$r $v: "; RECALL_DEVICE=$E RECALL_CACHE_DIR=$C timeout 60 $B/recall-d scores --corpus $D/corpus.npy --queries $D/q$q.npy --out $D/o-$q-$v-$r 2>&1 | tail -1; }
for q in 64 256 512; do
  one cpu $q 0 > /dev/null
  { for v in auto cpu gpu; do one $v $q 1; done; for v in gpu cpu auto; do one $v $q 2; done
    for o in $D/o-$q-*-[12]; do diff -rq $D/o-$q-cpu-0 $o > /dev/null && echo "  $(basename $o): identical to cpu-0" || echo "  $(basename $o): DIFFERS from cpu-0"; done; } | tee -a $W/console.txt
  rm -rf $D/o-$q-*
done
T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 120 $B/recall-d bench break-even --ops similarity,similarity_batch --out $W/break-even-d.md > $W/break-even-d.txt 2>&1; echo "break-even: rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "^\| (similarity|similarity_batch) " $W/break-even-d.md | tee -a $W/console.txt
T0=$(date +%s); timeout 60 $B/recall-d diff-test --arch sm_90 --quick > $W/diff-quick-d.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-d.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
RECALL_CACHE_DIR=$(mktemp -d) timeout 60 $B/recall-d demo > $W/demo-d.txt 2>&1; echo "demo: rc=$?" | tee -a $W/console.txt; grep -E "^\| (knn|spread|re-score|k-means)" $W/demo-d.txt | tee -a $W/console.txt
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
