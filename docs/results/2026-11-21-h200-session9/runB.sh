#!/bin/bash
# Session 9 (prepared in session 8): diff-test sm_90 quick (covers c2e0905's group tables and e732318's shared
# knn1/scan1 round trip, neither yet run on a GPU), then the device-lost and
# kernel-failure drills on the final binary (they last ran at 022b638), each with room for the CPU re-check.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9B; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; tail -n 1 $W/difftest-sm90-quick.txt
t timeout 230 $R faults device-lost --seconds 18 --out $W/faults-device-lost.md > $W/faults-device-lost.log 2>&1; tail -n 1 $W/faults-device-lost.log
t timeout 270 $R faults kernel-failure --seconds 18 --out $W/faults-kernel-failure.md > $W/faults-kernel-failure.log 2>&1; tail -n 1 $W/faults-kernel-failure.log
pkill -f "recall hog" || true
true
