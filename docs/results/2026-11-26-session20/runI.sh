#!/bin/bash
# Session 20, run I (H100): h (s20 HEAD) against a (main, 5444dae): bench spread alternated four times with the peer (CuPy)
# in every round, k-means and clip-and-noise once each with their peers, whole quick diff-test of h.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a h; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s20I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s20I.tgz s20I' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 150 $B/recall-h diff-test --arch sm_90 --quick > $W/diff-quick-h.txt 2>&1; echo "quick h: $(grep -h "PASS\|FAIL" $W/diff-quick-h.txt | tail -1)"
P=benches/peers/peers.py
for rep in 1 2 3 4; do for v in a h; do left 330 || break
  PP=/none; [ $v = h ] && PP=$P
  timeout 100 $B/recall-$v bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $PP --out $W/spread-$v-$rep.md > $W/spread-$v-$rep.log 2>&1
  echo "$v $rep: $(grep -h 'one dense hop\|one SpMV\|3 hops + exact top-100 + activation download, graph\|seed list (spread_from)\|3 x (SpMV' $W/spread-$v-$rep.md | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'identical' $W/spread-$v-$rep.md | cut -c1-60)"
done; done
left 400 && { timeout 120 $B/recall-h bench kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 5 --no-cpu --peer-script $P --out $W/kmeans-h.md > $W/kmeans-h.log 2>&1; echo "kmeans: $(grep -h 'x the peer\|/ peer\|peer =' $W/kmeans-h.md | cut -c1-200 | head -3)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
