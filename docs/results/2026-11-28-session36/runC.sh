#!/bin/bash
# Session 36, run C (one GPU host). p = s36 at a09f4b7 (run B's). Every op's break-even under the new rule (a
# crossover needs a clear GPU win at the largest probed size), and racecheck over
# the quick diff-test's dense cases (the narrow GEMM tiles' shared-memory staging).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36C}
B=$(mktemp -d); for v in recall-p; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
C=$(mktemp -d)
T0=$(date +%s); { timeout 240 compute-sanitizer --tool racecheck $B/recall-p diff-test --arch sm_90 --quick --group kernels > $D/racecheck.txt 2>&1; echo "racecheck kernels: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASS|FAIL' $D/racecheck.txt | tail -2 | tr '\n' ' ')" | tee -a $W/console.txt; grep -A2 "^========= Error\|Race reported" $D/racecheck.txt | head -8 | tee -a $W/console.txt; tail -4 $D/racecheck.txt > $W/racecheck-tail.txt; }
for op in knn knn_resident score_candidates score_candidates_resident spread spread_resident kmeans clip_and_noise similarity_batch; do left 40 || break
  T0=$(date +%s); RECALL_CACHE_DIR=$C timeout $(( 580 - ($(date +%s) - S0) )) $B/recall-p bench break-even --ops $op --out $D/be-$op.md > $D/be.txt 2>&1; echo "break-even $op (p): rc=$? $(( $(date +%s) - T0 ))s $(grep -E "^\| $op \|" $D/be-$op.md)" | tee -a $W/console.txt
done
cat $D/be-*.md > $W/break-even-all.md
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
