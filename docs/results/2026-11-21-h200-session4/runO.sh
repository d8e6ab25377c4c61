#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runO.tgz .' EXIT
timeout 200 $R faults vram-pressure --seconds 18 --out $W/faults-vram-pressure.md > $W/faults-vram-pressure.log 2>&1; echo "rc=$?" >> $W/faults-vram-pressure.log
pkill -f "recall hog" || true
timeout 150 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick > $W/initcheck.txt 2>&1; echo "rc=$?" >> $W/initcheck.txt
