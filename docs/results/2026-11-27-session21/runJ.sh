#!/bin/bash
# Session 21, run J (second try; the first hung: warp 0's lanes past the rows left the chain loop and met the
# chunk barriers at other instructions): i (h + the rows staged in 4 column chunks, one copy group each, warp 0 running the norm chains
# over each chunk as it lands: named barrier per chunk) against h (cf57d67, main): i's noise group in full,
# clip-and-noise alternated three times at 12 rows (default) and twice at 16, sanitizers, every arch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in h i; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21J; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21J.tgz s21J' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-i
timeout 40 $R diff-test --arch sm_90 --group noise > $W/diff-noise-i.txt 2>&1; echo "i noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-i.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-i.txt | head -3
grep -q "PASS" $W/diff-noise-i.txt || exit 0
for rep in 1 2 3; do for v in h i; do left 300 || break
  PP=/none; [ $rep = 1 ] && [ $v = i ] && PP=benches/peers/peers.py
  timeout 45 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$rep.md | cut -d'|' -f3,5)"
done; done
for rep in 1 2; do for v in h i; do left 330 || break
  timeout 30 env RECALL_CLIP_NOISE_ROWS=16 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v-r16-$rep.md > $W/noise-$v-r16-$rep.log 2>&1
  echo "== $v rows 16 $rep: $(grep -h 'one pass' $W/noise-$v-r16-$rep.md | cut -d'|' -f3-5 | cut -c1-150)"
done; done
left 380 && { timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats --print-details all -k regex:clip_noise_rows --launch-skip 3 --launch-count 1 $R bench noise --rows 1000000 --dim 768 --iters 3 --no-cpu --peer-script /none > $W/ncu-noise-i.txt 2>&1
  echo "ncu i: $(grep -E 'Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Executed Instructions  ' $W/ncu-noise-i.txt | tr -s ' ' | tr '\n' ';')"
  grep -E "Stall (Barrier|Not Selected|Math|Wait|Dispatch|Long)" $W/ncu-noise-i.txt | head -8; }
for tool in memcheck racecheck synccheck; do left 450 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-i.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-i.txt | tail -1)"
done
left 500 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-i.txt 2>&1; echo "i noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-i.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
