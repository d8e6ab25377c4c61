#!/bin/bash
# Session 22, run K: CPU spreading with each target's end of hop free of the branch on "still active" (the next
# hop's statistics added as 0 / 1 times its out-degree): criterion `cpu` bench of f4ccb89 (base) and with the change
# (bl), every hop pulled and as it runs, alternated three times on the GPU host's 16 cores.
N=${RUN:-s22K}
B=$(mktemp -d); for v in base bl; do xz -dc .device-carry/gz/cpu-$v.xz > $B/$v; chmod +x $B/$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nproc; lscpu | grep -E "Model name"; } > $W/info.txt 2>&1; cat $W/info.txt
cd $W
for rep in 1 2 3; do for v in base bl; do
  timeout 120 $B/$v --bench --noplot 'spread_1M_nodes_3_hops' > $W/criterion-$v-$rep.txt 2>&1
  echo "$v $rep: $(grep -E '^spread' -A1 $W/criterion-$v-$rep.txt | grep -E 'time' | tr -s ' ' | tr '\n' ' ')"
done; done
rm -rf $W/target
true
