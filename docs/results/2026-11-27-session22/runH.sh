#!/bin/bash
# Session 22, run H: t (sm90a_knn1 blocks of 4 warps where they have an SM each, and the query in the parameters
# above 16 KiB read over the bus) against s (16c4a19: 8 warps, 32 KiB): t's knn1 diff-test in full, one query x
# 100 / 300 / 1,000 / 4,096 / 10,000 rows alternated three times, torch beside t's first round.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22H}
B=$(mktemp -d); for v in s t; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 120 $B/recall-t diff-test --arch sm_90 --group knn1 > $W/diff-knn1-t.txt 2>&1; echo "t knn1: $(grep -h 'PASS\|FAIL' $W/diff-knn1-t.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -q PASS $W/diff-knn1-t.txt || exit 0
P=benches/peers/peers.py
for rep in 1 2 3; do for rows in 100 300 1000 4096 10000; do for v in s t; do left 400 || break
  PP=/none; [ $rep = 1 ] && [ $v = t ] && [ $rows = 1000 -o $rows = 10000 ] && PP=$P
  timeout 60 $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $W/q1-r$rows-$v-$rep.md > /dev/null 2>&1
  echo "$v $rep x$rows: e2e $(grep -h 'Engine::knn_in' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) floor $(grep -h 'host spins' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h 'torch.topk' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
left 450 && { timeout 80 compute-sanitizer --tool memcheck $B/recall-t diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-t.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-t.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
