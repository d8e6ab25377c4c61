#!/bin/bash
# Session 15, run E (1 x H200): the final binary e = 6d944f5 (sm90a_knn1: one bulk copy a row queued by lane 0,
# chains loading ahead, warp sort) against a (main 035f24f), alternated, torch alongside; whole quick diff-test
# (chain_tile's refactor reaches the other dense kernels) and the three sanitizers over knn1.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a e; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-e
W=$(mktemp -d)/s15E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s15E.tgz s15E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-e.txt 2>&1; tail -1 $W/diff-all-e.txt
RECALL_KNN1_BULK=off timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-e-bulkoff.txt 2>&1; tail -1 $W/diff-knn1-e-bulkoff.txt
timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 768 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-e.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-e.txt | tail -1
timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-e.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-e.txt | tail -1
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-e.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-e.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-e.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-e.txt | tail -1
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2; do for v in a e; do
  P=/none; [ $rep = 1 ] && [ $v = e ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-e-1.md | cut -c1-150; done
grep -h "tiny kernel\|knn1: query in" $W/q1-r1000-e-1.md
true
