#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for f in recall gpu-tests pool_bench; do gunzip -c .device-carry/gz/$f.gz > $B/$f; chmod +x $B/$f; done
R=$B/recall; PB=$B/pool_bench; GT=$B/gpu-tests
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runK.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 120 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; echo "rc=$?" >> $W/knn-1024.log
timeout 90 $GT --test-threads=1 --nocapture > $W/pool-gpu-tests.txt 2>&1; echo "rc=$?" >> $W/pool-gpu-tests.txt
RECALL_COMMIT=55e3661 timeout 150 $PB > $W/pool-bench.txt 2>&1; echo "rc=$?" >> $W/pool-bench.txt
timeout 80 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
for t in memcheck racecheck; do timeout 70 compute-sanitizer --tool $t $R bench knn --queries 256 --rows 20000 --iters 1 --no-cpu --peer-script none > $W/$t-fastknn.txt 2>&1; echo "rc=$?" >> $W/$t-fastknn.txt; done
timeout 45 ncu --kernel-name regex:tc_knn_f16_cosine --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-tcknn.txt 2>&1
