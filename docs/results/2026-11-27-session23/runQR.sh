#!/bin/bash
# Session 23, run R (binary d: run Q's with the helper's norm chain loading 8 pieces ahead; run Q: for cosine, warp 2 runs the query's norm chain beside warp 0's row chains; run P: e3cdfb4 plus run O's diagnostic, and sm90a_knn1s no longer asks the barriers of
# whole rows it has seen land; the exit drains whole rows never consumed): knn1 diff-test in full, memcheck over the
# quick knn1 group, then served / launched one query at 100 / 1,000 / 4,096 / 10,000 rows with block 0's cycles.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23P}
B=$(mktemp -d); xz -dc .device-carry/recall-d.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --group knn1 > $W/diff-knn1.txt 2>&1; echo "knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -h "ERROR" $W/diff-knn1.txt | head -3
for rows in 100 1000 4096 10000; do
  f=$W/q1-r$rows.md
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  echo "x$rows: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) | $(grep -h 'knn1: query in\|knn1 served: query\|block 0.s part\|diag: block 0 chain' $f | cut -d'|' -f3 | tr '\n' ' ')"
done
timeout 120 compute-sanitizer --tool memcheck $R diff-test --quick --group knn1 > $W/memcheck-knn1.txt 2>&1; echo "memcheck: rc=$? $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1.txt | tail -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
