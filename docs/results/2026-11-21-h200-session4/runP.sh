#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runP.tgz .' EXIT
timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm90-quick.txt
timeout 60 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; echo "rc=$?" >> $W/difftest-sm80-quick.txt
timeout 40 $R bench candidates --iters 10 --no-cpu --peer-script none --out $W/cand.md > $W/cand.log 2>&1; echo "rc=$?" >> $W/cand.log
