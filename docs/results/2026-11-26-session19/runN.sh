#!/bin/bash
# Session 19, run N: u (sm80_clip_noise_rows: cp.async staging, first noise while the rows land) against t (main):
# diff-tests (sm_90 quick, full noise group, every arch quick), clip-and-noise at 16 and 8 rows a block, torch once.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in t u; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-u
W=$(mktemp -d)/s19N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19N.tgz s19N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1; head -3 $W/info.txt
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-sm90-quick.txt 2>&1; echo "sm_90 quick: $(grep -h 'PASS\|FAIL' $W/diff-sm90-quick.txt | tail -1)"
t timeout 120 $R diff-test --arch sm_90 --group noise > $W/diff-noise-full.txt 2>&1; echo "noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-full.txt | tail -1)"; grep -h "clip_noise" $W/diff-noise-full.txt
for rep in 1 2; do for v in t u; do for n in 16 8; do PP=/none; [ $rep = 1 ] && [ $v = u ] && [ $n = 16 ] && PP=benches/peers/peers.py
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$n $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$n-$rep.md > $W/noise-$v-$n-$rep.log 2>&1
  echo "== $v rows $n $rep: $(grep -h 'one pass' $W/noise-$v-$n-$rep.md | cut -d'|' -f2-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$n-$rep.md | cut -d'|' -f3,5)"
done; done; done
t timeout 100 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group noise > $W/racecheck-u.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-u.txt | tail -1)"
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group noise > $W/memcheck-u.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-u.txt | tail -1)"
t timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group noise > $W/synccheck-u.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-u.txt | tail -1)"
left 400 && { t timeout 200 $R diff-test --arch all --quick > $W/diff-all-quick.txt 2>&1; echo "all arches quick: $(grep -h 'PASS\|FAIL' $W/diff-all-quick.txt | tail -1)"; grep -h "clip_noise" $W/diff-all-quick.txt | awk '{print $1, $NF, $(NF-4)}' | head -24; }
echo "total $(( $(date +%s) - S0 )) s"
true
