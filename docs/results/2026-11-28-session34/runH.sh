#!/bin/bash
# Session 34, run H (one GPU host): run G's 16-query calls took 30 ms with m and 46-47 ms with n, both on the CPU, m's
# all before n's. The same calls alternated: m = main (027a28e), n = 9681ef0, each binary's calibration made
# first (one 512-query call), then 16 queries three times and 512 twice, m and n in turn.
N=${RUN:-s34H}
B=$(mktemp -d); for v in recall-m recall-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W; D=$(mktemp -d)
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
python3 -c "
import numpy as np
r = np.random.default_rng(5)
np.save('$D/corpus.npy', r.standard_normal((500000, 768), dtype=np.float32))
np.save('$D/q512.npy', r.standard_normal((512, 768), dtype=np.float32))
np.save('$D/q16.npy', r.standard_normal((16, 768), dtype=np.float32))
"
CM=$(mktemp -d); CN=$(mktemp -d)
RECALL_CACHE_DIR=$CM $B/recall-m knn --corpus $D/corpus.npy --queries $D/q512.npy --k 10 --out $D/o > /dev/null 2>&1
RECALL_CACHE_DIR=$CN $B/recall-n knn --corpus $D/corpus.npy --queries $D/q512.npy --k 10 --out $D/o > /dev/null 2>&1
for q in 16 16 16 512 512; do for v in m n; do
  C=$CM; [ $v = n ] && C=$CN
  echo -n "$v: "; RECALL_CACHE_DIR=$C timeout 60 $B/recall-$v knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/o-$v 2>&1 | tee -a $W/knn.txt
done; done
true
