#!/bin/bash
# Session 16, run H: binary n (sm90a_knn1 blocks of 4 warps by default: warp 1 queues the rows' copies while
# warps 0, 2, 3 stage the query, then the helpers leave) against k (aa3441e, main); n also with
# RECALL_KNN1_BULK_WARPS=2 and =1; e (main before the session) as the reference. Diff-tests under each warp count
# and query setting; the three sanitizers on n's bulk kernel.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e k n; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-n
W=$(mktemp -d)/s16H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16H.tgz s16H' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-n.txt 2>&1; tail -1 $W/diff-all-n.txt
for w in 4 2 1; do for q in params memory; do
RECALL_KNN1_BULK_WARPS=$w RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-n-w$w-$q.txt 2>&1; echo "w$w $q $(tail -1 $W/diff-knn1-n-w$w-$q.txt)"
done; done
for q in params memory; do
RECALL_KNN1_QUERY=$q timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-n-$q.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-n-$q.txt | tail -1
RECALL_KNN1_QUERY=$q timeout 150 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-n-$q.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-knn1-n-$q.txt | tail -1
done
for rows in 100 1000 4096; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 32 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-n.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-n.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096; do for rep in 1 2 3; do for v in e k n n2 n1; do
  P=/none; [ $rep = 1 ] && [ $v = n ] && P=benches/peers/peers.py
  env=""; [ $v = n2 ] && env="RECALL_KNN1_BULK_WARPS=2"; [ $v = n1 ] && env="RECALL_KNN1_BULK_WARPS=1"
  env $env timeout 90 $B/recall-${v:0:1} $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
grep -h "torch.topk" $W/q1-r1000-n-1.md | cut -c1-150
grep -h "tiny kernel" $W/q1-r1000-n-1.md
t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000 $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000.log 2>&1
t timeout 100 ncu --import $W/knn1-r1000.ncu-rep --page source --csv --print-source sass > $W/sass-r1000.csv 2>&1
t timeout 60 ncu --import $W/knn1-r1000.ncu-rep --print-details all > $W/details-r1000.txt 2>&1
grep -E "^\s+Duration|knn1" $W/details-r1000.txt | head -3
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
true
