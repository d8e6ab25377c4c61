#!/bin/bash
# Session 34, run E (one GPU host): k-means' calibration probe. m = main (027a28e: k-means probed with 16 clusters),
# k = the same with 256 clusters (and the cache format 3). Fresh calibration caches. `recall info` (where each op
# would run), `recall bench break-even --ops kmeans` (calibrated against swept, k), and `recall demo` for m and k
# in turn (which device ran the demo's k-means, 200,000 x 384, 256 anchors, 3 iterations, and how long it took).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s34E}
B=$(mktemp -d); for v in recall-m recall-k; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
for v in m k; do
  export RECALL_CACHE_DIR=$(mktemp -d)
  timeout 60 $B/recall-$v info > $W/info-$v.txt 2>&1; echo "info $v: rc=$?"; grep -i -E "kmeans|k-means" $W/info-$v.txt | head -4
  timeout 90 $B/recall-$v demo > $W/demo-$v.txt 2>&1; echo "demo $v: rc=$?"; grep -E "k-means|knn top" $W/demo-$v.txt
  timeout 90 $B/recall-$v demo > $W/demo-$v-2.txt 2>&1; echo "demo $v again (cached calibration): rc=$?"; grep -E "k-means" $W/demo-$v-2.txt
done
T0=$(date +%s); timeout 200 $B/recall-k bench break-even --ops kmeans --out $W/break-even-k.md > $W/break-even-k.txt 2>&1; echo "break-even k: rc=$? $(( $(date +%s) - T0 ))s"; tail -12 $W/break-even-k.txt
echo "total $(( $(date +%s) - S0 )) s"
true
