#!/bin/bash
# Session 25, run D (H200): g (e + sm90a_clip_noise_rows: each block's rows staged by thread 0's bulk copies,
# cp.async.bulk with an mbarrier, instead of every thread's cp.async loop) against e (1fd05c3) and c (139c960),
# three rounds alternated, torch in rounds 1 and 3; g's noise group in full, whole quick diff-test, noise group over
# every arch, sanitizers over g's noise group; g at 8 / 16 rows a block once.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25D}
B=$(mktemp -d); for v in c e g; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-g; P=benches/peers/peers.py
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-g.txt 2>&1; echo "g noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-g.txt | tail -1)"; grep -h "clip_noise\|radii" $W/diff-noise-g.txt | head -4
run() { v=$1; rows=$2; tag=$3; pp=$4
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$rows $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $pp --out $W/noise-$tag.md > $W/noise-$tag.log 2>&1
  echo "== $tag ($v, $rows rows): $(grep -h 'one pass' $W/noise-$tag.md | cut -d'|' -f2-5 | cut -c1-190) $(grep -h 'randn\|device copy' $W/noise-$tag.md | cut -d'|' -f3,5 | tr '\n' ' ')"; }
for rep in 1 2 3; do left 260 || break
  PP=/none; [ $rep != 2 ] && PP=$P
  run c 12 c-$rep /none; run e 12 e-$rep /none; run g 12 g-$rep $PP; done
for r in 8 16; do left 300 || break; run g $r g-rows$r /none; done
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-g.txt 2>&1; echo "g quick: $(grep -h 'PASS\|FAIL' $W/diff-quick-g.txt | tail -1) $(( $(date +%s) - S0 ))s"
for tool in memcheck racecheck synccheck; do left 450 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-g.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-g.txt | tail -1)"
done
left 500 && { timeout 80 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-g.txt 2>&1; echo "g noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-g.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
