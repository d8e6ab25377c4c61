#!/bin/bash
# Session 21, run G (H200) / H (H100): h (cf57d67, main: refined Box-Muller division and square root, 12 rows a
# block) against a (3132a8a): h's whole quick diff-test, noise group in full and over every arch, sanitizers over the
# noise group; clip-and-noise alternated three times with torch in rounds 1 and 3; one query x 1,000 / 10,000 rows.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s21G}
B=$(mktemp -d); for v in a h; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-h; P=benches/peers/peers.py
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-h.txt 2>&1; echo "h quick: $(grep -h 'PASS\|FAIL' $W/diff-quick-h.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 100 $R diff-test --arch sm_90 --group noise > $W/diff-noise-h.txt 2>&1; echo "h noise full: $(grep -h 'PASS\|FAIL' $W/diff-noise-h.txt | tail -1)"; grep -h "clip_noise\|radii" $W/diff-noise-h.txt | head -4
for rep in 1 2 3; do for v in a h; do left 300 || break
  PP=/none; [ $rep != 2 ] && [ $v = h ] && PP=$P
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1
  echo "== $v $rep: $(grep -h 'one pass' $W/noise-$v-$rep.md | cut -d'|' -f3-5 | cut -c1-150) $(grep -h 'randn' $W/noise-$v-$rep.md | cut -d'|' -f3,5)"
done; done
for rows in 1000 10000; do left 360 || break
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/q1-r$rows.md > $W/q1-r$rows.log 2>&1
  echo "q1 x $rows: $(grep -h 'Engine::knn_in\|^| peer\|torch' $W/q1-r$rows.md | cut -d'|' -f2-4 | cut -c1-140 | tr '\n' ';')"
done
for tool in memcheck racecheck synccheck; do left 430 || break
  timeout 80 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group noise > $W/$tool-noise-h.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-noise-h.txt | tail -1)"
done
left 470 && { timeout 60 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-h.txt 2>&1; echo "h noise all-arch quick: $(grep -h 'PASS\|FAIL' $W/diff-noise-all-h.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
