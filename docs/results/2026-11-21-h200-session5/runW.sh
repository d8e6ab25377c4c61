#!/bin/bash
# Run W (1 x H200): the session's final binary: diff-test sm_90 (full) and sm_80 quick. Binary: lead 49bd907.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runW.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 > $W/difftest-sm90-full.txt 2>&1
t timeout 100 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1
