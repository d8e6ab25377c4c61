#!/bin/bash
# Session 37, run D (one GPU host). n4 = s37's last code (commit in console.txt): run C's n3 plus the graph layout's
# passes in parallel. The GPU tests, the quick diff-test of every arch, memcheck over the graph groups, the spread bench
# (the graph's upload), and `recall demo` with a fresh calibration cache. m = main (644778a) for the bench.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s37D}
B=$(mktemp -d); for v in recall-m recall-n4 gpu-test-n4 pool-gpu-n4; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 100 $B/pool-gpu-n4 --test-threads 1 > $D/pool-gpu.txt 2>&1; echo "memory-pool gpu tests (n4): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/pool-gpu.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/pool-gpu.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 200 $B/gpu-test-n4 --test-threads 1 > $D/gpu-test.txt 2>&1; echo "facade gpu tests (n4): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test.txt | head -8 | tee -a $W/console.txt
T0=$(date +%s); timeout 120 $B/recall-n4 diff-test --arch all --quick > $W/difftest-all-n4.txt 2>&1; echo "quick diff-test, every arch (n4): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-all-n4.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
for g in graph graph-handle; do T0=$(date +%s); left 200 && { timeout 120 compute-sanitizer --tool memcheck $B/recall-n4 diff-test --arch sm_90 --quick --group $g > $D/memcheck-$g.txt 2>&1; echo "memcheck $g: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $D/memcheck-$g.txt | tail -2 | tr '\n' ' ')" | tee -a $W/console.txt; }; done
for v in n4 m n4; do left 100 || break
  T0=$(date +%s); timeout 120 $B/recall-$v bench spread --nodes 1000000 --edges 16000000 --hops 3 > $D/spread-$v-$T0.md 2>&1; echo "bench spread ($v): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
  grep -E "upload \(220|engine, graph resident|CPU \(16|3 hops \+ exact top-10 \+ activation download, graph" $D/spread-$v-$T0.md | tee -a $W/console.txt
done
cat $D/spread-*.md > $W/spread.md
left 90 && { T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 90 $B/recall-n4 demo > $W/demo-n4.txt 2>&1; echo "demo (n4): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "^\| (knn|spread|re-score|k-means|clip|scores)" $W/demo-n4.txt | tee -a $W/console.txt; }
{ for f in $D/pool-gpu.txt $D/gpu-test.txt $D/memcheck-*.txt; do echo "== $(basename $f)"; grep -E "^test |test result|ERROR SUMMARY" $f; done; } > $W/tests.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
