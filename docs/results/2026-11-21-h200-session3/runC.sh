#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runC.tgz .' EXIT
for n in 1000 1000000; do
timeout 120 ncu --kernel-name regex:sm80_knn1 --launch-skip 3 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 5 --no-cpu --peer-script none > $W/ncu-knn1-n$n.txt 2>&1
done
