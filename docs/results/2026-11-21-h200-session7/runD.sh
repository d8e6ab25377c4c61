#!/bin/bash
# Session 7, run D (1 x H200): the three real-fault drills with lanes and spreading slots (lead, see info).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s7D; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R faults device-lost --seconds 24 --out $W/faults-device-lost.md > $W/faults-device-lost.log 2>&1; tail -1 $W/faults-device-lost.log
t timeout 170 $R faults kernel-failure --seconds 18 --out $W/faults-kernel-failure.md > $W/faults-kernel-failure.log 2>&1; tail -1 $W/faults-kernel-failure.log
t timeout 190 $R faults vram-pressure --seconds 18 --out $W/faults-vram-pressure.md > $W/faults-vram-pressure.log 2>&1; tail -1 $W/faults-vram-pressure.log
true
