#!/bin/bash
# Session 37, run C (one GPU host). n3 = s37 (commit in console.txt): run B's n2 plus a graph's upload that writes only
# the hubs' ranges over the caller's edge arrays and checks ids by a parallel maximum. m = main (644778a).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s37C}
B=$(mktemp -d); for v in recall-m recall-n3 gpu-test-n3 pool-gpu-n3; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 100 $B/pool-gpu-n3 --test-threads 1 > $D/pool-gpu.txt 2>&1; echo "memory-pool gpu tests (n3): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/pool-gpu.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/pool-gpu.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 200 $B/gpu-test-n3 --test-threads 1 > $D/gpu-test.txt 2>&1; echo "facade gpu tests (n3): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test.txt | head -8 | tee -a $W/console.txt
T0=$(date +%s); timeout 120 $B/recall-n3 diff-test --arch all --quick > $W/difftest-all-n3.txt 2>&1; echo "quick diff-test, every arch (n3): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-all-n3.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
for g in graph graph-handle; do T0=$(date +%s); left 200 && { timeout 120 compute-sanitizer --tool memcheck $B/recall-n3 diff-test --arch sm_90 --quick --group $g > $D/memcheck-$g.txt 2>&1; echo "memcheck $g: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $D/memcheck-$g.txt | tail -2 | tr '\n' ' ')" | tee -a $W/console.txt; }; done
for v in m n3; do left 100 || break
  T0=$(date +%s); timeout 120 $B/recall-$v bench spread --nodes 1000000 --edges 16000000 --hops 3 > $D/spread-$v.md 2>&1; echo "bench spread ($v): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
  grep -E "upload|engine, graph resident|CPU \(16|3 hops \+ exact top-10 \+ activation download, graph" $D/spread-$v.md | tee -a $W/console.txt
done
cat $D/spread-*.md > $W/spread.md
for run in "m" "n3" "n3 --staging-payback 0"; do left 60 || break
  set -- $run; v=$1; shift; T0=$(date +%s)
  RECALL_CACHE_DIR=$(mktemp -d) timeout 150 $B/recall-$v bench break-even --ops spread "$@" --out $D/be-$v$#.md > /dev/null 2>&1; echo "break-even spread ($run): rc=$? $(( $(date +%s) - T0 ))s $(grep -E '^\| spread \|' $D/be-$v$#.md)" | tee -a $W/console.txt
done
for f in $D/be-*.md; do echo "== $(basename $f)"; cat $f; done > $W/break-even-spread.md
{ for f in $D/pool-gpu.txt $D/gpu-test.txt $D/memcheck-*.txt; do echo "== $(basename $f)"; grep -E "^test |test result|ERROR SUMMARY" $f; done; } > $W/tests.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
