#!/bin/bash
# Session 25, run G (H200): racecheck over one served stream of h (73a22cf; one server launch, 1,000 rows, many
# queries) to see whether the 98 reports of run F come from within a server's launch.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25G}
B=$(mktemp -d); for v in h; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep "Model name"; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s)
timeout 200 env RECALL_KNN1_SERVE=on compute-sanitizer --tool racecheck $B/recall-h bench knn --queries 1 --rows 1000 --dim 768 --k 10 --iters 40 --no-cpu --peer-script /none --out $W/rc-served.md > $W/racecheck-served-h.txt 2>&1
echo "racecheck served stream: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY' $W/racecheck-served-h.txt | tail -1) $(grep -h 'knn1 served: query\|server failures' $W/rc-served.md | cut -d'|' -f2,3 | tr '\n' ' ')"
grep -A1 "^========= Error" $W/racecheck-served-h.txt | head -6
echo "total $(( $(date +%s) - S0 )) s"
true
