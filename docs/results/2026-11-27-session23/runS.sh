#!/bin/bash
# Session 23, run S (binary s = the s23 branch's last code commit): knn1 diff-test in full, memcheck and synccheck
# over the quick knn1 group, one query x 1,000 / 10,000 rows served and launched, two alternated rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23S}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
for rep in 1 2; do for rows in 1000 10000; do for sv in off on; do
  f=$W/q1-r$rows-$sv-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=$sv $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  echo "$rep x$rows $sv: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3)"
done; done; done
for tool in memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool $R diff-test --quick --group knn1 > $W/$tool-knn1.txt 2>&1; echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY' $W/$tool-knn1.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
