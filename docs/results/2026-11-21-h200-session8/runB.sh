#!/bin/bash
# Session 8, run B (1 x H200): racecheck over the whole quick diff-test (lead 4689166), with most of a call's limit.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s8B; mkdir -p $W
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 570 compute-sanitizer --tool racecheck --racecheck-report all $R diff-test --arch sm_90 --quick > $W/racecheck-difftest.txt 2>&1; tail -n 3 $W/racecheck-difftest.txt
true
