#!/bin/bash
# Session 26, run K (H200): clip-and-noise 1M x 768 with the user's call on host rows, a fresh output each call
# (Engine::clip_and_noise) against one output reused (Engine::clip_and_noise_into), beside the resident-data kernel
# figures and torch; binary k (f069738: those two rows added to `recall bench noise`).
N=${RUN:-s26K}
B=$(mktemp -d); xz -dc .device-carry/recall-s26k.xz > $B/recall; chmod +x $B/recall
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do P=/none; [ $rep = 1 ] && P=benches/peers/peers.py
  T0=$(date +%s); timeout 200 $B/recall bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $P --out $W/noise-$rep.md > $W/noise-$rep.log 2>&1; echo "round $rep: rc=$? $(( $(date +%s) - T0 ))s"; grep -h "one pass\|host memory\|torch\|device copy" $W/noise-$rep.md | cut -d'|' -f2,3,4,5
done
echo "total $(( $(date +%s) - S0 )) s"
true
