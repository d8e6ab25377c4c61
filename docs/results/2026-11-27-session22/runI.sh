#!/bin/bash
# Session 22, run I: CPU spreading as it runs (auto), 3 hops from nodes/1000 seeds over power-law graphs of
# 20,000 to 1,000,000 nodes x 16 edges, on the GPU host's 16 cores: the push in two passes (new, b87a7ce's
# cpu-simd) against main's push before it (old, ff99255), alternated three times; a scratch harness
# (`runI/main.rs.txt`) timing the mean of many calls.
N=${RUN:-s22I}
B=$(mktemp -d); for v in old new; do xz -dc .device-carry/gz/ovh-$v.xz > $B/$v; chmod +x $B/$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nproc; lscpu | grep -E "Model name|L2|L3"; } > $W/info.txt 2>&1; cat $W/info.txt
for n in 20000 100000 200000 500000 1000000; do
  reps=$(( 20000000 / n )); [ $reps -gt 400 ] && reps=400
  for rep in 1 2 3; do for v in old new; do
    echo "n=$n $v $rep: $(NODES=$n timeout 60 $B/$v auto 3 $reps)"
  done; done
done | tee $W/auto.txt
true
