#!/bin/bash
# Session 7, run E (1 x H200, the machine still warm from run D; the last 100 s of the session's device time):
# the vram-pressure drill again, shorter (8 s), with lead 022b638.
export PATH=$PATH:/usr/local/cuda/bin; B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall; mkdir -p $OUT/s7E; cd $OUT/s7E; s=$(date +%s); timeout 85 $B/recall faults vram-pressure --seconds 8 --out $OUT/s7E/faults-vram-pressure-8s.md > $OUT/s7E/faults-vram-pressure-8s.log 2>&1; echo "rc=$? secs=$(( $(date +%s)-s ))"; tail -2 $OUT/s7E/faults-vram-pressure-8s.log
