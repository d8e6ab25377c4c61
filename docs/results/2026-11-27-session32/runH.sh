#!/bin/bash
# Session 32, run H (H200): main's tip (9d601cb) on a GPU: the facade's GPU tests, the host-pool tests (rayon's global
# pool at one thread), memory-pool's GPU tests, the whole quick diff-test, the knn1 group in full, and recall demo.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s32H}
B=$(mktemp -d); for v in recall-t gpu-test-t streamed-t pool-gpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for t in gpu-test-t streamed-t pool-gpu-t; do
  T0=$(date +%s); timeout 200 $B/$t --test-threads 1 > $W/$t.txt 2>&1; echo "$t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/$t.txt)"; grep -E "panicked" $W/$t.txt | head -3
done
R=$B/recall-t
T0=$(date +%s); timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - T0 ))s"
timeout 60 $R demo > $W/demo.txt 2>&1; echo "demo: rc=$? $(grep -ci 'bit-identical' $W/demo.txt) bit-identical lines"
echo "total $(( $(date +%s) - S0 )) s"
true
