#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runE.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
( time timeout 150 $R diff-test --arch sm_90 --quick ) > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
for n in 1000 10000; do
  timeout 60 $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n.md > $W/knn-n$n.log 2>&1
done
timeout 60 ncu --kernel-name regex:sm80_knn1 --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 5 --no-cpu --peer-script none > $W/ncu-knn1-n10000.txt 2>&1
for s in kernel-failure device-lost vram-pressure; do
  timeout 90 $R faults $s --seconds 24 --out $W/faults-$s.md > $W/faults-$s.log 2>&1; echo "rc=$?" >> $W/faults-$s.log
done
( time timeout 200 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick ) > $W/initcheck.txt 2>&1; echo "rc=$?" >> $W/initcheck.txt
MALLOC_MMAP_THRESHOLD_=1048576 timeout 100 $R load --rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 8 --duration 60 --verify 128 --coalesce --batch-across-tenants --max-batch 128 --out $W/load-coalesce.md > $W/load-coalesce.log 2>&1; echo "rc=$?" >> $W/load-coalesce.log
