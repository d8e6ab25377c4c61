#!/bin/bash
# Run V (1 x H200): the one-pass dense seed check (engine spread_in), spreading twice; diff-test. Binary: lead (commit in md).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runV.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu"
for i in 1 2 3; do t timeout 60 $R bench spread $A --peer-script $P --out $W/spread-$i.md > $W/spread-$i.log 2>&1; done
