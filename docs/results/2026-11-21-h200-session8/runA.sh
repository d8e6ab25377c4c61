#!/bin/bash
# Session 8, run A (1 x H200): lead 4689166 (main 2263829 plus the faults progress line).
# diff-test sm_90 quick; initcheck and synccheck over it; then the vram-pressure drill with the time left.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s8A; mkdir -p $W
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; compute-sanitizer --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; tail -n 1 $W/difftest-sm90-quick.txt
t timeout 90 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick > $W/initcheck-difftest.txt 2>&1; tail -n 2 $W/initcheck-difftest.txt
t timeout 90 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick > $W/synccheck-difftest.txt 2>&1; tail -n 2 $W/synccheck-difftest.txt
LEFT=$(( 585 - ($(date +%s) - T0) ))
echo "vram-pressure limit $LEFT s"
t timeout $LEFT $R faults vram-pressure --seconds 18 --out $W/faults-vram-pressure.md > $W/faults-vram-pressure.log 2>&1; tail -n 4 $W/faults-vram-pressure.log
true
