#!/bin/bash
# Session 23, run G (binary s, the s23 working tree): sm90a_knn1s keeps its ring streaming across queries (the next query's first tiles queued ahead; whole rows copied once where they fit), on run F's binary with the groups' lists for the host marking
# places no row fills (KNN1_EMPTY_KEY). knn1 diff-test in full (RECALL_KNN1_MERGE auto) and quick with the device
# merge and with the blocks' lists; the whole quick diff-test on sm_90; memcheck and synccheck over the quick knn1
# group; one query x 1,000 / 10,000 rows, serve off / on, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23G}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "knn1" $W/diff-knn1.txt | head -5
if ! grep -q 'PASS' $W/diff-knn1.txt; then tail -30 $W/diff-knn1.txt; fi
for m in device host groups; do
timeout 100 env RECALL_KNN1_MERGE=$m $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$m.txt 2>&1; echo "knn1 merge $m: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-$m.txt | tail -1) $(( $(date +%s) - S0 ))s"
done
timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: ' $f | cut -d'|' -f3) relay $(grep -h 'mailbox complete' $f | cut -d'|' -f3) floor $(grep -h 'host spins' $f | cut -d'|' -f3)"; }
for rep in 1 2; do for rows in 1000 10000 4096 16384; do for sv in off on; do left 360 || break
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > $f.log 2>&1
  show $f "$rep x$rows $sv"
done; done; done
for tool in memcheck synccheck; do left 430 || break
  timeout 150 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
