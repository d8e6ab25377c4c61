#!/bin/bash
# Session 36, run D (one GPU host). q = s36 with the CPU's candidate scoring and spreading reworked (commit in
# console.txt); o = main at 6dacf49 (runs A-C's changes, before these two). The CPU columns of the two ops'
# break-even sweeps, o and q in one run; the quick diff-test of q (the GPU's candidates and spreading against the
# new CPU code, bit for bit).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36D}
B=$(mktemp -d); for v in recall-o recall-q; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 90 $B/recall-q diff-test --arch sm_90 --quick > $W/difftest-q.txt 2>&1; echo "quick diff-test (q): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-q.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
for op in score_candidates_resident spread_resident score_candidates; do for v in o q; do left 60 || break
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 120 $B/recall-$v bench break-even --ops $op --out $D/be-$op-$v.md > /dev/null 2>&1; echo "break-even $op ($v): rc=$? $(( $(date +%s) - T0 ))s $(grep -E "^\\| $op \\|" $D/be-$op-$v.md)" | tee -a $W/console.txt
done; done
cat $D/be-*.md > $W/break-even.md
# CPU-only engine calls as a user makes them: recall bench candidates' CPU row is not used; the sweeps above time the probe.
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
