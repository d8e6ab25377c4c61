#!/bin/bash
# Session 26, run A (H200): b = main + the answering block's statistics added without reads (red.add) + the noise
# tables' private seam removed, against h (73a22cf, main's kernels). (1) racecheck in hazard mode over one served
# stream of 10,000 rows (b): which threads and blocks, and what values; (2) one query x 1,000 / 10,000 rows served,
# h and b alternated, two rounds; (3) b's knn1 and noise groups in full; (4) clip-and-noise 1M x 768, h and b;
# (5) the CPU's clip-and-noise (criterion, 16 cores) next to the bench's copy.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26A}
B=$(mktemp -d); for v in h s26b; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
xz -dc .device-carry/cpu-bench-s26b.xz > $B/cpu-bench; chmod +x $B/cpu-bench
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-s26b
compute-sanitizer --help 2>&1 | grep -i -A2 "racecheck" > $W/racecheck-options.txt
T0=$(date +%s)
timeout 170 env RECALL_KNN1_SERVE=on compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 400 $R bench knn --queries 1 --rows 10000 --dim 768 --k 10 --iters 3 --no-cpu --peer-script /none --out $W/rc-r10000.md > $W/racecheck-hazard-r10000.txt 2>&1
echo "racecheck hazard: rc=$? $(( $(date +%s) - T0 ))s $(grep -c 'hazard detected' $W/racecheck-hazard-r10000.txt) $(grep -E 'RACECHECK SUMMARY' $W/racecheck-hazard-r10000.txt | tail -1)"
grep -m3 -A4 "hazard detected" $W/racecheck-hazard-r10000.txt
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) b0 $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in h s26b; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
T0=$(date +%s); timeout 150 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-b.txt 2>&1; echo "b knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-b.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-b.txt 2>&1; echo "b noise full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-noise-b.txt | tail -1) $(( $(date +%s) - T0 ))s"
for v in h s26b; do left 470 && { timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v.md > /dev/null 2>&1; echo "noise $v: $(grep -h 'one pass\|device copy' $W/noise-$v.md | cut -d'|' -f3,4,5 | tr '\n' ' ')"; }; done
left 480 && { T0=$(date +%s); timeout 110 $B/cpu-bench --bench 'clip_noise|cpu/memory' --warm-up-time 1 --measurement-time 6 > $W/cpu-bench.txt 2>&1; echo "cpu bench: rc=$? $(( $(date +%s) - T0 ))s"; grep -A2 "clip_and_noise\|copy_512\|read_512" $W/cpu-bench.txt | grep "time:\|Benchmarking.*:" | grep -v "Warming\|Collecting\|Analyzing" | head; }
echo "total $(( $(date +%s) - S0 )) s"
true
