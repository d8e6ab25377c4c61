#!/bin/bash
# Session 32, run F (H200): the staged out-of-core path capped at 32 MiB chunks (n = 6c8e63c) against m = 9a64895
# (the caller's 256 MiB chunks): 1 M x 768 over a 1.5 GiB budget, 1 and 64 queries, alternated, two rounds; each run
# also checks that the streamed paths and the in-memory knn give the same top-10 bits.
N=${RUN:-s32F}
B=$(mktemp -d); for v in recall-m recall-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for q in 1 64; do for v in m n; do
  RECALL_GPU_CORPUS_BUDGET_MIB=1536 timeout 100 $B/recall-$v bench stream --rows 1000000 --dim 768 --queries $q --k 10 --chunk-mib 256 --iters 5 --out $W/stream-q$q-$v-$rep.md > $W/stream-q$q-$v-$rep.log 2>&1
  echo "q$q $rep $v: rc=$? $(grep -h 'corpus handle\|plain slice' $W/stream-q$q-$v-$rep.md | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'identical' $W/stream-q$q-$v-$rep.md)"
done; done; done
true
