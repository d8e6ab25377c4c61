#!/bin/bash
# Session 19, run G: q (p + clip_noise_rows + kmeans parts in the bench): whole quick diff-test; clip-and-noise fused
# against two-pass and torch; k-means with its parts (which GEMM kernel the assignment runs) and torch; sanitizers over noise.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in q; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-q
W=$(mktemp -d)/s19G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19G.tgz s19G' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
P=benches/peers/peers.py
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-q.txt 2>&1; echo "all q: $(grep -h 'PASS\|FAIL' $W/diff-all-q.txt | tail -1)"; grep -h "clip_noise" $W/diff-all-q.txt
for r in 1 2; do PP=/none; [ $r = 1 ] && PP=$P
  t timeout 150 $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$r.md > $W/noise-$r.log 2>&1
  grep -h "clip_noise\|randn" $W/noise-$r.md | cut -c1-220
  t timeout 150 $R bench kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 5 --no-cpu --peer-script $PP --out $W/kmeans-$r.md > $W/kmeans-$r.log 2>&1
  grep -h "recall GPU\|matmul" $W/kmeans-$r.md | cut -c1-200
done
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group noise > $W/memcheck-noise.txt 2>&1; echo "memcheck noise: $(grep -E 'ERROR SUMMARY' $W/memcheck-noise.txt | tail -1)"
t timeout 100 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group noise > $W/racecheck-noise.txt 2>&1; echo "racecheck noise: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-noise.txt | tail -1)"
t timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group noise > $W/synccheck-noise.txt 2>&1; echo "synccheck noise: $(grep -E 'ERROR SUMMARY' $W/synccheck-noise.txt | tail -1)"
t timeout 100 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick --group noise > $W/initcheck-noise.txt 2>&1; echo "initcheck noise: $(grep -E 'ERROR SUMMARY' $W/initcheck-noise.txt | tail -1)"
left 500 && { t timeout 80 $R diff-test --arch sm_80 --quick --group noise > $W/diff-noise-sm80.txt 2>&1; echo "sm_80 noise: $(grep -h 'PASS\|FAIL' $W/diff-noise-sm80.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
