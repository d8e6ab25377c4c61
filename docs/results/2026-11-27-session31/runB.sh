#!/bin/bash
# Session 31, run B (H200): the host's CPU diagnostics (s31-diag: the noise alone and 16-wide random gathers from a
# 4 MiB array, against the number of threads), then racecheck over the quick knn1 group on t (1084f74).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s31B}
B=$(mktemp -d); for v in recall-t diag; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu; cat /proc/cpuinfo | grep -m1 -E "model\s*:"; grep -m1 MHz /proc/cpuinfo; } > $W/info.txt 2>&1; head -3 $W/info.txt
timeout 120 $B/diag --ignored --nocapture --test-threads 1 diag_tmp > $W/diag.txt 2>&1; echo "diag rc=$?"; grep threads $W/diag.txt
R=$B/recall-t
T0=$(date +%s); timeout $(( 590 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-t.txt 2>&1; echo "racecheck knn1 t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|ERROR|server fail' $W/racecheck-knn1-t.txt | tail -4 | tr '\n' ' ')"
echo "total $(( $(date +%s) - S0 )) s"
true
