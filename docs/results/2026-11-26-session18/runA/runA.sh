#!/bin/bash
# Session 18, run A: fast-mode knn (1,024 queries x 1M x 768, top-10) — where the time goes.
# m = main a7eeef6/a45d51d; e1 = m with sm90a_knn's epilogue run only on each block's last row tile (main loop cost).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in m e1; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-m
W=$(mktemp -d)/s18A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18A.tgz s18A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for v in m e1; do
  t timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script /none --out $W/q1024-$v.md > $W/q1024-$v.log 2>&1
  echo "== $v"; grep -h "fast\|sm90a" $W/q1024-$v.md | cut -c1-200
done
t timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy -k regex:sm90a_knn_f16 --launch-skip 2 --launch-count 1 -o $W/knn-m $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 2 --no-cpu --peer-script /none > $W/ncu-m.log 2>&1
timeout 60 ncu --import $W/knn-m.ncu-rep --page source --csv --print-source sass > $W/sass-m.csv 2>&1
timeout 60 ncu --import $W/knn-m.ncu-rep --print-details all > $W/details-m.txt 2>&1
echo "ncu m: $(grep -h -E '^\s+Duration' $W/details-m.txt | head -1)"
grep -h -i "tensor\|Issue Slots Busy\|Executed Ipc\|Duration\|Registers\|Warp Cycles Per Issued" $W/details-m.txt | head -20
for v in m e1; do
t timeout 120 ncu --clock-control none --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,lts__t_bytes.sum,gpu__time_duration.sum -k regex:sm90a_knn_f16 --launch-skip 2 --launch-count 1 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 2 --no-cpu --peer-script /none > $W/ncu-$v-metrics.log 2>&1
echo "metrics $v"; grep -h -E "gmma|inst_executed|lts__t|duration" $W/ncu-$v-metrics.log | head
done
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
true
