#!/bin/bash
# Session 19, run R: w (main + sm90a_scan1_*: .L2::256B copies; RECALL_SCAN1_L2_256=on) at 1 query x 1M x 768: scan1 and
# knn diff-test groups with the switch on; Engine::knn_in off / on alternated; torch once.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-w.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s19R; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19R.tgz s19R' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 100 env RECALL_SCAN1_L2_256=on $R diff-test --arch sm_90 --quick --group scan1 --group kernels > $W/diff-on.txt 2>&1; echo "diff on: $(grep -h 'PASS\|FAIL' $W/diff-on.txt | tail -1)"
for rep in 1 2 3; do for sw in off on; do PP=/none; [ $rep = 1 ] && [ $sw = on ] && PP=benches/peers/peers.py
  timeout 60 env RECALL_SCAN1_L2_256=$sw $R bench knn --queries 1 --rows 1000000 --dim 768 --k 10 --iters 30 --no-cpu --peer-script $PP --out $W/q1-$sw-$rep.md > $W/q1-$sw-$rep.log 2>&1
  echo "$sw $rep: $(grep -h 'Engine::knn_in' $W/q1-$sw-$rep.md | cut -d'|' -f3-4 | cut -c1-110) $(grep -h 'torch.topk' $W/q1-$sw-$rep.md | cut -d'|' -f3,4 | cut -c1-80)"
done; done
true
