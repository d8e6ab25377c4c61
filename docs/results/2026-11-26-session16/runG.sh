#!/bin/bash
# Session 16, run G: binary m (the lists carry their keys' scores: no row's score stored, the mergers write each
# chosen key's score as it wins, no score read at the end) against k (aa3441e, main) and e (main before the
# session), alternated, torch alongside. Diff-tests under each setting, the three sanitizers on m.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e k m; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-m
W=$(mktemp -d)/s16G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16G.tgz s16G' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-m.txt 2>&1; tail -1 $W/diff-all-m.txt
for q in params memory; do for b in on off; do
RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-m-$q-$b.txt 2>&1; echo "$q $b $(tail -1 $W/diff-knn1-m-$q-$b.txt)"
done; done
RECALL_ONE_QUERY_WAIT=sync RECALL_ONE_QUERY_READBACK=copy timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-m-copy.txt 2>&1; echo "copy $(tail -1 $W/diff-knn1-m-copy.txt)"
for b in on off; do
RECALL_KNN1_BULK=$b timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-m-$b.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-m-$b.txt | tail -1
done
for rows in 100 1000 10000 100000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 32 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-m.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-m.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 32 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-m.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-m.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2 3; do for v in e k m; do
  P=/none; [ $rep = 1 ] && [ $v = m ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-m-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-m-1.md
for v in k m; do timeout 120 $B/recall-$v bench knn --dim 768 --queries 1 --no-cpu --peer-script /none --rows 100000 --k 10 --iters 100 --out $W/q1-r100000-$v.md > $W/q1-r100000-$v.log 2>&1; echo "rows=100000 $v: $(grep -h "Engine::knn_in. (corpus" $W/q1-r100000-$v.md | cut -d"|" -f3)"; done
true
