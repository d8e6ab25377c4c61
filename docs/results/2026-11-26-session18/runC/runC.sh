#!/bin/bash
# Session 18, run C: a (331797a: chunked quick tests + lazy merge) against m (main) and c (a without the list heads)
# at 128 / 512 / 1,024 queries; the single-query load (dynamic batching, fast bf16); racecheck and synccheck of a.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in m a c; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-a
W=$(mktemp -d)/s18C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18C.tgz s18C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
timeout 120 $B/recall-c diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-c.txt 2>&1; echo "diff c: $(tail -1 $W/diff-fast-c.txt)"
timeout 120 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-tc-a.txt 2>&1; echo "diff tc a: $(tail -1 $W/diff-tc-a.txt)"
for q in 128 512 1024; do for v in m a c; do
  timeout 150 $B/recall-$v bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script /none --out $W/q$q-$v.md > $W/q$q-$v.log 2>&1
  echo "== q=$q $v: $(grep -h 'kernel level: .sm90a_knn' $W/q$q-$v.md | cut -d'|' -f3 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $W/q$q-$v.md | cut -d'|' -f3 | tr '\n' ' ')"
done; done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for v in m a; do
  t timeout 60 $B/recall-$v load $L --tenants 8 --threads-per-tenant 64 --max-batch 1024 --out $W/single-8x64-$v.md > $W/single-8x64-$v.log 2>&1
  echo "== load $v 8x64"; grep -h "PASS\|FAIL\|calls/s\|knn_single" $W/single-8x64-$v.md | head -5 | cut -c1-200
done
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --dim 768 --k 10 --iters 1 --no-cpu --peer-script /none > $W/racecheck-a.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard" $W/racecheck-a.txt | tail -2
t timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/synccheck-a.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-a.txt | tail -1
true
