#!/bin/bash
# Session 13, run B (1 x H200): the launch floor on this host (a tiny kernel into mapped memory, waited for by a
# stream synchronise or a spin on its words) next to knn1 and scan1 for one query, binary b (the latency table).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-b; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-b
W=$(mktemp -d)/s13B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s13B.tgz s13B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none"
for rows in 1000 10000; do for k in 10 1; do for m in spin sync; do
  RECALL_ONE_QUERY_WAIT=$m t timeout 60 $R $Q --rows $rows --k $k --out $W/q1-r$rows-k$k-$m.md > $W/q1-r$rows-k$k-$m.log 2>&1
  echo "== rows=$rows k=$k $m"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-k$k-$m.md | cut -c1-120 | head -1
  grep -A16 "Where one small" $W/q1-r$rows-k$k-$m.md | grep "^| [a-z]" | grep -v "^| step"
done; done; done
true
