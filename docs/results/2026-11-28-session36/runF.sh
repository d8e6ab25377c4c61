#!/bin/bash
# Session 36, run F (one H100): m = main before the session (4b2c61f), f = s36 at 6ce1178. The narrow GEMM tiles on
# another card: the quick diff-test of f, then cosine scores over 500,000 x 768 (16, 32, 64 and 130 queries) and knn
# of 32 and 64 queries over 1 M x 768, m and f alternated, torch in f's process.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36F}
B=$(mktemp -d); for v in recall-m recall-f; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 400 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -c "import torch; print('torch', torch.__version__)"; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 60 $B/recall-f diff-test --quick > $W/difftest-f.txt 2>&1; echo "quick diff-test (f): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-f.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
for q in 32 64 130 16; do for v in m f; do left 40 || break
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 60 $B/recall-$v bench cosine --rows 500000 --dim 768 --queries $q --iters 20 --no-cpu $peer > $D/cos-$q-$v.md 2>&1
  echo "cosine q$q $v: $(grep -E 'cosine kernel|normalize.q. @ corpus.T .fp32' $D/cos-$q-$v.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
cat $D/cos-*.md > $W/cosine.md
for q in 32 64; do for v in m f; do left 40 || break
  peer=""; [ $v = m ] && peer="--peer-script /none"
  timeout 90 $B/recall-$v bench knn --rows 1000000 --dim 768 --queries $q --iters 20 --no-cpu $peer > $D/knn-$q-$v.md 2>&1
  echo "knn q$q $v: $(grep -E 'Engine::knn_in. .corpus|torch.topk.normalize.q. @ corpus.T, 10.\` ' $D/knn-$q-$v.md | sed 's/|/ /g' | tr -s ' ' | tr '\n' ';')" | tee -a $W/console.txt
done; done
cat $D/knn-*.md > $W/knn.md
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
