#!/bin/bash
# Session 32, run G (H200): the staged out-of-core path keeping its two pinned staging buffers between calls
# (c = s32c tip) against n = 6c8e63c (page-locked on every call, 32 MiB chunks): 1 M x 768 over a 1.5 GiB budget, 1
# and 64 queries, alternated, two rounds; each run also checks the streamed and in-memory top-10 bits. First the
# host-pool GPU tests at c (the streamed knn twice on rayon's only worker: the second call reuses the buffers).
N=${RUN:-s32G}
B=$(mktemp -d); for v in recall-n recall-c streamed-c; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $B/streamed-c --test-threads 1 > $W/streamed-c.txt 2>&1; echo "streamed-c: rc=$? $(grep 'test result' $W/streamed-c.txt)"
for rep in 1 2; do for q in 1 64; do for v in n c; do
  RECALL_GPU_CORPUS_BUDGET_MIB=1536 timeout 100 $B/recall-$v bench stream --rows 1000000 --dim 768 --queries $q --k 10 --chunk-mib 256 --iters 5 --out $W/stream-q$q-$v-$rep.md > $W/stream-q$q-$v-$rep.log 2>&1
  echo "q$q $rep $v: rc=$? $(grep -h 'corpus handle\|plain slice' $W/stream-q$q-$v-$rep.md | cut -d'|' -f3 | tr '\n' ' ') $(grep -h 'identical' $W/stream-q$q-$v-$rep.md)"
done; done; done
true
