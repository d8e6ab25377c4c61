#!/bin/bash
# Session 17, run E: f (d + each block's list to the host, which merges, when the lists are few) against d and
# p (main), alternated; f forced to either merge; diff-tests under both merges; sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in d f p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-f
W=$(mktemp -d)/s17E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17E.tgz s17E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for m in host device; do for q in params memory; do
RECALL_KNN1_MERGE=$m RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-f-$m-$q.txt 2>&1; echo "knn1 f $m $q: $(tail -1 $W/diff-knn1-f-$m-$q.txt)"
done; done
RECALL_KNN1_MERGE=host RECALL_ONE_QUERY_READBACK=copy timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-f-host-copy.txt 2>&1; echo "knn1 f host copy: $(tail -1 $W/diff-knn1-f-host-copy.txt)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 10000 4096; do for rep in 1 2 3; do for v in f p d; do
  [ $v = d ] && [ $rep = 3 ] && continue
  P=/none; [ $rep = 1 ] && [ $v = f ] && [ $rows != 100 ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 4096 10000; do for m in host device; do for rep in 1 2; do RECALL_KNN1_MERGE=$m timeout 90 $R $Q --peer-script /none --rows $rows --k 10 --out $W/q1-r$rows-f-$m-$rep.md > /dev/null 2>&1
  echo "rows=$rows f $m $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-f-$m-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-f-$m-$rep.md | cut -d'|' -f3)"; done; done; done
for rows in 1000 4096 10000; do grep -h "torch.topk" $W/q1-r$rows-f-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-f-1.md
timeout 100 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000-f $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000-f.log 2>&1
timeout 60 ncu --import $W/knn1-r1000-f.ncu-rep --page source --csv --print-source sass > $W/sass-r1000-f.csv 2>&1
timeout 60 ncu --import $W/knn1-r1000-f.ncu-rep --print-details all > $W/details-r1000-f.txt 2>&1
echo "ncu f 1000: $(grep -h -E '^\s+Duration' $W/details-r1000-f.txt | head -1)"
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
RECALL_KNN1_MERGE=host RECALL_KNN1_QUERY=params timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-f.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-f.txt | tail -1)"
RECALL_KNN1_MERGE=host timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-f.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-f.txt | tail -1)"
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r1000-f.txt 2>&1; echo "racecheck 1000: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r1000-f.txt | tail -1)"
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-f.txt 2>&1; tail -1 $W/diff-all-f.txt
true
