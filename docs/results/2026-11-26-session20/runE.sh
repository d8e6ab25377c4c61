#!/bin/bash
# Session 20, run E: f (e with each hub's in-edges stored group by group, so a hub block reads its slots as one run) against
# a (main): whole quick diff-test, graph diff-tests, sanitizers, bench spread alternated, ncu of f's hub and hop kernels.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a f; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s20E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s20E.tgz s20E' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 150 $B/recall-f diff-test --arch sm_90 --quick > $W/diff-quick-f.txt 2>&1; echo "quick f: $(grep -h "PASS\|FAIL" $W/diff-quick-f.txt | tail -1)"
G="--group graph --group graph-handle --group graph-frontier"
for v in f; do
  timeout 120 $B/recall-$v diff-test --arch sm_90 $G > $W/diff-graph-$v.txt 2>&1; echo "graph full $v: $(grep -h 'PASS\|FAIL' $W/diff-graph-$v.txt | tail -1) $(( $(date +%s) - S0 ))s"
done
timeout 150 $B/recall-f diff-test --arch all --quick $G > $W/diff-graph-all-f.txt 2>&1; echo "graph all-arch quick f: $(grep -h 'PASS\|FAIL' $W/diff-graph-all-f.txt | tail -1) $(( $(date +%s) - S0 ))s"
P=benches/peers/peers.py
for rep in 1 2 3; do for v in a f; do left 420 || break
  PP=/none; [ $rep != 2 ] && [ $v = a ] && PP=$P
  timeout 100 $B/recall-$v bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $PP --out $W/spread-$v-$rep.md > $W/spread-$v-$rep.log 2>&1
  echo "$v $rep: $(grep -h 'one dense hop\|one SpMV\|3 hops + exact top-100 + activation download, graph\|seed list (spread_from)' $W/spread-$v-$rep.md | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'identical' $W/spread-$v-$rep.md | cut -c1-60)"
done; done
NCU="ncu --cache-control none --clock-control none"
left 450 && timeout 100 $NCU -k regex:'spread_h' --launch-skip 40 --launch-count 4 --section SpeedOfLight --section Occupancy --section LaunchStats -o $W/hop-f $B/recall-f bench spread --nodes 1000000 --edges 17000000 --hops 3 --k 100 --iters 1 --no-cpu --peer-script /none --out $W/ncu-dummy.md > $W/ncu-hop-f.log 2>&1
[ -f $W/hop-f.ncu-rep ] && { ncu --import $W/hop-f.ncu-rep --print-details all > $W/ncu-hop-f.txt 2>&1; echo "ncu f: $(grep -h 'Duration\|Registers Per\|Achieved Occ' $W/ncu-hop-f.txt | tr -s ' ' | tr '\n' ';')"; }
for tool in racecheck memcheck synccheck; do left 560 || break
  timeout 60 compute-sanitizer --tool $tool $B/recall-f diff-test --arch sm_90 --quick --group graph --group graph-frontier > $W/$tool-graph-f.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-graph-f.txt | tail -1) $(grep -h 'PASS\|FAIL' $W/$tool-graph-f.txt | tail -1 | cut -c1-40)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
