#!/bin/bash
# Session 35, run F (one GPU host): the staging ring's first use and throughput by chunk size (staging_bench at
# 1fc2e68 plus the bench itself, uncommitted then). Run E measured a one-shot `recall knn` over 24 MiB at 45-61 ms with
# the ring (32 MiB chunks) against 13-18 ms pageable. Three processes: chunks 4, 8, 16, 32 MiB in one, then 8
# alone and 32 alone (each the first ring of its process).
N=${RUN:-s35F}
B=$(mktemp -d); xz -dc .device-carry/staging-bench.xz > $B/staging-bench; chmod +x $B/*
W=$OUT/$N; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/console.txt 2>&1
for c in 4,8,16,32 8 32; do RECALL_COMMIT=1fc2e68 timeout 100 $B/staging-bench --reps 5 --chunks-mib $c > $W/staging-${c//,/-}.md 2>&1; echo "chunks $c: rc=$?" >> $W/console.txt; done
cat $W/console.txt; cat $W/staging-4-8-16-32.md; grep -A6 "First use" $W/staging-8.md $W/staging-32.md
true
