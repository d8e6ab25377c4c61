#!/bin/bash
# Session 21, run M: j (a6f59d8: the bundle keeps 3 PTX files, the loader rebuilds the other arches' PTX headers):
# whole quick diff-test on sm_90 (its cubin, and the sm_90a image), every arch's code through PTX JIT
# (--arch all --quick: sm_52-75 and sm_89 from rebuilt texts), one query and fast-mode knn sanity.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-j.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s21M; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21M.tgz s21M' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "sm_90 quick: $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 400 $R diff-test --arch all --quick > $W/diff-all-quick.txt 2>&1; echo "all arches quick: $(grep -h 'PASS\|FAIL' $W/diff-all-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "PTX\|cubin" $W/diff-all-quick.txt | awk '{print $1, $2, $3, $4, $5}' | sort -u | head -14
left 500 && { timeout 60 $R bench knn --queries 1 --rows 1000 --dim 768 --k 10 --iters 100 --no-cpu --peer-script /none --out $W/q1.md > $W/q1.log 2>&1; echo "q1 x 1000: $(grep -h 'Engine::knn_in' $W/q1.md | cut -d'|' -f3)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
