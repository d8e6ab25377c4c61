#!/bin/bash
# Session 33, run C (the same H200 host as run B, right after it): the CPU bench again, m = 70655dd against t = 906b383,
# in the other order (t first in each round, as m was first in run B), two rounds: cosine top-10 (1 and 64 queries),
# spreading (every hop pulled, and as it runs), clip-and-noise into a reused buffer.
N=${RUN:-s33C}
B=$(mktemp -d); for v in cpu-m cpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
F='cosine_top10_n100000_d768/cpu/knn/|spread_1M_nodes_3_hops/cpu/|clip_noise_n100000_d768/cpu/clip_and_noise_into$'
for rep in 1 2; do for v in t m; do
  timeout 120 $B/cpu-$v --bench "$F" --warm-up-time 1 --measurement-time 4 > $W/cpu-$v-$rep.txt 2>&1
  echo "cpu $v $rep: rc=$?"; grep -A2 -E '^(cosine|spread_1M|clip_noise)' $W/cpu-$v-$rep.txt | grep -E '^[a-z]|time:' | sed 's/ \+/ /g' | paste - - | cut -c1-140
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
