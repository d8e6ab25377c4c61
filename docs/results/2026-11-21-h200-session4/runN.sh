#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for f in recall; do gunzip -c .device-carry/gz/$f.gz > $B/$f; chmod +x $B/$f; done
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runN.tgz .' EXIT
timeout 210 $R faults vram-pressure --seconds 18 --leave-mib 64 --out $W/faults-vram-pressure-64.md > $W/faults-vram-pressure-64.log 2>&1; echo "rc=$?" >> $W/faults-vram-pressure-64.log
pkill -f "recall hog" || true
timeout 200 $R bench break-even --reps 3 --ops spread,spread_resident,kmeans,clip_and_noise --out $W/break-even-2.md > $W/break-even-2.log 2>&1; echo "rc=$?" >> $W/break-even-2.log
