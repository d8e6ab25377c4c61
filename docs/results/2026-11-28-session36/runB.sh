#!/bin/bash
# Session 36, run B (one GPU host). p = s36 at the commit named in console.txt (run A's n, with a GEMM call's last
# queries past full 128-query tiles on the row scan when 8 or fewer, and the CPU's many-query knn over few rows
# reworked). m = main before the session (4b2c61f).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36B}
B=$(mktemp -d); for v in recall-m recall-p gpu-test-p; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-p --test-threads 1 > $D/gpu-test-p.txt 2>&1; echo "facade gpu tests (p): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test-p.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test-p.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 150 $B/recall-p diff-test --arch all --quick > $W/difftest-all-p.txt 2>&1; echo "quick diff-test, every arch (p): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-all-p.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "sm80_gemm|gemm_.* \+ scan" $W/difftest-all-p.txt | grep -E "^sm_90 |^sm_86 |^sm_80 " | head -40 >> $W/console.txt
for tool in memcheck initcheck synccheck; do T0=$(date +%s); left 200 && { timeout 120 compute-sanitizer --tool $tool $B/recall-p diff-test --arch sm_90 --quick --group kernels > $D/$tool.txt 2>&1; echo "$tool kernels: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $D/$tool.txt | tail -2 | tr '\n' ' ')" | tee -a $W/console.txt; }; done
# knn_batch's CPU column (the CPU's knn of 256 queries over few rows), m and p.
for v in m p; do T0=$(date +%s); left 150 && { RECALL_CACHE_DIR=$(mktemp -d) timeout 100 $B/recall-$v bench break-even --ops knn_batch --out $D/be-$v.md > /dev/null 2>&1; echo "break-even knn_batch ($v): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "^\| knn_batch |^\| (8,388,608|9,9|11,|13,|16,|19,|23,|33,|67,|134,)" $D/be-$v.md | head -12 | tee -a $W/console.txt; }; done
cat $D/be-*.md > $W/break-even-knn_batch.md
# The CPU's knn of 64 and 1 queries over 100,000 x 768 (issue 3's bench shape), m and p alternated.
for q in 64 1; do for v in m p m p; do left 120 || break
  timeout 60 $B/recall-$v bench knn --rows 100000 --dim 768 --queries $q --iters 10 --peer-script /none > $D/cpuknn.md 2>&1
  echo "cpu knn q$q $v: $(grep -E '^\| recall CPU' $D/cpuknn.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
# Cosine scores over 500,000 x 768 at kernel level: the tails (130, 136, 150 queries) and 32, m and p alternated.
for q in 130 136 150 32; do for v in m p; do left 60 || break
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 90 $B/recall-$v bench cosine --rows 500000 --dim 768 --queries $q --iters 20 --no-cpu $peer > $D/cos-$q-$v.md 2>&1
  echo "cosine q$q $v: $(grep -E 'cosine kernel|normalize.q. @ corpus.T .fp32' $D/cos-$q-$v.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
cat $D/cos-*.md > $W/cosine.md
{ for f in $D/memcheck.txt $D/initcheck.txt $D/synccheck.txt $D/gpu-test-p.txt; do echo "== $(basename $f)"; tail -5 $f; done; } > $W/tools-tail.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
