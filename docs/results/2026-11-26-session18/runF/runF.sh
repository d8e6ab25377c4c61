#!/bin/bash
# Session 18, run F: h = split heads generalised (ceil(k / n_splits) a split), the TMA issuer flag no longer kept
# in a register (no spill in the main loop) — against a (331797a) at k = 10, 20, 32; correctness and sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a h; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-h
W=$(mktemp -d)/s18F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18F.tgz s18F' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-h.txt 2>&1; grep -h "fused\|PASS\|FAIL" $W/diff-fast-h.txt | tail -3
t timeout 150 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-h.txt 2>&1; tail -2 $W/diff-tc-h.txt
for kk in 10 32 20 10; do for v in a h; do
  timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k $kk --iters 5 --no-cpu --peer-script /none --out $W/q1024-k$kk-$v-$RANDOM.md > $W/last.log 2>&1
  f=$(ls -t $W/q1024-k$kk-$v-*.md | head -1)
  echo "== k=$kk $v: $(grep -h 'kernel level: .sm90a_knn' $f | cut -d'|' -f3 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -c 'select_topk: yes' $f) yes"
done; done
timeout 150 $B/recall-a bench knn --queries 128 --rows 1000000 --dim 768 --k 32 --iters 5 --no-cpu --peer-script /none --out $W/q128-k32-a.md > /dev/null 2>&1
timeout 150 $R bench knn --queries 128 --rows 1000000 --dim 768 --k 32 --iters 5 --no-cpu --peer-script /none --out $W/q128-k32-h.md > /dev/null 2>&1
for v in a h; do echo "== q128 k=32 $v: $(grep -h 'kernel level: .sm90a_knn' $W/q128-k32-$v.md | cut -d'|' -f3 | tr '\n' ' ')"; done
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-h.txt 2>&1; echo "all h: $(tail -2 $W/diff-all-h.txt | head -1)"
t timeout 250 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-h.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-h.txt | tail -1
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --dim 768 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-h.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-h.txt | tail -1
true
