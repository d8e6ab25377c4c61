#!/bin/bash
# Session 20, run K: i (h with the 32-lane class loading the next step's sources and weights before it uses this
# step's gathers) against h (b38d0fc): graph diff-test, bench spread alternated three times (peer in every round),
# memcheck, then the graph groups over every arch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in h i; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s20K; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s20K.tgz s20K' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
G="--group graph --group graph-handle --group graph-frontier"
timeout 60 $B/recall-i diff-test --arch sm_90 $G > $W/diff-graph-i.txt 2>&1; echo "graph full i: $(grep -h 'PASS\|FAIL' $W/diff-graph-i.txt | tail -1)"
P=benches/peers/peers.py
for rep in 1 2 3; do for v in h i; do left 200 || break
  PP=/none; [ $v = i ] && PP=$P
  timeout 60 $B/recall-$v bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $PP --out $W/spread-$v-$rep.md > $W/spread-$v-$rep.log 2>&1
  echo "$v $rep: $(grep -h 'one dense hop\|one SpMV\|3 hops + exact top-100 + activation download, graph\|seed list (spread_from)' $W/spread-$v-$rep.md | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'identical' $W/spread-$v-$rep.md | cut -c1-60)"
done; done
timeout 60 compute-sanitizer --tool memcheck $B/recall-i diff-test --arch sm_90 --quick --group graph --group graph-frontier > $W/memcheck-graph-i.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-graph-i.txt | tail -1)"
left 260 && { timeout 90 $B/recall-i diff-test --arch all --quick $G > $W/diff-graph-all-i.txt 2>&1; echo "graph all-arch quick i: $(grep -h 'PASS\|FAIL' $W/diff-graph-all-i.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
