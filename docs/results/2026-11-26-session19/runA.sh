#!/bin/bash
# Session 19, run A: m (s19 = main + sm90a_knnm_* for k > splits + tc_knn merge_round through merge_pending +
# knn1_bulk through chain_pieces + max_abs by compare/select + fast-path parts in bench knn) against a (main 0a6acb1).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a m; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-m
W=$(mktemp -d)/s19A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19A.tgz s19A' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-fast-m.txt 2>&1; echo "diff fast m: $(tail -1 $W/diff-fast-m.txt)"
t timeout 100 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fused-fast > $W/diff-tc-m.txt 2>&1; echo "diff tc m: $(tail -1 $W/diff-tc-m.txt)"
kb() { # kb name bin k [env]
  local f=$W/q1024-$1.md
  timeout 100 env $4 $B/recall-$2 bench knn --queries 1024 --rows 1000000 --dim 768 --k $3 --iters 5 --no-cpu --peer-script /none --out $f > $W/q1024-$1.log 2>&1
  echo "== $1: $(grep -h 'kernel level: .\(sm90a\|tc\)_knn' $f | cut -d'|' -f3 | tr '\n' ' ') e2e: $(grep -h 'Engine::knn_in., fast' $f | cut -d'|' -f3 | tr '\n' ' ') $(grep -c 'select_topk: yes' $f) yes"
}
for r in 1 2; do for v in a m; do kb k10-$v-$r $v 10; done; done
grep -h "before the kernel" $W/q1024-k10-m-*.md | cut -c1-200
for kk in 32 20; do for v in a m; do left 400 && kb k$kk-$v $v $kk; done; done
for v in a m; do left 450 && kb tc-k10-$v $v 10 RECALL_WGMMA=off; done
left 480 && { t timeout 110 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-m.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-m.txt | tail -1; }
echo "total $(( $(date +%s) - S0 )) s"
true
