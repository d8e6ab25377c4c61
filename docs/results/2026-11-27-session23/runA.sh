#!/bin/bash
# Session 23, run A: the one-query server (binary s, the s23 working tree): knn1 diff-test in full (launched and
# served cases, a stream of different queries through one server), memcheck and synccheck over the quick knn1
# group, then one query x 100 / 1,000 / 4,096 / 10,000 / 16,384 rows x 768, top-10, with RECALL_KNN1_SERVE
# off / on alternated, three rounds (torch in the first).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23A}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "served" $W/diff-knn1.txt | head -5
if ! grep -q 'PASS' $W/diff-knn1.txt; then tail -30 $W/diff-knn1.txt; fi
P=benches/peers/peers.py
for rep in 1 2 3; do for rows in 1000 10000 100 4096 16384; do for sv in off on; do left 420 || break
  PP=/none; [ $rep = 1 ] && [ $sv = off ] && PP=$P
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > $f.log 2>&1
  echo "$rep x$rows $sv: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) floor $(grep -h 'host spins' $f | cut -d'|' -f3) $(grep -h 'torch.topk' $f | cut -d'|' -f3)"
done; done; done
for tool in memcheck synccheck; do left 440 || break
  timeout 150 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
