#!/bin/bash
# Session 18, run B: fast-mode knn epilogue — a = chunked quick test (8 pairs, no branch) + lazy merge (fill CAP/4),
# b = a with fill CAP/2, m = main. Correctness, timing alternated, peer, ncu of a.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in m a b; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-a
W=$(mktemp -d)/s18B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18B.tgz s18B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for v in a b; do t timeout 120 $B/recall-$v diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-$v.txt 2>&1; echo "diff $v: $(tail -1 $W/diff-fast-$v.txt)"; done
for rep in 1 2; do for v in m a b; do
  P=/none; [ $rep = 1 ] && [ $v = a ] && P=benches/peers/peers.py
  t timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/q1024-$v-$rep.md > $W/q1024-$v-$rep.log 2>&1
  echo "== $v $rep"; grep -h "fast mode\|_knn_.*kernel level\|fp16 matmul\|torch" $W/q1024-$v-$rep.md | cut -c1-220
done; done
t timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:sm90a_knn_f16 --launch-skip 2 --launch-count 1 -o $W/knn-a $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 2 --no-cpu --peer-script /none > $W/ncu-a.log 2>&1
timeout 60 ncu --import $W/knn-a.ncu-rep --page source --csv --print-source sass > $W/sass-a.csv 2>&1
timeout 60 ncu --import $W/knn-a.ncu-rep --print-details all > $W/details-a.txt 2>&1
grep -h -i "Duration\|Pipe Tensor Cycles\|Executed Ipc Active\|Warp Cycles Per Issued" $W/details-a.txt | head -6
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
t timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-all-a.txt 2>&1; echo "all a: $(tail -1 $W/diff-all-a.txt)"
t timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-a.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-a.txt | tail -1)"
true
