#!/bin/bash
# Session 19, run C: n (m + the finite / range checks of large inputs in parallel pieces) against m and a (main):
# 1,024 queries fast e2e; the single-query load with dynamic batching (8 x 64 callers, fast bf16).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a m n; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-n
W=$(mktemp -d)/s19C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19C.tgz s19C' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
kb() { # kb name bin k [env]
  local f=$W/q1024-$1.md
  timeout 100 env $4 $B/recall-$2 bench knn --queries 1024 --rows 1000000 --dim 768 --k $3 --iters 7 --no-cpu --peer-script /none --out $f > $W/q1024-$1.log 2>&1
  echo "== $1: $(grep -h 'kernel level: .\(sm90a\|tc\)_knn' $f | cut -d'|' -f3 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $f | cut -d'|' -f3 | tr '\n' ' ') exact e2e: $(grep -h 'Engine::knn_in. (corpus' $f | cut -d'|' -f3) $(grep -c 'select_topk: yes' $f) yes"
}
for r in 1 2; do for v in a n m; do kb k10-$v-$r $v 10; done; done
grep -h "host checks" $W/q1024-k10-n-*.md | cut -c1-200
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for v in a n; do left 400 || continue
  t timeout 60 $B/recall-$v load $L --tenants 8 --threads-per-tenant 64 --max-batch 1024 --out $W/single-8x64-$v.md > $W/single-8x64-$v.log 2>&1
  echo "== load $v 8x64"; grep -h "PASS\|FAIL\|calls/s\|knn_single" $W/single-8x64-$v.md | head -5 | cut -c1-200
done
echo "total $(( $(date +%s) - S0 )) s"
true
