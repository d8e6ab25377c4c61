#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runF.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 150 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
timeout 120 $R bench candidates --peer-script $P --iters 10 --out $W/cand.md > $W/cand.log 2>&1; echo "rc=$?" >> $W/cand.log
timeout 150 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-3hop.md > $W/spread-3hop.log 2>&1; echo "rc=$?" >> $W/spread-3hop.log
timeout 150 $R bench spread --nodes 1000000 --edges 17000000 --hops 1 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread-1hop.md > $W/spread-1hop.log 2>&1; echo "rc=$?" >> $W/spread-1hop.log
for n in 1000 10000 100000; do
  timeout 60 $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n.md > $W/knn-n$n.log 2>&1
done
timeout 100 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-q1.md > $W/knn-q1.log 2>&1
timeout 60 ncu --kernel-name regex:sm80_knn1 --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 5 --no-cpu --peer-script none > $W/ncu-knn1-n1000.txt 2>&1
timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck.txt 2>&1; echo "rc=$?" >> $W/memcheck.txt
timeout 150 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick > $W/racecheck.txt 2>&1; echo "rc=$?" >> $W/racecheck.txt
timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick > $W/synccheck.txt 2>&1; echo "rc=$?" >> $W/synccheck.txt
timeout 150 $R faults kernel-failure --seconds 18 --out $W/faults-kernel-failure.md > $W/faults-kernel-failure.log 2>&1; echo "rc=$?" >> $W/faults-kernel-failure.log
