#!/bin/bash
# Session 22, run L: main at the end of the session (m = 71c7c08's code) on an H100: knn1 diff-test in full, the
# graph groups (the CPU push changed), sanitizers over knn1, one query x 1,000 / 10,000 rows twice (torch in the
# first round).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22L}
B=$(mktemp -d); xz -dc .device-carry/gz/recall-m.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 120 $R diff-test --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
for g in graph graph-handle graph-frontier; do timeout 60 $R diff-test --quick --group $g > $W/diff-$g.txt 2>&1; echo "$g: $(grep -h 'PASS\|FAIL' $W/diff-$g.txt | tail -1)"; done
P=benches/peers/peers.py
for rep in 1 2; do for rows in 1000 10000; do left 240 || break
  PP=/none; [ $rep = 1 ] && PP=$P
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script $PP --out $W/q1-r$rows-$rep.md > /dev/null 2>&1
  echo "$rep x$rows: e2e $(grep -h 'Engine::knn_in' $W/q1-r$rows-$rep.md | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $W/q1-r$rows-$rep.md | cut -d'|' -f3) floor $(grep -h 'host spins' $W/q1-r$rows-$rep.md | cut -d'|' -f3) $(grep -h 'torch.topk' $W/q1-r$rows-$rep.md | cut -d'|' -f3)"
done; done
for tool in memcheck synccheck; do left 330 || break
  timeout 60 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
