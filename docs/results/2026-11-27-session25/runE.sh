#!/bin/bash
# Session 25, run E (H100): g (3c15952) against c (139c960) on clip-and-noise 1M x 768, two rounds alternated, torch
# in round 1; g's noise group in full; then racecheck over g's quick knn1 group with a long limit (420 s).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25E}
B=$(mktemp -d); for v in c g; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-g; P=benches/peers/peers.py
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-g.txt 2>&1; echo "g noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-g.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-g.txt | head -3
run() { v=$1; tag=$2; pp=$3
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $pp --out $W/noise-$tag.md > $W/noise-$tag.log 2>&1
  echo "== $tag: $(grep -h 'one pass' $W/noise-$tag.md | cut -d'|' -f3-5) copy $(grep -h 'device copy' $W/noise-$tag.md | cut -d'|' -f4) $(grep -h 'randn' $W/noise-$tag.md | cut -d'|' -f3,5)"; }
for rep in 1 2; do PP=/none; [ $rep = 1 ] && PP=$P; run c c-$rep /none; run g g-$rep $PP; done
T0=$(date +%s)
timeout 420 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-g.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-g.txt | tail -2 | tr '\n' ' ')"
echo "total $(( $(date +%s) - S0 )) s"
true
