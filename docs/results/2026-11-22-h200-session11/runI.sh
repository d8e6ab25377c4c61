#!/bin/bash
# Session 11, run I (1 x H200): the review's kernel refactor (one seed mechanism in Lists for both layouts; the
# sm90a first round reuses the limits its seed check read). h = review build, g = run H's binary (fb3f2c2).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in g h; do gunzip -c .device-carry/gz/recall-$v.gz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-h
W=$(mktemp -d)/s11I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11I.tgz s11I' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all.txt 2>&1; grep -E "PASS|FAIL" $W/diff-all.txt | sort | uniq -c | head -5; grep -E "^sm_90.*fused" $W/diff-all.txt | head -4
t timeout 100 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-tc.txt 2>&1; tail -2 $W/diff-tc.txt
t timeout 200 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck.txt | tail -2
for q in 128 1024; do for v in h g; do
  t timeout 150 $B/recall-$v bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q-$v.md > $W/knn-q$q-$v.log 2>&1
  echo "== q=$q $v"; grep -h "kernel level" $W/knn-q$q-$v.md | grep -E "knn_bf16|knn_f16" | head -2
done; done
true
