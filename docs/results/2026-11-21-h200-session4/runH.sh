#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runH.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; which nsys ncu; } > $W/info.txt 2>&1
timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 120 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-3hop.md > $W/spread-3hop.log 2>&1; echo "rc=$?" >> $W/spread-3hop.log
timeout 60 ncu --kernel-name regex:spread_hop --launch-skip 8 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/ncu-spread-hop.txt 2>&1
NS=$(which nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NS" ]; then timeout 90 $NS profile -o $W/spread3 --force-overwrite true --stats=true $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --iters 3 --no-cpu --peer-script none > $W/nsys-spread3.txt 2>&1; rm -f $W/spread3.nsys-rep $W/spread3.sqlite; fi
