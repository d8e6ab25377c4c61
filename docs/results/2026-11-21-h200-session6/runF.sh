#!/bin/bash
# Run F (1 x H200): the session's last binary (knn1/scan1 share their query staging): diff-test sm_90 and sm_80
# quick, memcheck over the sm_90 quick diff-test, bench knn 1 x 1M x 768. Binary: lead 8696efe.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runF.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
t timeout 150 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1
t timeout 90 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-default.md > $W/knn-default.log 2>&1
t timeout 220 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck-difftest.txt 2>&1
tail -2 $W/memcheck-difftest.txt
true
