#!/bin/bash
# Session 21, run A: a (3132a8a, main) verified on the GPU (whole quick diff-test; graph groups in full and over
# every arch); b (a + sm80_clip_noise_rows with the norm chains behind the workers' noise) against a: noise group in
# full and over every arch, clip-and-noise alternated twice (torch once), b's rows a block, ncu, sanitizers;
# knn1 kernels at 1,000 / 10,000 rows listed by ncu.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a b; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21A.tgz s21A' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
A=$B/recall-a; R=$B/recall-b
timeout 150 $A diff-test --arch sm_90 --quick > $W/diff-quick-a.txt 2>&1; echo "a quick: $(grep -h 'PASS\|FAIL' $W/diff-quick-a.txt | tail -1) $(( $(date +%s) - S0 ))s"
G="--group graph --group graph-handle --group graph-frontier"
timeout 90 $A diff-test --arch sm_90 $G > $W/diff-graph-a.txt 2>&1; echo "a graph full: $(grep -h 'PASS\|FAIL' $W/diff-graph-a.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-b.txt 2>&1; echo "b noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-b.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-b.txt | head -4
for rep in 1 2; do for v in a b; do left 330 || break
  PP=/none; [ $rep = 1 ] && [ $v = b ] && PP=benches/peers/peers.py
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$rep.md | cut -d'|' -f3,5)"
done; done
for n in 14 4 10; do left 380 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-b-r$n.md > $W/noise-b-r$n.log 2>&1
  echo "== b rows $n: $(grep -h 'one pass' $W/noise-b-r$n.md | cut -d'|' -f3-5 | cut -c1-150)"
done
left 420 && { timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $R bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-b.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Block Limit Shared|Registers Per|barrier" $W/ncu-noise-b.txt | head -14; }
for tool in memcheck racecheck synccheck; do left 470 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-b.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-b.txt | tail -1)"
done
left 500 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-b.txt 2>&1; echo "b noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-b.txt | tail -1)"; }
left 530 && { timeout 60 $A diff-test --arch all --quick $G > $W/diff-graph-all-a.txt 2>&1; echo "a graph all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-graph-all-a.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
