#!/bin/bash
# Session 21, run N: k (102cb48: one loader for a bundle image): whole quick diff-test on sm_90 (cubin + sm_90a
# image), sm_89 and sm_75 through their rebuilt PTX.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-k.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s21N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21N.tgz s21N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "sm_90 quick: $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1); $(grep -h 'sm_90a' $W/diff-quick.txt | head -1 | awk '{print $1, $2, $3, $4, $5, $6, $7}')"
for a in sm_89 sm_75; do timeout 120 $R diff-test --arch $a --quick > $W/diff-$a.txt 2>&1; echo "$a quick: $(grep -h 'PASS\|FAIL' $W/diff-$a.txt | tail -1); $(grep -h 'PTX' $W/diff-$a.txt | head -1 | awk '{print $1, $2, $3, $4, $5}')"; done
echo "total $(( $(date +%s) - S0 )) s"
true
