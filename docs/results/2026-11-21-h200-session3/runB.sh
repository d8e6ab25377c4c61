#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runB.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
( time timeout 150 $R diff-test --arch sm_90 --quick ) > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
for n in 1000 10000 100000; do
  timeout 60 $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 200 --no-cpu --peer-script $P --out $W/knn-n$n.md > $W/knn-n$n.log 2>&1
done
timeout 100 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-q1.md > $W/knn-q1.log 2>&1
RECALL_GPU_CORPUS_BUDGET_MIB=1536 timeout 120 $R bench stream --rows 1000000 --dim 768 --queries 1 --k 10 --chunk-mib 256 --iters 5 --out $W/stream.md > $W/stream.log 2>&1
timeout 60 compute-sanitizer --tool memcheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/memcheck.txt 2>&1; echo "rc=$?" >> $W/memcheck.txt
timeout 60 compute-sanitizer --tool racecheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/racecheck.txt 2>&1; echo "rc=$?" >> $W/racecheck.txt
timeout 60 compute-sanitizer --tool synccheck $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/synccheck.txt 2>&1; echo "rc=$?" >> $W/synccheck.txt
( time timeout 100 $R diff-test --arch sm_80 --quick ) > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
