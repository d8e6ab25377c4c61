#!/bin/bash
# Session 34, run G (one GPU host): `recall knn` over .npy files (Engine::knn on a plain slice, auto device, a fresh
# calibration cache per binary): m = main (027a28e) against n = 9681ef0 (a batch whose queries repay the upload goes
# to the GPU). Corpus 500,000 x 768, queries 512 and 16; each call twice (the second reads the cached calibration);
# the answers of m and n compared byte for byte; the 512-query call on the CPU alone (RECALL_DEVICE=cpu) for scale.
N=${RUN:-s34G}
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
" && ls -la $D
for v in m n; do
  export RECALL_CACHE_DIR=$(mktemp -d)
  for q in 512 16 512 16; do
    timeout 120 $B/recall-$v knn --corpus $D/corpus.npy --queries $D/q$q.npy --k 10 --out $D/out-$v-$q 2>&1 | tee -a $W/knn-$v.txt
  done
done
for q in 512 16; do for f in ids scores; do cmp $D/out-m-$q/$f.npy $D/out-n-$q/$f.npy && echo "q$q $f: m and n identical"; done; done
RECALL_DEVICE=cpu timeout 120 $B/recall-n knn --corpus $D/corpus.npy --queries $D/q512.npy --k 10 --out $D/out-cpu 2>&1 | tee $W/knn-cpu.txt
for f in ids scores; do cmp $D/out-cpu/$f.npy $D/out-n-512/$f.npy && echo "q512 $f: cpu and n identical"; done
true
