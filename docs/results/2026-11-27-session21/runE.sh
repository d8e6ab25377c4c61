#!/bin/bash
# Session 21, run E: f (e + the block's last pieces' noise made by warps 1-7 while warp 0 runs the norm chains)
# against e: f's noise group in full, clip-and-noise alternated (16 and 12 rows a block), f at 10 / 14 rows, ncu of
# f (stall reasons, pipe use), sanitizers, every arch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e f; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21E.tgz s21E' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-f
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-f.txt 2>&1; echo "f noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-f.txt | tail -1)"; grep -h "clip_noise\|radii" $W/diff-noise-f.txt | head -4
for rep in 1 2 3; do for n in 16 12; do for v in e f; do left 330 || break
  PP=/none; [ $rep = 1 ] && [ $v = f ] && [ $n = 16 ] && PP=benches/peers/peers.py
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-r$n-$rep.md > $W/noise-$v-r$n-$rep.log 2>&1
  echo "== $v rows $n $rep: $(grep -h 'one pass' $W/noise-$v-r$n-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-r$n-$rep.md | cut -d'|' -f3,5)"
done; done; done
for n in 10 14 8; do left 360 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-f-r$n.md > $W/noise-f-r$n.log 2>&1
  echo "== f rows $n: $(grep -h 'one pass' $W/noise-f-r$n.md | cut -d'|' -f3-5 | cut -c1-150)"
done
left 420 && { timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section InstructionStats --print-details all -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $R bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-f.txt 2>&1
  echo "ncu f: $(grep -E 'Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Executed Instructions  |Achieved Occupancy|Registers Per' $W/ncu-noise-f.txt | tr -s ' ' | tr '\n' ';')"
  grep -E "Stall (Barrier|Not Selected|Math|Wait|Dispatch)|ALU|FMA|XU|Pipe|Issue" $W/ncu-noise-f.txt | head -30; }
for tool in memcheck racecheck synccheck; do left 480 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-f.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-f.txt | tail -1)"
done
left 520 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-f.txt 2>&1; echo "f noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-f.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
