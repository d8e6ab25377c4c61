#!/bin/bash
# Session 9, run D: racecheck over part 2/6 of the scan1 group (cut off at 570 s in run C), taken as parts
# 2, 8, 14 and 20 of 24 (every 24th case from the i-th: together exactly the cases of part 2/6), in parallel
# processes, each with a 560 s limit. Binary: e732318.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9D; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; compute-sanitizer --version; $R info; nproc; } > $W/info.txt 2>&1
for i in 2 8 14 20; do
  ( s=$(date +%s); timeout 560 env RECALL_DIFFTEST_PART=$i/24 compute-sanitizer --tool racecheck --racecheck-report all \
      $R diff-test --arch sm_90 --quick --group scan1 > $W/racecheck-scan1-part-$i-of-24.txt 2>&1
    echo "rc=$? secs=$(( $(date +%s)-s ))" >> $W/racecheck-scan1-part-$i-of-24.txt ) &
done
wait
for i in 2 8 14 20; do f=$W/racecheck-scan1-part-$i-of-24.txt
  echo "part $i/24: $(grep -h '^rc=' $f) | $(grep -h 'RACECHECK SUMMARY' $f) | pass rows $(grep -c 'PASS' $f) | fail rows $(grep -ci 'FAIL' $f) | $(tail -n 3 $f | head -n 1)"
done
true
