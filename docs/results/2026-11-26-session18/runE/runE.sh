#!/bin/bash
# Session 18, run E: g = f + list heads generalised (each split publishes ceil(k / n_splits) heads, so the
# launch-wide bound also holds when k > n_splits, e.g. k = 32 at 1,024 queries) against a (331797a).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a g; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-g
W=$(mktemp -d)/s18E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18E.tgz s18E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-g.txt 2>&1; grep -h "fused\|PASS\|FAIL" $W/diff-fast-g.txt | tail -3
t timeout 150 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-g.txt 2>&1; tail -2 $W/diff-tc-g.txt
for kk in 32 10 20; do for v in a g; do
  timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k $kk --iters 5 --no-cpu --peer-script /none --out $W/q1024-k$kk-$v.md > $W/q1024-k$kk-$v.log 2>&1
  echo "== k=$kk $v: $(grep -h 'kernel level: .sm90a_knn' $W/q1024-k$kk-$v.md | cut -d'|' -f3,4 | cut -c1-100 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $W/q1024-k$kk-$v.md | cut -d'|' -f3 | tr '\n' ' ')"
done; done
timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 32 --iters 5 --no-cpu --peer-script benches/peers/peers.py --out $W/q1024-k32-g-peer.md > $W/q1024-k32-g-peer.log 2>&1
grep -h "torch" $W/q1024-k32-g-peer.md | cut -c1-200
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-g.txt 2>&1; echo "all g: $(tail -2 $W/diff-all-g.txt | head -1)"
t timeout 250 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-g.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck-g.txt | tail -2
true
