#!/bin/bash
# Run D (1 x H200): sm80_scan1 (branch scan) and the candidate slices: diff-test sm_90/sm_80 quick; bench knn
# 1 x 1M x 768 with RECALL_SCAN1=old|new|new-s8 (+ variants); bench candidates 8 and 1,024 queries; the mixed load
# in fast bf16 with batches of 512. Binary: lead 2e37cad.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runD.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
tail -3 $W/difftest-sm90-quick.txt
for m in old new new-s8; do
  t timeout 90 env RECALL_SCAN1=$m $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-$m.md > $W/knn-$m.log 2>&1
done
t timeout 90 env RECALL_SCAN1=new RECALL_SCAN1_L2_AHEAD=8 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script none --out $W/knn-new-pf8.md > $W/knn-new-pf8.log 2>&1
t timeout 90 env RECALL_SCAN1=new RECALL_SCAN1_WARPS=6 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script none --out $W/knn-new-w6.md > $W/knn-new-w6.log 2>&1
t timeout 90 $R bench candidates --rows 1000000 --dim 768 --batch-queries 8 --candidates 1000 --k 10 --no-cpu --peer-script $P --out $W/cand-8.md > $W/cand-8.log 2>&1
t timeout 90 $R bench candidates --rows 1000000 --dim 768 --batch-queries 1024 --candidates 1000 --k 10 --no-cpu --peer-script $P --out $W/cand-1024.md > $W/cand-1024.log 2>&1
t timeout 100 $R load --rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 16 --verify 128 --coalesce --batch-across-tenants --max-batch 512 --duration 30 --mode fast-bf16 --out $W/load-bf16.md > $W/load-bf16.log 2>&1
t timeout 120 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1
true
