#!/bin/bash
# Session 37, run B (one GPU host). n2 = s37 with the nonzero scan unified and a spreading graph's large arrays staged
# through the pinned ring (commit in console.txt). m = main before the session (644778a).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s37B}
B=$(mktemp -d); for v in recall-m recall-n2 gpu-test-n2 pool-gpu-n2; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 585 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 100 $B/pool-gpu-n2 --test-threads 1 > $D/pool-gpu.txt 2>&1; echo "memory-pool gpu tests (n2): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/pool-gpu.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/pool-gpu.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 200 $B/gpu-test-n2 --test-threads 1 > $D/gpu-test.txt 2>&1; echo "facade gpu tests (n2): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED|^test .*(graph|candidates)" $D/gpu-test.txt | head -8 | tee -a $W/console.txt
T0=$(date +%s); timeout 60 $B/recall-n2 diff-test --arch sm_90 --quick > $W/difftest-n2.txt 2>&1; echo "quick diff-test (n2): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-n2.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
# Spreading over the generated 1 M / 16 M graph: the graph's upload pageable and staged (n2), every path's time.
for v in m n2; do left 120 || break
  T0=$(date +%s); timeout 120 $B/recall-$v bench spread --nodes 1000000 --edges 16000000 --hops 3 > $D/spread-$v.md 2>&1; echo "bench spread ($v): rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
  grep -E "^\| " $D/spread-$v.md | grep -v -- "---" | head -24 | tee -a $W/console.txt
done
cat $D/spread-*.md > $W/spread.md
# Plain spread's break-even: m; n2 as in production; n2 with every large copy staged from the first call.
for run in "m" "n2" "n2 --staging-payback 0"; do left 60 || break
  set -- $run; v=$1; shift; T0=$(date +%s)
  RECALL_CACHE_DIR=$(mktemp -d) timeout 150 $B/recall-$v bench break-even --ops spread "$@" --out $D/be-$v$#.md > /dev/null 2>&1; echo "break-even spread ($run): rc=$? $(( $(date +%s) - T0 ))s $(grep -E '^\| spread \|' $D/be-$v$#.md)" | tee -a $W/console.txt
done
for f in $D/be-*.md; do echo "== $(basename $f)"; cat $f; done > $W/break-even-spread.md
{ for f in $D/pool-gpu.txt $D/gpu-test.txt; do echo "== $(basename $f)"; grep -E "^test |test result" $f; done; } > $W/tests.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
