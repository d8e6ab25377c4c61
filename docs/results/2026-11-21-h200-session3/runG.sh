#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runG.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
timeout 60 compute-sanitizer --tool racecheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-knn1.txt 2>&1; echo "rc=$?" >> $W/racecheck-knn1.txt
timeout 90 compute-sanitizer --tool racecheck $R bench candidates --rows 100000 --batch-queries 64 --iters 1 --no-cpu --peer-script none > $W/racecheck-cand.txt 2>&1; echo "rc=$?" >> $W/racecheck-cand.txt
timeout 90 compute-sanitizer --tool racecheck $R bench spread --nodes 100000 --edges 1600000 --hops 3 --iters 1 --no-cpu --peer-script none > $W/racecheck-spread.txt 2>&1; echo "rc=$?" >> $W/racecheck-spread.txt
timeout 200 $R faults vram-pressure --seconds 18 --out $W/faults-vram-pressure.md > $W/faults-vram-pressure.log 2>&1; echo "rc=$?" >> $W/faults-vram-pressure.log
pkill -f "recall hog" || true
