#!/bin/bash
# Session 22, run E: CPU spreading's push form in two passes (the active sources' terms bucketed by target, then
# the buckets' lanes in an L1-sized table; p, with its criterion bench cpu-new) against main's push, where every
# task read every active out-edge and looked its targets up in a table over its whole range (g, cpu-old), on the
# GPU host's 16 cores: criterion spreading as it runs and every hop pulled, `recall bench cpu-spread`, alternated
# twice; p's graph diff-tests on the GPU (the CPU side changed).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22E}
B=$(mktemp -d); for v in cpu-old cpu-new recall-g recall-p; do xz -dc .device-carry/gz/$v.xz > $B/$v; chmod +x $B/$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nproc; lscpu | grep -E "Model name|L2|L3"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
for g in graph graph-handle graph-frontier; do
  timeout 100 $B/recall-p diff-test --arch sm_90 --quick --group $g > $W/diff-$g-p.txt 2>&1; echo "p $g: $(grep -h 'PASS\|FAIL' $W/diff-$g-p.txt | tail -1) $(( $(date +%s) - S0 ))s"
done
cd $W
for rep in 1 2; do for v in old new; do left 330 || break
  timeout 120 $B/cpu-$v --bench --noplot 'spread_1M_nodes_3_hops' > $W/criterion-$v-$rep.txt 2>&1
  echo "$v $rep: $(grep -E '^spread' -A1 $W/criterion-$v-$rep.txt | grep -E 'time' | tr -s ' ' | tr '\n' ' ')"
done; done
for rep in 1 2; do for v in g p; do left 480 || break
  timeout 120 $B/recall-$v bench cpu-spread --iters 5 > $W/cpu-spread-$v-$rep.md 2>&1
  echo "$v $rep: $(grep -E 'full pull \(3|as it runs|parallel read' $W/cpu-spread-$v-$rep.md | cut -d'|' -f2-3 | tr '\n' ' ')"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
