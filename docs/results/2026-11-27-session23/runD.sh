#!/bin/bash
# Session 23, run D: run C plus the blocks' lists merged by the host where few (as sm90a_knn1 launched), no stream query per served call (knn1_resident) (binary s, s23 working tree): knn1
# diff-test in full, memcheck over the quick knn1 group, then one query x 100 / 1,000 / 4,096 / 10,000 / 16,384
# rows x 768, top-10, RECALL_KNN1_SERVE off / on alternated, two rounds (torch in the first); the bench's parts
# time the launched knn1 and the served one side by side, with the server's device-clock breakdown; and
# sm80_knn1 launched (RECALL_KNN1_BULK=off) at 1,000 and 10,000 rows for the body's cost.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23D}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "served" $W/diff-knn1.txt | head -5
if ! grep -q 'PASS' $W/diff-knn1.txt; then tail -30 $W/diff-knn1.txt; fi
P=benches/peers/peers.py
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: ' $f | cut -d'|' -f3) relay $(grep -h 'mailbox complete' $f | cut -d'|' -f3) answer $(grep -h 'published -> answer' $f | cut -d'|' -f3) floor $(grep -h 'host spins' $f | cut -d'|' -f3) $(grep -h 'torch.topk' $f | cut -d'|' -f3)"; }
for rep in 1 2 3; do for rows in 1000 10000 100 4096 16384; do for sv in off on; do left 400 || break
  PP=/none; [ $rep = 1 ] && [ $sv = off ] && PP=$P
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > $f.log 2>&1
  show $f "$rep x$rows $sv"
done; done; done
for rows in 1000 10000; do left 420 || break
  f=$W/q1-r$rows-sm80.md
  timeout 60 env RECALL_KNN1_BULK=off $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > $f.log 2>&1
  show $f "x$rows sm80_knn1 launched"
done
for tool in memcheck synccheck; do left 430 || break
  timeout 150 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
