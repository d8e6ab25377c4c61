#!/bin/bash
# Session 19, run K on an H100: binary s (8873f6a, = main's code): clip-and-noise (one pass and two passes, torch),
# k-means (torch), and issue 4's 1 query x 1M and 1,024 q rows (torch), the diff-test's noise and fused-fast groups.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-s.xz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s19K; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19K.tgz s19K' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; nproc; } > $W/info.txt 2>&1; cat $W/info.txt | head -3
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
P=benches/peers/peers.py
t timeout 100 $R diff-test --arch sm_90 --quick --group noise --group fused-fast --group kmeans > $W/diff-q.txt 2>&1; echo "diff: $(grep -h 'PASS\|FAIL' $W/diff-q.txt | tail -1)"
for rep in 1 2; do PP=/none; [ $rep = 1 ] && PP=$P
  t timeout 120 $R bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $PP --out $W/noise-$rep.md > $W/noise-$rep.log 2>&1
  grep -h "copy, 1 GiB\|clip_noise\|randn" $W/noise-$rep.md | cut -d'|' -f2-5 | cut -c1-170
done
t timeout 120 $R bench kmeans --rows 1000000 --dim 128 --clusters 1024 --iters 7 --no-cpu --peer-script $P --out $W/kmeans.md > $W/kmeans.log 2>&1
grep -h "recall GPU: assignment\|matmul" $W/kmeans.md | cut -d'|' -f2-4 | cut -c1-170
t timeout 120 $R bench knn --queries 1 --rows 1000000 --dim 768 --k 10 --iters 20 --no-cpu --peer-script $P --out $W/q1-1m.md > $W/q1-1m.log 2>&1
grep -h "Engine::knn_in\|torch.topk" $W/q1-1m.md | cut -d'|' -f2-4 | cut -c1-200
left 400 && { t timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/q1024.md > $W/q1024.log 2>&1
grep -h "Engine::knn_in\|kernel level: .sm90a_knn\|fp16\|torch.topk(normalize(q) @" $W/q1024.md | cut -d'|' -f2-4 | cut -c1-200; }
echo "total $(( $(date +%s) - S0 )) s"
true
