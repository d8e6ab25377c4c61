#!/bin/bash
# Session 16, run F: binaries k (i with the query staged from the parameters after the rows' copies are queued;
# from memory still first) and l (k with the tickets' fences fence.acq_rel.gpu instead of membar.gl, knn1 and scan1)
# against i (594876b, landed) and e (main before), alternated, torch alongside. Diff-tests and sanitizers on l.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e i k l; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-l
W=$(mktemp -d)/s16F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16F.tgz s16F' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-l.txt 2>&1; tail -1 $W/diff-all-l.txt
for q in params memory; do for b in on off; do
RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-l-$q-$b.txt 2>&1; echo "$q $b $(tail -1 $W/diff-knn1-l-$q-$b.txt)"
done; done
RECALL_KNN1_QUERY=params timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-l-params.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-l-params.txt | tail -1
for rows in 1000 10000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-l.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-l.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-l.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-l.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2 3; do for v in e i k l; do
  P=/none; [ $rep = 1 ] && [ $v = l ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-l-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-l-1.md
for rows in 100000 1000000; do for v in i l; do timeout 120 $B/recall-$v bench knn --dim 768 --queries 1 --no-cpu --peer-script /none --rows $rows --k 10 --iters 50 --out $W/q1-r$rows-$v.md > $W/q1-r$rows-$v.log 2>&1; echo "rows=$rows $v: $(grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-$v.md | cut -d"|" -f3)"; done; done
true
