#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
PB=$PWD/.device-carry/pool
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runD.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
( time timeout 150 $R diff-test --arch sm_90 --quick ) > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
for n in 1000 10000 100000 262144; do
  timeout 60 $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n.md > $W/knn-n$n.log 2>&1
done
timeout 60 $R bench knn --rows 10000 --dim 768 --queries 1 --k 100 --iters 200 --no-cpu --peer-script $P --out $W/knn-n10000-k100.md > $W/knn-n10000-k100.log 2>&1
timeout 60 ncu --kernel-name regex:sm80_knn1 --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 5 --no-cpu --peer-script none > $W/ncu-knn1-n10000.txt 2>&1
timeout 60 compute-sanitizer --tool memcheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/memcheck.txt 2>&1; echo "rc=$?" >> $W/memcheck.txt
timeout 60 compute-sanitizer --tool racecheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/racecheck.txt 2>&1; echo "rc=$?" >> $W/racecheck.txt
timeout 60 compute-sanitizer --tool synccheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/synccheck.txt 2>&1; echo "rc=$?" >> $W/synccheck.txt
timeout 90 $PB/gpu-tests --test-threads=1 --nocapture > $W/pool-gpu-tests.txt 2>&1; echo "rc=$?" >> $W/pool-gpu-tests.txt
timeout 90 compute-sanitizer --tool memcheck $PB/gpu-tests --test-threads=1 --skip gpu_driver_oom > $W/pool-memcheck.txt 2>&1; echo "rc=$?" >> $W/pool-memcheck.txt
RECALL_COMMIT=f825582 timeout 120 $PB/pool_bench > $W/pool-bench.md 2> $W/pool-bench.err; echo "rc=$?" >> $W/pool-bench.err
RECALL_COMMIT=f825582 timeout 90 $PB/pool_bench --streams 8 --chunk-mib 32 > $W/pool-bench-s8.md 2>> $W/pool-bench.err
( time timeout 120 $R diff-test --arch sm_80 --quick ) > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
