#!/bin/bash
# Session 24, run C (binary c = b60ef63, main's code): one query x 100 / 1,000 / 4,096 / 10,000 / 16,384 rows x 768,
# top-10, Engine::knn_in served and launched, two rounds (torch in the first); then 10,000 rows served with the
# lists merged on the host, by the groups (the default there) and on the device, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s24C}
B=$(mktemp -d); xz -dc .device-carry/recall-c.xz > $B/c; chmod +x $B/c; R=$B/c
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
P=benches/peers/peers.py
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) b0 $(grep -h "block 0" $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'torch.topk' $f | cut -d'|' -f3)"; }
for rep in 1 2; do for rows in 100 1000 4096 10000 16384; do for sv in on off; do left 300 || break
  PP=/none; [ $rep = 1 ] && [ $sv = off ] && PP=$P
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $f > /dev/null 2>&1
  show $f "$rep x$rows $sv"
done; done; done
for rep in 1 2; do for m in host groups device; do left 420 || break
  f=$W/q1-r10000-merge-$m-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=$m $R bench knn --queries 1 --rows 10000 --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x10000 merge $m"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
