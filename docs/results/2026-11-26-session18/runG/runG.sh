#!/bin/bash
# Session 18, run G: i = h with one head a split computed without a division when n_splits >= k — against a
# (331797a) at k = 10 (three times, alternated) and 32; fused-fast diff-test of i.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a i; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-i
W=$(mktemp -d)/s18G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s18G.tgz s18G' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
timeout 150 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-i.txt 2>&1; grep -h "fused\|PASS\|FAIL" $W/diff-fast-i.txt | tail -3
timeout 150 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-i.txt 2>&1; tail -1 $W/diff-tc-i.txt
n=0; for kk in 10 10 32 10; do n=$((n+1)); for v in a i; do
  timeout 150 $B/recall-$v bench knn --queries 1024 --rows 1000000 --dim 768 --k $kk --iters 5 --no-cpu --peer-script /none --out $W/q1024-k$kk-$v-$n.md > /dev/null 2>&1
  f=$W/q1024-k$kk-$v-$n.md
  echo "== k=$kk $v $n: $(grep -h 'kernel level: .sm90a_knn' $f | cut -d'|' -f3 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -c 'select_topk: yes' $f) yes"
done; done
true
