#!/bin/bash
# Session 18, run D: f = a + diff-test cases where each block walks ~10 row tiles (lazy merge across tiles, ties,
# rising scores); fused-fast under memcheck; k = 1 and 32 for m (main before) and a.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in m a f; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-f
W=$(mktemp -d)/s18D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18D.tgz s18D' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-f.txt 2>&1; grep -h "fused\|PASS\|FAIL" $W/diff-fast-f.txt | tail -4
t timeout 150 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-f.txt 2>&1; tail -2 $W/diff-tc-f.txt
t timeout 150 $B/recall-m diff-test --arch sm_90 --quick --group fused-fast > $W/diff-fast-m.txt 2>&1; tail -2 $W/diff-fast-m.txt
for kk in 1 32; do for v in m a; do
  timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k $kk --iters 5 --no-cpu --peer-script /none --out $W/q1024-k$kk-$v.md > $W/q1024-k$kk-$v.log 2>&1
  echo "== k=$kk $v: $(grep -h 'kernel level: .sm90a_knn' $W/q1024-k$kk-$v.md | cut -d'|' -f3,4 | cut -c1-100 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $W/q1024-k$kk-$v.md | cut -d'|' -f3 | tr '\n' ' ')"
done; done
t timeout 250 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-f.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck-f.txt | tail -2
true
