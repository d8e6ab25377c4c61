#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runJ.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 100 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 100 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-3hop.md > $W/spread-3hop.log 2>&1; echo "rc=$?" >> $W/spread-3hop.log
timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; echo "rc=$?" >> $W/knn-1024.log
timeout 60 ncu --kernel-name sm80_gemm_cosine --launch-skip 4 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-sgemm.txt 2>&1
timeout 40 ncu --kernel-name regex:spread_hop --launch-skip 4 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/ncu-spread-hop.txt 2>&1
timeout 80 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
timeout 80 $R diff-test --arch sm_70 --quick > $W/difftest-sm70-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm70-quick.txt
for t in racecheck memcheck synccheck; do timeout 60 compute-sanitizer --tool $t $R bench knn --queries 200 --rows 20000 --dim 100 --iters 1 --no-cpu --peer-script none > $W/$t-sgemm.txt 2>&1; echo "rc=$?" >> $W/$t-sgemm.txt; done
