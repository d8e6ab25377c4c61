#!/bin/bash
# Session 25, run A (H200): c (s25, the table-driven noise contract) against b (220702a, main): c's noise group in
# full, whole quick diff-test, noise group over every arch; clip-and-noise on 1M x 768 alternated three rounds (torch
# in rounds 1 and 3), c at 8 / 16 rows a block too; sanitizers over c's noise group.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25A}
B=$(mktemp -d); for v in b c; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-c; P=benches/peers/peers.py
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-c.txt 2>&1; echo "c noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-c.txt | tail -1) $(( $(date +%s) - S0 ))s"; grep -h "clip_noise\|radii" $W/diff-noise-c.txt | head -4
for rep in 1 2 3; do for v in b c; do left 260 || break
  PP=/none; [ $rep != 2 ] && [ $v = c ] && PP=$P
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn\|device copy' $W/noise-$v-$rep.md | cut -d'|' -f2,3,5 | tr '\n' ' ')"
done; done
for rows in 8 16 12; do left 300 || break
  timeout 60 env RECALL_CLIP_NOISE_ROWS=$rows $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-c-rows$rows.md > $W/noise-c-rows$rows.log 2>&1
  echo "== c rows $rows: $(grep -h 'one pass' $W/noise-c-rows$rows.md | cut -d'|' -f3-5 | cut -c1-150)"
done
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-c.txt 2>&1; echo "c quick: $(grep -h 'PASS\|FAIL' $W/diff-quick-c.txt | tail -1) $(( $(date +%s) - S0 ))s"
for tool in memcheck racecheck synccheck; do left 440 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-c.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-c.txt | tail -1)"
done
left 500 && { timeout 80 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-c.txt 2>&1; echo "c noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-c.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
