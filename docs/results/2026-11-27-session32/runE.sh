#!/bin/bash
# Session 32, run E (H200, diagnostic): the out-of-core knn's staged path (a plain slice over a 1.5 GiB budget, 1 M x 768,
# 1 query) against the staging chunk size, at 9a64895: where its time goes (each call allocates its two pinned
# staging buffers).
N=${RUN:-s32E}
B=$(mktemp -d); xz -dc .device-carry/recall-t.xz > $B/recall-t; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for mib in 16 64 256 1024; do
  RECALL_GPU_CORPUS_BUDGET_MIB=1536 timeout 100 $B/recall-t bench stream --rows 1000000 --dim 768 --queries 1 --k 10 --chunk-mib $mib --iters 5 --out $W/stream-c$mib.md > $W/stream-c$mib.log 2>&1
  echo "chunk $mib MiB: rc=$? $(grep -h 'plain slice\|registered' $W/stream-c$mib.md | cut -d'|' -f3 | tr '\n' ' ')"
done
true
