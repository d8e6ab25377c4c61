#!/bin/bash
# Session 25, run C (H200): c (139c960, main) against e (c + sm80_clip_noise_rows' staging and output addresses as
# pieces past the block's first row: 27 -> 18 instructions a staged piece, 165 -> 162 a noise piece) and f (e with
# 512 threads a block, runC/threads512.patch) at 24 rows a block (same shared memory per warp as 12 of 256), three
# rounds alternated; f at 16 / 20 / 32 rows and e at 16 rows once; noise diff-tests of e and f.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25C}
B=$(mktemp -d); for v in c e f; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for v in e f; do timeout 100 $B/recall-$v diff-test --arch sm_90 --group noise > $W/diff-noise-$v.txt 2>&1; echo "$v noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-$v.txt | tail -1)"; done
run() { v=$1; rows=$2; tag=$3
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$rows $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$tag.md > $W/noise-$tag.log 2>&1
  echo "== $tag ($v, $rows rows): $(grep -h 'one pass' $W/noise-$tag.md | cut -d'|' -f3-5 | cut -c1-150)"; }
for rep in 1 2 3; do left 240 || break; run c 12 c-$rep; run e 12 e-$rep; run f 24 f-$rep; done
for r in 16 20 32; do left 300 || break; run f $r f-rows$r; done
left 320 && run e 16 e-rows16
timeout 80 compute-sanitizer --tool memcheck $B/recall-f diff-test --arch sm_90 --quick --group noise > $W/memcheck-noise-f.txt 2>&1; echo "f memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-noise-f.txt | tail -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
