#!/bin/bash
# Session 25, run B (H200): are the blocks of sm80_clip_noise_rows in lockstep on an SM (all staging and running their
# norm chains at once, then all making noise)? c (139c960, main) against d1 / d2 = c with the first wave's blocks
# (b < 792) held back by ((b / 132) % 6) x 5,740 / 2,870 SM cycles (runB/stagger.patch), alternated three rounds;
# ncu of c and d1 (throughput, warp states, scheduler).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25B}
B=$(mktemp -d); for v in c d1 d2; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 100 $B/recall-d1 diff-test --arch sm_90 --group noise > $W/diff-noise-d1.txt 2>&1; echo "d1 noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-d1.txt | tail -1) $(( $(date +%s) - S0 ))s"
for rep in 1 2 3; do for v in c d1 d2; do left 240 || break
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150)"
done; done
for v in c d1; do left 400 || break
  timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section InstructionStats --print-details all -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-$v.txt 2>&1
  echo "ncu $v: $(grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|No Eligible|Active Warps Per|Eligible Warps' $W/ncu-noise-$v.txt | tr -s ' ' | tr '\n' ';')"
  grep -E "Stall (Barrier|Not Selected|Wait|Math|Dispatch|Long|Short|LG|MIO)" $W/ncu-noise-$v.txt | tr -s ' ' | tr '\n' ';'; echo
done
echo "total $(( $(date +%s) - S0 )) s"
true
