#!/bin/bash
# Session 19, run S: x (sm90a_scan1_* by default on Hopper): whole quick diff-test (default), scan1 group with the
# switch off; 1 query x 1M on / off alternated, torch once; memcheck and racecheck over the scan1 group.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-x.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s19S; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19S.tgz s19S' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick (on): $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1)"
timeout 100 env RECALL_SCAN1_L2_256=off $R diff-test --arch sm_90 --quick --group scan1 > $W/diff-scan1-off.txt 2>&1; echo "scan1 off: $(grep -h 'PASS\|FAIL' $W/diff-scan1-off.txt | tail -1)"
for rep in 1 2; do for sw in off on; do PP=/none; [ $rep = 1 ] && [ $sw = on ] && PP=benches/peers/peers.py
  timeout 60 env RECALL_SCAN1_L2_256=$sw $R bench knn --queries 1 --rows 1000000 --dim 768 --k 10 --iters 30 --no-cpu --peer-script $PP --out $W/q1-$sw-$rep.md > $W/q1-$sw-$rep.log 2>&1
  echo "$sw $rep: $(grep -h 'Engine::knn_in' $W/q1-$sw-$rep.md | cut -d'|' -f3-4 | cut -c1-110) $(grep -h 'torch.topk' $W/q1-$sw-$rep.md | cut -d'|' -f3,4 | cut -c1-80)"
done; done
timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group scan1 > $W/memcheck-scan1.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-scan1.txt | tail -1)"
timeout 100 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group scan1 > $W/racecheck-scan1.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-scan1.txt | tail -1)"
true
