#!/bin/bash
# Session 33, run F (one H200 host): t = s33 tip (the host pool waited for on a plain thread by a rayon worker that
# holds the device; a spreading slot's place given back on unwind; a failed norms pass synchronises the upload). The
# host-pool tests with rayon's global pool at one thread (the out-of-core knn and GPU k-means called on a worker) and
# the facade's GPU tests (the quick diff-test among them).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s33F}
B=$(mktemp -d); for v in gpu-test-t rayon-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 60 $B/rayon-t --test-threads 1 > $W/rayon-t.txt 2>&1; echo "host-pool tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/rayon-t.txt)"; grep -E "panicked|skip" $W/rayon-t.txt | head -3
T0=$(date +%s); timeout 110 $B/gpu-test-t --test-threads 1 > $W/gpu-test-t.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-t.txt)"; grep -E "panicked" $W/gpu-test-t.txt | head -3
echo "total $(( $(date +%s) - S0 )) s"
true
