#!/bin/bash
# Session 19, run F: p (s19 HEAD: knn_fast's plan in one place) correctness, then every benchmark row of issues 4 and 5
# with its peer in the same run (status of main's code at the end of session 19).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-p
W=$(mktemp -d)/s19F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19F.tgz s19F' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; python3 -c "import torch, cupy; print(torch.__version__, cupy.__version__)"; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
P=benches/peers/peers.py
t timeout 100 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-p.txt 2>&1; echo "diff fast p: $(grep -h 'PASS\|FAIL' $W/diff-fast-p.txt | tail -1)"
t timeout 100 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-p.txt 2>&1; echo "diff tc p: $(grep -h 'PASS\|FAIL' $W/diff-tc-p.txt | tail -1)"
b() { # b name args...
  local n=$1; shift
  left 560 || { echo "skip $n"; return; }
  t timeout 150 $R bench "$@" --no-cpu --peer-script $P --out $W/$n.md > $W/$n.log 2>&1
  echo "== $n: $(tail -1 $W/$n.log)"; grep -h "x the peer\|/ peer\|peer =\|% of copy\|Engine::knn_in\|bandwidth" $W/$n.md | cut -c1-230 | head -8
}
b q1-1m knn --queries 1 --rows 1000000 --dim 768 --k 10 --iters 20
b q1-1m-k100 knn --queries 1 --rows 1000000 --dim 768 --k 100 --iters 20
b q1-1m-k1000 knn --queries 1 --rows 1000000 --dim 768 --k 1000 --iters 20
b cos-q1-1m cosine --queries 1 --rows 1000000 --dim 768 --iters 20
b q1-r1000 knn --queries 1 --rows 1000 --dim 768 --k 10 --iters 300
b q1-r10000 knn --queries 1 --rows 10000 --dim 768 --k 10 --iters 300
b q1024 knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5
b cand candidates --rows 1000000 --dim 768 --batch-queries 1024 --candidates 1000 --k 10 --iters 20
b noise noise --rows 1000000 --dim 768 --iters 20
b kmeans kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 5
b spread spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20
echo "total $(( $(date +%s) - S0 )) s"
true
