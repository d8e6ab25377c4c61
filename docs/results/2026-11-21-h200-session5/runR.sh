#!/bin/bash
# Run R (1 x H200): dense spreading hop A/B: spread_hop (u64, 48 regs) vs spread_hop32 (40 regs) vs spread_hop32x8 (32 regs),
# hub serial vs beside; bits checked by diff-test. Binary: lead 6e3b7ea.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runR.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu"
timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
RECALL_SPREAD_HOP=32x8 timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick-32x8.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick-32x8.txt
timeout 60 $R bench spread $A --peer-script $P --out $W/spread-new.md > $W/spread-new.log 2>&1; echo "rc=$?" >> $W/spread-new.log
RECALL_SPREAD_HOP=64 RECALL_SPREAD_HUB=serial timeout 60 $R bench spread $A --peer-script $P --out $W/spread-old.md > $W/spread-old.log 2>&1; echo "rc=$?" >> $W/spread-old.log
RECALL_SPREAD_HOP=32x8 timeout 60 $R bench spread $A --peer-script none --out $W/spread-32x8.md > $W/spread-32x8.log 2>&1; echo "rc=$?" >> $W/spread-32x8.log
RECALL_SPREAD_HUB=serial timeout 60 $R bench spread $A --peer-script none --out $W/spread-32-serial.md > $W/spread-32-serial.log 2>&1; echo "rc=$?" >> $W/spread-32-serial.log
RECALL_SPREAD_HOP=64 timeout 60 $R bench spread $A --peer-script none --out $W/spread-64-beside.md > $W/spread-64-beside.log 2>&1; echo "rc=$?" >> $W/spread-64-beside.log
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy"
for v in 32 32x8; do RECALL_SPREAD_HOP=$v timeout 100 ncu --clock-control none $S -k regex:"spread_h" --launch-skip 12 --launch-count 4 $R bench spread $A --iters 1 --peer-script none > $W/ncu-$v.txt 2>&1; done
