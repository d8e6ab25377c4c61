#!/bin/bash
# Session 35, run C (one GPU host): m = main before this session (ff5bef0), n = run A's s35 (33ffded: staged uploads,
# knn_batch), c = s35 at b462349 (n + knn over a few-block corpus split by queries too + staged downloads of large
# results).
# 1. c's GPU tests (facade, memory-pool) and the quick diff-test.
# 2. pool_bench, 1 GiB: host-to-device and device-to-host rows.
# 3. `recall bench cosine` (every score, 64 queries over 500,000 x 768: a 128 MB result) and `recall bench noise`,
#    m and c, PyTorch as the peer where installed.
# 4. `recall bench break-even --ops knn_batch,clip_and_noise` for n and c (the CPU's few-block knn; clip-and-noise's
#    GPU side with the staged download), fresh caches.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35C}
B=$(mktemp -d); for v in recall-m recall-n recall-c gpu-test-c pool-gpu-c pool-bench-c; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c 'import torch; print("torch", torch.__version__)'; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test-c --test-threads 1 > $W/gpu-test-c.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-c.txt)"; grep -E "panicked|skip|FAILED" $W/gpu-test-c.txt | head -5
T0=$(date +%s); timeout 100 $B/pool-gpu-c --test-threads 1 > $W/pool-gpu-c.txt 2>&1; echo "memory-pool gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-gpu-c.txt)"; grep -E "panicked|skip|FAILED" $W/pool-gpu-c.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-c diff-test --arch sm_90 --quick > $W/diff-quick-c.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-c.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); RECALL_COMMIT=b462349 timeout 200 $B/pool-bench-c --corpus-mib 1024 --reps 5 --staged-chunk-mib 32 > $W/pool-bench-c.md 2>&1; echo "pool bench: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (pageable|staged|pinned)" $W/pool-bench-c.md | grep -v "scan" | head -16
for v in m c; do
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 120 $B/recall-$v bench cosine --rows 500000 --dim 768 --queries 64 --iters 5 --out $W/cosine-$v.md > $W/cosine-$v.txt 2>&1; echo "cosine $v: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| " $W/cosine-$v.md | tail -n +3
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 120 $B/recall-$v bench noise --rows 200000 --iters 5 --out $W/noise-$v.md > $W/noise-$v.txt 2>&1; echo "noise $v: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| " $W/noise-$v.md | tail -n +3
done
for v in n c; do
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 100 $B/recall-$v bench break-even --ops knn_batch,clip_and_noise --out $W/break-even-$v.md > $W/break-even-$v.txt 2>&1; echo "break-even $v: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (knn_batch|clip_and_noise) " $W/break-even-$v.md
done
echo "total $(( $(date +%s) - S0 )) s"
true
