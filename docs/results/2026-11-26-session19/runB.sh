#!/bin/bash
# Session 19, run B: the whole quick diff-test of m; single query 1,000 / 10,000 rows a against m (knn1_bulk through
# chain_pieces: 64 -> 62 registers in sm90a_knn1_cosine).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a m; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-m
W=$(mktemp -d)/s19B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19B.tgz s19B' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-m.txt 2>&1; echo "all m: $(tail -1 $W/diff-all-m.txt)"
for r in 1 2 3; do for rows in 1000 10000; do for v in a m; do left 500 || continue
  f=$W/r$rows-$v-$r.md
  timeout 60 $B/recall-$v bench knn --dim 768 --queries 1 --iters 300 --no-cpu --rows $rows --k 10 --peer-script /none --out $f > $W/r$rows-$v-$r.log 2>&1
  echo "== rows=$rows $v $r: $(grep -h 'Engine::knn_in' $f | head -1 | cut -d'|' -f3)"
done; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
