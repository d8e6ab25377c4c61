#!/bin/bash
# Session 34, run C (one H200 host): run B's selection-scratch test skipped (it opened the GPU without probing the
# driver first); the same test, now probing, built against m = edfa8d1's launch.rs (before QueuedScratch) and
# t = 8dda4f5's (with it), each run three times, output shown (--nocapture).
N=${RUN:-s34C}
B=$(mktemp -d); for v in gsel-m gsel-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for i in 1 2 3; do for v in m t; do timeout 60 $B/gsel-$v --nocapture > $W/gsel-$v-$i.txt 2>&1; echo "gpu_select $v $i: rc=$? $(grep -E 'test result' $W/gsel-$v-$i.txt)"; grep -E "panicked|round|skipped" $W/gsel-$v-$i.txt | head -3; done; done
true
