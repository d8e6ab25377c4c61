#!/bin/bash
# Session 12, run E (1 x H200): the review commit g = 7611038 (one step cursor for both sm90a copy paths: the
# sm_90a image's code changed) against e = 2a83376 (the same kernels' logic before): correctness of g (whole quick
# diff-test, memcheck, racecheck), kernel time alternated, one load.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e g; do gunzip -c .device-carry/gz/recall-$v.gz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-g
W=$(mktemp -d)/s12E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s12E.tgz s12E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-g.txt 2>&1; grep -E "^sm_90.*(fused|fast)" $W/diff-all-g.txt | head -6; tail -1 $W/diff-all-g.txt
for q in 128 1024; do for v in g e; do
  t timeout 100 $B/recall-$v bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q-$v.md > $W/knn-q$q-$v.log 2>&1
  echo "== q=$q $v"; grep -h "kernel level" $W/knn-q$q-$v.md | grep -E "knn_bf16|knn_f16|gemm_bf16_cosine. alone" | head -3
done; done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
t timeout 60 $R load $L --tenants 8 --threads-per-tenant 64 --max-batch 1024 --out $W/single-8x64-g.md > $W/single-8x64-g.log 2>&1
echo "== g 8x64"; grep -h "PASS\|FAIL\|calls/s\|knn_single" $W/single-8x64-g.md | head -3
t timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/memcheck-g.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck-g.txt | tail -2
t timeout 60 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --dim 768 --k 10 --iters 1 --no-cpu --peer-script /none > $W/racecheck-g.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $W/racecheck-g.txt | tail -2
true
