#!/bin/bash
# Session 35, run B (one GPU host): m = main (ff5bef0), n = s35 at 33ffded (staged uploads of caller slices,
# knn_batch), the same binaries as run A. Run A compared outputs with `cmp` on folders and so compared nothing.
# 1. `recall knn` over a 500,000 x 768 .npy corpus: 128, 256 and 512 queries, m and n under auto and forced to
#    the CPU and the GPU, in a rotating order, twice; every output folder compared with m's CPU answer (diff -r).
# 2. pool_bench with a 64 MiB corpus (the staged path's threshold is 16 MiB).
# 3. `recall bench break-even --ops kmeans,clip_and_noise` for m and n, fresh caches.
# 4. n's `recall demo`, fresh cache.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35B}
B=$(mktemp -d); for v in recall-m recall-n pool-bench-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W; D=$(mktemp -d)
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
python3 -c "
import numpy as np
r = np.random.default_rng(5)
np.save('$D/corpus.npy', r.standard_normal((500000, 768), dtype=np.float32))
for q in (16, 64, 128, 256, 512, 1024):
    np.save('$D/q%d.npy' % q, r.standard_normal((q, 768), dtype=np.float32))
"
CM=$(mktemp -d); CN=$(mktemp -d)
# Both binaries' calibrations made first (knn and knn_batch for n, knn for m).
for v in m n; do C=$CM; [ $v = n ] && C=$CN
  for q in 16 512; do RECALL_CACHE_DIR=$C timeout 60 $B/recall-$v knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/warm > /dev/null 2>&1; done
done
one() { # variant queries round
  local v=$1 q=$2 r=$3 C=$CN E=auto b=${1%%-*}
  [ $b = m ] && C=$CM; case $v in *-cpu) E=cpu;; *-gpu) E=gpu;; esac
  echo -n "q$q r$r $v: "; RECALL_DEVICE=$E RECALL_CACHE_DIR=$C timeout 60 $B/recall-$b knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/o-$q-$v-$r 2>&1 | tail -1
}
for q in 128 256 512; do
  one m-cpu $q 0 >> $W/knn.txt
  for r in 1 2; do
    if [ $r = 1 ]; then order="m n n-cpu n-gpu m-gpu"; else order="m-gpu n-gpu n-cpu n m"; fi
    for v in $order; do one $v $q $r; done
  done | tee -a $W/knn.txt
  for o in $D/o-$q-*; do diff -rq $D/o-$q-m-cpu-0 $o > /dev/null && echo "  $(basename $o): identical to m-cpu" || echo "  $(basename $o): DIFFERS from m-cpu"; done | tee -a $W/knn.txt
done
ls -la $D/o-512-m-cpu-0 >> $W/knn.txt
T0=$(date +%s); RECALL_COMMIT=33ffded timeout 60 $B/pool-bench-n --corpus-mib 64 --reps 5 --staged-chunk-mib 32 > $W/pool-bench-64-n.md 2>&1; echo "pool bench 64 MiB: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (pageable|staged|pinned \+ cuMemcpyHtoDAsync \(whole\))" $W/pool-bench-64-n.md | head -12
for v in m n; do
  T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 100 $B/recall-$v bench break-even --ops kmeans,clip_and_noise --out $W/break-even-$v.md > $W/break-even-$v.txt 2>&1; echo "break-even $v: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (kmeans|clip_and_noise) " $W/break-even-$v.md
done
export RECALL_CACHE_DIR=$(mktemp -d)
timeout 60 $B/recall-n demo > $W/demo-n.txt 2>&1; echo "demo: rc=$?"; grep -E "^\| (knn|spread|re-score|k-means|clip)" $W/demo-n.txt
echo "total $(( $(date +%s) - S0 )) s"
true
