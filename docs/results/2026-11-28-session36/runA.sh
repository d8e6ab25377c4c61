#!/bin/bash
# Session 36, run A (one GPU host). n = s36 at 6211a99 (no break-even from a tie at the top; the unwind test; narrow
# GEMM tiles). m = main before the session (4b2c61f). pool-noguard = n's memory-pool GPU tests built with the unwind
# wait switched off by RECALL_TEST_NO_GUARD (a negative control).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36A}
B=$(mktemp -d); for v in recall-m recall-n gpu-test-n pool-gpu-n pool-noguard; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c "import torch; print('torch', torch.__version__)"; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 120 $B/pool-gpu-n --test-threads 1 > $W/pool-gpu-n.txt 2>&1; echo "memory-pool gpu tests (n): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-gpu-n.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/pool-gpu-n.txt | head -5
T0=$(date +%s); RECALL_TEST_NO_GUARD=1 timeout 120 $B/pool-noguard --test-threads 1 gpu_staged_closure_upload > $W/pool-noguard-off.txt 2>&1; echo "negative control, wait switched off: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-noguard-off.txt)" | tee -a $W/console.txt; grep -E "panicked at|queued copies" $W/pool-noguard-off.txt | head -4 | tee -a $W/console.txt
T0=$(date +%s); timeout 120 $B/pool-noguard --test-threads 1 gpu_staged_closure_upload > $W/pool-noguard-on.txt 2>&1; echo "same binary, wait on: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-noguard-on.txt)" | tee -a $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-n --test-threads 1 > $W/gpu-test-n.txt 2>&1; echo "facade gpu tests (n): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-n.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-n.txt | head -5
T0=$(date +%s); timeout 90 $B/recall-n diff-test --arch sm_90 --quick > $W/difftest-n.txt 2>&1; echo "quick diff-test (n): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-n.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "sm80_gemm" $W/difftest-n.txt | tee -a $W/console.txt
# Kernel level and resident calls: cosine scores over 500,000 x 768, m and n alternated, torch in the same process run.
for q in 16 32 64 130; do for v in m n; do
  cpu=""; [ $q -gt 64 ] && cpu="--no-cpu"; peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 120 $B/recall-$v bench cosine --rows 500000 --dim 768 --queries $q --iters 20 $cpu $peer > $D/cos-$q-$v.md 2>&1
  echo "cosine q$q $v: $(grep -E 'cosine kernel|call with corpus|torch|bit' $D/cos-$q-$v.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
cat $D/cos-*.md > $W/cosine.md
# knn end to end on a resident corpus, 1 M x 768, top-10.
for q in 32 64; do for v in m n; do
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 120 $B/recall-$v bench knn --rows 1000000 --dim 768 --queries $q --iters 20 --no-cpu $peer > $D/knn-$q-$v.md 2>&1
  echo "knn q$q $v:"; grep -E "^\| (recall|torch)" $D/knn-$q-$v.md | head -6
done; done 2>&1 | tee -a $W/console.txt
cat $D/knn-*.md > $W/knn.md
# Dispatch: the similarity ops' break-even with the tie rule (n), then 64- and 256-query score calls, auto vs cpu.
T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 200 $B/recall-n bench break-even --ops similarity,cosine_scores --out $W/break-even-n.md > /dev/null 2>&1; echo "break-even (n): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "^\| (similarity|cosine_scores) " $W/break-even-n.md | tee -a $W/console.txt
python3 -c "
import numpy as np
r = np.random.default_rng(9)
np.save('$D/c200k.npy', r.standard_normal((200000, 768), dtype=np.float32))
for q in (64, 256):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
for v in m n; do C=$(mktemp -d); for q in 64 256; do for dev in auto cpu; do
  echo -n "scores q$q $v $dev: "; RECALL_DEVICE=$dev RECALL_CACHE_DIR=$C timeout 60 $B/recall-$v scores --corpus $D/c200k.npy --queries $D/q$q.npy --out $D/p-$v-$q-$dev 2>&1 | tail -1
done
  diff -rq $D/p-$v-$q-auto $D/p-$v-$q-cpu > /dev/null && echo "  scores q$q $v: auto identical to cpu" || echo "  scores q$q $v: DIFFERS"
  rm -rf $D/p-$v-$q-auto
done; echo "  $v's cache:"; cat $C/*.txt 2>/dev/null | grep -E "^similarity|^similarity_batch" | sed 's/^/    /'; done 2>&1 | tee -a $W/console.txt
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
