#!/bin/bash
# Session 21, run B: c (sm80_clip_noise_rows persistent: two groups of rows in flight, warp 0 stages and runs the
# chains while the workers make noise, named barriers READY / FREE) against a (3132a8a, main): c's whole quick
# diff-test, noise group in full and over every arch, clip-and-noise alternated twice (torch once), c's rows a
# group, ncu, sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a c; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21B.tgz s21B' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
A=$B/recall-a; R=$B/recall-c
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-c.txt 2>&1; echo "c quick: $(grep -h 'PASS\|FAIL' $W/diff-quick-c.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-c.txt 2>&1; echo "c noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-c.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-c.txt | head -4
for rep in 1 2; do for v in a c; do left 330 || break
  PP=/none; [ $rep = 1 ] && [ $v = c ] && PP=benches/peers/peers.py
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$rep.md | cut -d'|' -f3,5)"
done; done
for n in 14 3 5 10; do left 380 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-c-r$n.md > $W/noise-c-r$n.log 2>&1
  echo "== c rows $n: $(grep -h 'one pass' $W/noise-c-r$n.md | cut -d'|' -f3-5 | cut -c1-150)"
done
left 420 && { timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $R bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-c.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Block Limit Shared|Registers Per|barrier" $W/ncu-noise-c.txt | head -14; }
for tool in memcheck racecheck synccheck; do left 470 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-c.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-c.txt | tail -1)"
done
left 500 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-c.txt 2>&1; echo "c noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-c.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
