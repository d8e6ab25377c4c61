#!/bin/bash
# Session 35, run E (one GPU host): e = s35 at 1fc2e68 (run D's d + the review's fixes: a panicking staged upload waits
# for its stream; batch work counted at most 128 values a row). m = main before the session (ff5bef0).
# 1. e's GPU tests (memory-pool, facade) and the quick diff-test.
# 2. The staged upload's first use in a short process: `recall knn` forced to the GPU, 16 queries over a 8,192 x 768
#    corpus (24 MiB, above the 16 MiB threshold), m and e alternated, three each (each process pays its own setup).
# 3. e's decisions at 64 and 256 queries: `recall knn` over 500,000 x 768 and `recall scores` over 200,000 x 768,
#    auto against forced CPU (diff -r).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35E}
B=$(mktemp -d); for v in recall-m recall-e gpu-test-e pool-gpu-e; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 100 $B/pool-gpu-e --test-threads 1 > $W/pool-gpu-e.txt 2>&1; echo "memory-pool gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-gpu-e.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/pool-gpu-e.txt | head -5
T0=$(date +%s); timeout 150 $B/gpu-test-e --test-threads 1 > $W/gpu-test-e.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-e.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-e.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-e diff-test --arch sm_90 --quick > /tmp/dq.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' /tmp/dq.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
python3 -c "
import numpy as np
r = np.random.default_rng(9)
np.save('$D/small.npy', r.standard_normal((8192, 768), dtype=np.float32))
np.save('$D/corpus.npy', r.standard_normal((500000, 768), dtype=np.float32))
np.save('$D/c200k.npy', r.standard_normal((200000, 768), dtype=np.float32))
for q in (16, 64, 256):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
for i in 1 2 3; do for v in m e; do echo -n "small r$i $v gpu: "; RECALL_DEVICE=gpu RECALL_CACHE_DIR=$(mktemp -d) timeout 60 $B/recall-$v knn --corpus $D/small.npy --queries $D/q16.npy --k 10 --out $D/s-$v-$i 2>&1 | tail -1; done; done | tee -a $W/console.txt
for o in $D/s-*; do diff -rq $D/s-m-1 $o > /dev/null && echo "  $(basename $o): identical to s-m-1" || echo "  $(basename $o): DIFFERS"; done | tee -a $W/console.txt
C=$(mktemp -d)
for q in 64 256; do for v in auto cpu; do
  echo -n "knn q$q $v: "; RECALL_DEVICE=$v RECALL_CACHE_DIR=$C timeout 60 $B/recall-e knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/k-$q-$v 2>&1 | tail -1
  echo -n "scores q$q $v: "; RECALL_DEVICE=$v RECALL_CACHE_DIR=$C timeout 60 $B/recall-e scores --corpus $D/c200k.npy --queries $D/q$q.npy --out $D/p-$q-$v 2>&1 | tail -1
done
  diff -rq $D/k-$q-auto $D/k-$q-cpu > /dev/null && echo "  knn q$q: auto identical to cpu" || echo "  knn q$q: DIFFERS"
  diff -rq $D/p-$q-auto $D/p-$q-cpu > /dev/null && echo "  scores q$q: auto identical to cpu" || echo "  scores q$q: DIFFERS"
  rm -rf $D/p-$q-*
done 2>&1 | grep -v "^calibrat" | tee -a $W/console.txt
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
