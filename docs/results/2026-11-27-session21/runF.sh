#!/bin/bash
# Session 21, run F: g (e + the block's last 2 pieces per thread of warps 1-7 made during the norm chains, the other
# pieces spread warp 0 last) against e (cf57d67's kernel): g's noise group in full, clip-and-noise alternated at
# 12 / 13 / 16 rows a block, g at 9 / 17 rows, sanitizers, every arch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e g; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s21F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21F.tgz s21F' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-g
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-g.txt 2>&1; echo "g noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-g.txt | tail -1)"
timeout 100 env RECALL_CLIP_NOISE_ROWS=13 $R diff-test --arch sm_90 --group noise > $W/diff-noise-g13.txt 2>&1; echo "g noise full rows 13: $(grep -h 'PASS\|FAIL' $W/diff-noise-g13.txt | tail -1)"
for rep in 1 2; do for n in 12 13 16; do for v in e g; do left 300 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v-r$n-$rep.md > $W/noise-$v-r$n-$rep.log 2>&1
  echo "== $v rows $n $rep: $(grep -h 'one pass' $W/noise-$v-r$n-$rep.md | cut -d'|' -f3-5 | cut -c1-150)"
done; done; done
for n in 9 17 11; do for v in g e; do left 330 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v-r$n.md > $W/noise-$v-r$n.log 2>&1
  echo "== $v rows $n: $(grep -h 'one pass' $W/noise-$v-r$n.md | cut -d'|' -f3-5 | cut -c1-150)"
done; done
for tool in memcheck racecheck synccheck; do left 400 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-g.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-g.txt | tail -1)"
done
left 440 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-g.txt 2>&1; echo "g noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-g.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
