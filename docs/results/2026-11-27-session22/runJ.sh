#!/bin/bash
# Session 22, run J (tuning): the op as it runs pushes a hop when the active sources hold at most 1/16 of the
# out-edges; with the two-pass push, is that still the right bound? A scratch build of c23bb25's cpu-simd with the
# divisor read from RECALL_SPREAD_PUSH_DIV (16, 8, 6, 4), 3 hops over 200,000 / 1,000,000 nodes, three rounds.
N=${RUN:-s22J}
B=$(mktemp -d); xz -dc .device-carry/gz/ovh-div.xz > $B/h; chmod +x $B/h
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nproc; lscpu | grep -E "Model name"; } > $W/info.txt 2>&1; cat $W/info.txt
for n in 200000 1000000; do reps=$(( 20000000 / n ))
  for rep in 1 2 3; do for d in 16 8 6 4; do
    echo "n=$n div=$d $rep: $(RECALL_SPREAD_PUSH_DIV=$d NODES=$n timeout 60 $B/h auto 3 $reps)"
  done; done
done | tee $W/div.txt
true
