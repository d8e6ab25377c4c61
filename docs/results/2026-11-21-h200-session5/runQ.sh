#!/bin/bash
# Run Q (1 x H200): where the dense spreading hop's time goes, ours (spread_hub, spread_hop) against cuSPARSE's SpMV kernel. Binary: lead 20d763a.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runQ.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; which ncu nsys; } > $W/info.txt 2>&1
G=/tmp/recall-bench-graph
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100"
timeout 90 $R bench spread $A --iters 20 --no-cpu --peer-script $P --graph-dir $G --out $W/spread.md > $W/spread.log 2>&1; echo "rc=$?" >> $W/spread.log
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats --section WarpStateStats"
timeout 150 ncu --clock-control none $S -k regex:"spread_h" --launch-count 24 $R bench spread $A --iters 1 --no-cpu --peer-script none --graph-dir /tmp/g2 > $W/ncu-ours.txt 2>&1; echo "rc=$?" >> $W/ncu-ours.txt
timeout 120 ncu --clock-control none $S -k regex:"csr|spmv|SpMV|Spmv" --launch-count 3 python3 $P spread --graph-dir $G --hops 3 --iters 1 > $W/ncu-cusparse.txt 2>&1; echo "rc=$?" >> $W/ncu-cusparse.txt
timeout 60 nsys profile -o $W/nsys-spread --stats=true $R bench spread $A --iters 3 --no-cpu --peer-script none --graph-dir /tmp/g3 > $W/nsys.txt 2>&1; echo "rc=$?" >> $W/nsys.txt
rm -f $W/nsys-spread.nsys-rep $W/nsys-spread.sqlite
