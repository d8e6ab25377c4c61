#!/bin/bash
# Session 23, run H (binary s, the s23 working tree, run G's kernels plus counts): does the server answer, or
# fail and launch? knn1 diff-test in full (now failing on any server failure), and one query x 1,000 / 10,000
# rows served with the server's counts and block 0's device-clock span.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23H}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "knn1\|ERROR" $W/diff-knn1.txt | head -6
for rows in 1000 10000 4096; do
  f=$W/q1-r$rows.md
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > $f.log 2>&1
  echo "x$rows:"; grep -h "knn1" $f
done
echo "total $(( $(date +%s) - S0 )) s"
true
