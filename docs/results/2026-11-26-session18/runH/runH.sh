#!/bin/bash
# Session 18, run H: where i's 3-4 % at k = 10 comes from: j = a + only the TMA issuer flag change of i.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a i j; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s18H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18H.tgz s18H' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $W/info.txt 2>&1
timeout 100 $B/recall-j diff-test --arch sm_90 --quick --group fused-fast > $W/diff-fast-j.txt 2>&1; tail -1 $W/diff-fast-j.txt
for n in 1 2; do for v in a j i; do
  timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script /none --out $W/q1024-k10-$v-$n.md > /dev/null 2>&1
  f=$W/q1024-k10-$v-$n.md
  echo "== k=10 $v $n: $(grep -h 'kernel level: .sm90a_knn' $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -c 'select_topk: yes' $f) yes"
done; done
true
