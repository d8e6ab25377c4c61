#!/bin/bash
# Session 23, run K (binary s = 6533959, the s23 branch as committed): the final check on this machine. Whole
# quick diff-test on sm_90, the knn1 group in full and in every merge mode (quick), memcheck / synccheck /
# racecheck over the quick knn1 group; then one query x 100 / 1,000 / 4,096 / 10,000 / 16,384 rows x 768, top-10,
# Engine::knn_in with RECALL_KNN1_SERVE off / on alternated, three rounds (torch in the first).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23K}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 200 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
for m in device host groups; do
timeout 100 env RECALL_KNN1_MERGE=$m $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$m.txt 2>&1; echo "knn1 merge $m: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-$m.txt | tail -1)"
done
P=benches/peers/peers.py
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) answered $(grep -h 'servers answered' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) b0 $(grep -h "block 0" $f | cut -d'|' -f3) floor $(grep -h 'host spins' $f | cut -d'|' -f3) $(grep -h 'torch.topk' $f | cut -d'|' -f3)"; }
for rep in 1 2 3; do for rows in 1000 10000 100 4096 16384; do for sv in off on; do left 360 || break
  PP=/none; [ $rep = 1 ] && [ $sv = off ] && PP=$P
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > /dev/null 2>&1
  show $f "$rep x$rows $sv"
done; done; done
for tool in memcheck synccheck racecheck; do left 440 || break
  timeout 120 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
