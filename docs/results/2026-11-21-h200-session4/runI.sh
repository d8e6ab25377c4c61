#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runI.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 100 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 100 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-3hop.md > $W/spread-3hop.log 2>&1; echo "rc=$?" >> $W/spread-3hop.log
timeout 60 ncu --kernel-name regex:spread_hop --launch-skip 4 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/ncu-spread-hop.txt 2>&1
timeout 100 $R diff-test --arch sm_61 --quick > $W/difftest-sm61-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm61-quick.txt
timeout 100 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
timeout 90 compute-sanitizer --tool racecheck $R bench spread --nodes 100000 --edges 1600000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/racecheck-spread.txt 2>&1; echo "rc=$?" >> $W/racecheck-spread.txt
timeout 90 compute-sanitizer --tool memcheck $R bench spread --nodes 100000 --edges 1600000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/memcheck-spread.txt 2>&1; echo "rc=$?" >> $W/memcheck-spread.txt
