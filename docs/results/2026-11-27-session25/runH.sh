#!/bin/bash
# Session 25, run H (H200): where run F's racecheck reports come from. h (73a22cf) under racecheck: (1) one served
# stream over 10,000 rows (three blocks an SM, tiles streamed through the ring); (2) over 1,000 rows with the idle
# limit at 1 us, so that the server ends after each query and the next query starts another on the same SMs.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25H}
B=$(mktemp -d); xz -dc .device-carry/recall-h.xz > $B/recall-h; chmod +x $B/recall-h
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
rc() { tag=$1; shift; T0=$(date +%s)
  timeout $1 env RECALL_KNN1_SERVE=on $2 compute-sanitizer --tool racecheck $B/recall-h bench knn --queries 1 --rows $3 --dim 768 --k 10 --iters $4 --no-cpu --peer-script /none --out $W/rc-$tag.md > $W/racecheck-$tag.txt 2>&1
  echo "racecheck $tag: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY' $W/racecheck-$tag.txt | tail -1) $(grep -h 'calls the servers answered\|server failures' $W/rc-$tag.md | cut -d'|' -f2,3 | tr '\n' ' ')"
  grep -A1 "^========= Error" $W/racecheck-$tag.txt | head -4; }
rc r10000 200 RECALL_X=0 10000 20
rc r1000-idle1 150 RECALL_KNN1_SERVE_IDLE_US=1 1000 20
echo "total $(( $(date +%s) - S0 )) s"
true
