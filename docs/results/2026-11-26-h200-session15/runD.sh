#!/bin/bash
# Session 15, run D (1 x H200): sm90a_knn1 with 4 (b), 2 (b2) and 1 (b1) column chunks a row (bulk copies queued by
# lane 0: 32 per chunk) against a (main 035f24f), alternated; correctness of b1 and b2; torch alongside b.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a b b1 b2; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s15D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s15D.tgz s15D' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
for v in b1 b2; do timeout 100 $B/recall-$v diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$v.txt 2>&1; echo "diff $v: $(tail -1 $W/diff-knn1-$v.txt)"; done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096; do for rep in 1 2; do for v in a b b1 b2; do
  P=/none; [ $rep = 1 ] && [ $v = b ] && [ $rows = 1000 ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
grep -h "torch.topk" $W/q1-r1000-b-1.md | cut -c1-160
grep -h "tiny kernel\|knn1: query in" $W/q1-r1000-b-1.md
true
