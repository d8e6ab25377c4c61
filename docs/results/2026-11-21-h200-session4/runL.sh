#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for f in recall gpu-tests pool_bench; do gunzip -c .device-carry/gz/$f.gz > $B/$f; chmod +x $B/$f; done
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runL.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 60 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-3hop.md > $W/spread-3hop.log 2>&1; echo "rc=$?" >> $W/spread-3hop.log
for n in 1000 10000; do timeout 40 $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n.md > $W/knn-n$n.log 2>&1; done
timeout 60 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-q1.md > $W/knn-q1.log 2>&1
timeout 140 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck.txt 2>&1; echo "rc=$?" >> $W/memcheck.txt
timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick > $W/synccheck.txt 2>&1; echo "rc=$?" >> $W/synccheck.txt
timeout 50 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --dim 128 --iters 1 --no-cpu --peer-script none > $W/racecheck-fastknn.txt 2>&1; echo "rc=$?" >> $W/racecheck-fastknn.txt
timeout 40 $R bench cpu-spread --iters 5 --out $W/cpu-spread.md > $W/cpu-spread.log 2>&1; echo "rc=$?" >> $W/cpu-spread.log
