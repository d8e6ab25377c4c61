#!/bin/bash
# Session 17, run G: g (the landed code, 7e3de10) with sm80_knn1 (RECALL_KNN1_BULK=off), whose selection code was
# refactored (row_key), and the scan1 and cand groups; synccheck with sm80_knn1.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-g.xz > $B/recall-g; chmod +x $B/recall-g; R=$B/recall-g
W=$(mktemp -d)/s17G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17G.tgz s17G' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $R --version; } > $W/info.txt 2>&1
for q in params memory; do
RECALL_KNN1_BULK=off RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-g-sm80-$q.txt 2>&1; echo "knn1 sm80 $q: $(tail -1 $W/diff-knn1-g-sm80-$q.txt)"
done
for g in scan1 cand; do timeout 100 $R diff-test --arch sm_90 --quick --group $g > $W/diff-$g-g.txt 2>&1; echo "$g: $(tail -1 $W/diff-$g-g.txt)"; done
RECALL_KNN1_BULK=off timeout 150 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-g-sm80.txt 2>&1; echo "synccheck sm80: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-g-sm80.txt | tail -1)"
RECALL_KNN1_BULK=off timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-g-sm80.txt 2>&1; echo "memcheck sm80: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-g-sm80.txt | tail -1)"
true
