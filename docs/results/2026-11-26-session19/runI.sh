#!/bin/bash
# Session 19, run I: s (r + RECALL_CLIP_NOISE_ROWS): clip-and-noise at 4 / 8 / 16 / 32 rows a block, twice; ncu of 16 and 8.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in s; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-s
W=$(mktemp -d)/s19I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19I.tgz s19I' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for n in 32; do t timeout 80 env RECALL_CLIP_NOISE_ROWS=$n $R diff-test --arch sm_90 --quick --group noise > $W/diff-noise-$n.txt 2>&1; echo "diff rows $n: $(grep -h 'PASS\|FAIL' $W/diff-noise-$n.txt | tail -1)"; done
for rep in 1 2; do for n in 4 8 16 32; do
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$n-$rep.md > $W/noise-$n-$rep.log 2>&1
  echo "== rows $n $rep: $(grep -h 'clip_noise_rows' $W/noise-$n-$rep.md | cut -d'|' -f3-5)"
done; done
for n in 16 8; do
  timeout 100 env RECALL_CLIP_NOISE_ROWS=$n ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $R bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-$n.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Block Limit" $W/ncu-$n.txt | head -20
done
true
