#!/bin/bash
# Session 19, run H: r (q + sincos_turns by selects, clip_noise_rows stepping its pieces, k-means grouping in parallel)
# against q: whole quick diff-test of r; clip-and-noise and k-means alternated, torch once; sanitizers over noise.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in q r; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-r
W=$(mktemp -d)/s19H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19H.tgz s19H' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
P=benches/peers/peers.py
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-r.txt 2>&1; echo "all r: $(grep -h 'PASS\|FAIL' $W/diff-all-r.txt | tail -1)"; grep -h "clip_noise\|kmeans" $W/diff-all-r.txt
for rep in 1 2; do for v in q r; do PP=/none; [ $rep = 1 ] && [ $v = r ] && PP=$P
  t timeout 150 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== noise $v $rep"; grep -h "clip_noise\|randn" $W/noise-$v-$rep.md | cut -d'|' -f2-5 | cut -c1-160
  t timeout 150 $B/recall-$v bench kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 7 --no-cpu --peer-script $PP --out $W/kmeans-$v-$rep.md > $W/kmeans-$v-$rep.log 2>&1
  echo "== kmeans $v $rep"; grep -h "recall GPU\|matmul" $W/kmeans-$v-$rep.md | cut -d'|' -f2-4 | cut -c1-160
done; done
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group noise --group kmeans > $W/memcheck-r.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-r.txt | tail -1)"
t timeout 100 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group noise > $W/racecheck-r.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r.txt | tail -1)"
left 500 && { t timeout 80 $R diff-test --arch sm_80 --quick --group noise --group kmeans > $W/diff-sm80-r.txt 2>&1; echo "sm_80: $(grep -h 'PASS\|FAIL' $W/diff-sm80-r.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
