#!/bin/bash
# Session 37, run A (one GPU host). n = s37 (commit in console.txt): 65-72 queries past full tiles on the 64-query tile
# + the row scan; candidate scoring over a slice checks rows in its scoring pass. m = main before the session.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s37A}
B=$(mktemp -d); for v in recall-m recall-n gpu-test-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c "import torch; print('torch', torch.__version__)"; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-n --test-threads 1 > $D/gpu-test-n.txt 2>&1; echo "facade gpu tests (n): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test-n.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test-n.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 150 $B/recall-n diff-test --arch all --quick > $W/difftest-all-n.txt 2>&1; echo "quick diff-test, every arch (n): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-all-n.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "q64 \+ scan" $W/difftest-all-n.txt | head -12 >> $W/console.txt
T0=$(date +%s); timeout 120 compute-sanitizer --tool memcheck $B/recall-n diff-test --arch sm_90 --quick --group kernels > $D/memcheck.txt 2>&1; echo "memcheck kernels: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $D/memcheck.txt | tail -2 | tr '\n' ' ')" | tee -a $W/console.txt
# Cosine scores over 500,000 x 768 at kernel level, the tails 65-73 (64 for reference), m and n alternated; torch in n's process.
for q in 65 68 72 73 64; do for v in m n; do left 150 || break
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 90 $B/recall-$v bench cosine --rows 500000 --dim 768 --queries $q --iters 20 --no-cpu $peer > $D/cos-$q-$v.md 2>&1
  echo "cosine q$q $v: $(grep -E 'cosine kernel|normalize.q. @ corpus.T .fp32' $D/cos-$q-$v.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
cat $D/cos-*.md > $W/cosine.md
# knn top-10 of 72 queries over a resident 1 M x 768 corpus, m and n.
for v in m n; do left 120 || break
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 120 $B/recall-$v bench knn --rows 1000000 --dim 768 --queries 72 --iters 20 --no-cpu $peer > $D/knn-72-$v.md 2>&1
  echo "knn q72 $v:"; grep -E "^\| (recall|torch)" $D/knn-72-$v.md | head -6
done 2>&1 | tee -a $W/console.txt
cat $D/knn-*.md > $W/knn.md
# Candidate scoring's CPU columns (slice: the rows checked in the scoring pass; handle: unchanged), m and n.
for op in score_candidates score_candidates_resident; do for v in m n m n; do left 40 || break
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 60 $B/recall-$v bench break-even --ops $op --out $D/be-$op-$v-$T0.md > /dev/null 2>&1; echo "break-even $op ($v): rc=$? $(( $(date +%s) - T0 ))s $(grep -E "^\\| $op \\|" $D/be-$op-$v-$T0.md)" | tee -a $W/console.txt
done; done
for f in $D/be-*.md; do echo "== $(basename $f)"; cat $f; done > $W/break-even.md
{ for f in $D/memcheck.txt $D/gpu-test-n.txt; do echo "== $(basename $f)"; tail -5 $f; done; } > $W/tools-tail.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
