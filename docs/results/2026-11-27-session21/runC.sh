#!/bin/bash
# Session 21, run C: d (sm80_clip_noise_rows making two blocks' noise side by side, launch bound 256 x 4) against
# a (3132a8a, main): d's noise group in full, clip-and-noise alternated three times (torch once), d at 16 / 12 / 8
# rows a block, ncu with stall reasons for both, sanitizers, every arch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a d; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21C.tgz s21C' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
A=$B/recall-a; R=$B/recall-d
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-d.txt 2>&1; echo "d noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-d.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-d.txt | head -4
for rep in 1 2 3; do for v in a d; do left 300 || break
  PP=/none; [ $rep = 1 ] && [ $v = d ] && PP=benches/peers/peers.py
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$rep.md | cut -d'|' -f3,5)"
done; done
for n in 12 8; do left 330 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-d-r$n.md > $W/noise-d-r$n.log 2>&1
  echo "== d rows $n: $(grep -h 'one pass' $W/noise-d-r$n.md | cut -d'|' -f3-5 | cut -c1-150)"
done
for v in a d; do left 420 || break
  timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section InstructionStats --print-details all -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-$v.txt 2>&1
  echo "ncu $v: $(grep -E 'Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per' $W/ncu-noise-$v.txt | tr -s ' ' | tr '\n' ';')"
  grep -iE "stall_[a-z_]+ |Stall" $W/ncu-noise-$v.txt | head -24
done
for tool in memcheck racecheck synccheck; do left 480 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-d.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-d.txt | tail -1)"
done
left 520 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-d.txt 2>&1; echo "d noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-d.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
