#!/bin/bash
# Session 30, run I (H100): f = the tip 7e96599 (0b440a5 has the same code) against m = main (ac836fc), with the peer:
# one query x 1,000 / 10,000 rows x 768, top-10, served, f and m alternated, two rounds; the peer (torch, peers.py)
# in f's first round of each size; f's knn1 group in full first.
N=${RUN:-s30I}
P=benches/peers/peers.py
B=$(mktemp -d); for v in m f; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; python3 -c 'import torch; print("torch", torch.__version__)'; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 30 $B/recall-f diff-test --arch sm_90 --group knn1 > $W/diff-knn1-f.txt 2>&1; echo "f knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-f.txt | tail -1) $(( $(date +%s) - T0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) peer $(grep -h '^| peer\|torch' $f | head -2 | cut -d'|' -f2,3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in f m; do
  PP=/none; [ $rep = 1 ] && [ $v = f ] && PP=$P
  f=$W/q1-r$rows-$v-$rep.md
  timeout 120 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > $W/q1-r$rows-$v-$rep.log 2>&1
  show $f "$rep x$rows $v"
done; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
# Then, on the same warm machine (runI/more): four more rounds at 10,000 rows, f and m alternated, no peer:
#   for rep in 1 2 3 4; do for v in f m; do RECALL_KNN1_SERVE=on recall-$v bench knn --queries 1 --rows 10000 \
#     --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out runI/more/q1-r10000-$v-$rep.md; done; done
