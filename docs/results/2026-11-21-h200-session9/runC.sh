#!/bin/bash
# Session 9: racecheck over the scan1 group of the quick diff-test, all six parts (RECALL_DIFFTEST_PART=i/6,
# 679ab54) in parallel processes, each with a 570 s limit. Binary: e732318.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9C; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; compute-sanitizer --version; $R info; nproc; } > $W/info.txt 2>&1
for i in 0 1 2 3 4 5; do
  ( s=$(date +%s); timeout 570 env RECALL_DIFFTEST_PART=$i/6 compute-sanitizer --tool racecheck --racecheck-report all \
      $R diff-test --arch sm_90 --quick --group scan1 > $W/racecheck-scan1-part-$i-of-6.txt 2>&1
    echo "rc=$? secs=$(( $(date +%s)-s ))" >> $W/racecheck-scan1-part-$i-of-6.txt ) &
done
wait
for i in 0 1 2 3 4 5; do f=$W/racecheck-scan1-part-$i-of-6.txt
  echo "part $i/6: $(grep -h '^rc=' $f) | $(grep -h 'RACECHECK SUMMARY' $f) | pass rows $(grep -c 'PASS' $f) | fail rows $(grep -ci 'FAIL' $f) | $(tail -n 3 $f | head -n 1)"
done
true
