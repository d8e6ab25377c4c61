#!/bin/bash
# Session 26, run D (H200): f = the candidate (a7d4bd9 + the server's exit by the barrier's reduction, its k across
# two barriers, the answering block's sums added without reads). f's knn1 group in full, racecheck over f's quick knn1
# group, the whole quick diff-test, memcheck and synccheck over the quick knn1 group, racecheck over the noise group;
# one query x 1,000 / 10,000 rows served, h (main's kernels) and f alternated, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26D}
B=$(mktemp -d); for v in h s26f; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-s26f
T0=$(date +%s); timeout 20 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-f.txt 2>&1; echo "f knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-f.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 280 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-f.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-f.txt | tail -2 | tr '\n' ' ')"; grep -A1 "^========= Error" $W/racecheck-knn1-f.txt | head -4
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in s26f h; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
T0=$(date +%s); left 420 && { timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-quick-f.txt 2>&1; echo "f quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-f.txt | tail -1) $(( $(date +%s) - T0 ))s"; }
for tool in synccheck memcheck; do T0=$(date +%s); left 500 && { timeout 60 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-f.txt 2>&1; echo "$tool knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $W/$tool-knn1-f.txt | tail -2 | tr '\n' ' ')"; }; done
T0=$(date +%s); left 540 && { timeout $(( 590 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group noise > $W/racecheck-noise-f.txt 2>&1; echo "racecheck noise: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-noise-f.txt | tail -2 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
