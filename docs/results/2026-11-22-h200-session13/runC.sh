#!/bin/bash
# Session 13, run C (1 x H200): why one warp's knn1 is slow: ncu full sets with stall reasons for knn1 at 32 rows
# (one warp) and 1,000 rows, query copied (RECALL_ONE_QUERY_INPUT_MAX_BYTES=0) and from mapped memory; binary b.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-b; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-b
W=$(mktemp -d)/s13C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s13C.tgz s13C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
Q="bench knn --dim 768 --queries 1 --iters 2 --no-cpu --peer-script /none"
for c in "32 1 0" "32 1 100000000" "1000 10 0" "1000 10 100000000" "4096 10 0"; do set -- $c
  RECALL_ONE_QUERY_INPUT_MAX_BYTES=$3 t timeout 100 ncu --set full --import-source no --print-details all -k regex:sm80_knn1 -c 1 $R $Q --rows $1 --k $2 > $W/ncu-r$1-k$2-m$3.txt 2>&1
  echo "== rows=$1 k=$2 inputmax=$3"; grep -E "^\s+(Duration|Elapsed Cycles|SM Active Cycles|Warp Cycles Per Issued|Issued Instructions  )" $W/ncu-r$1-k$2-m$3.txt | head -5
  grep -iE "stall|throttle|scoreboard" $W/ncu-r$1-k$2-m$3.txt | grep -vE "^\s+(OPT|INF)" | head -24
done
true
