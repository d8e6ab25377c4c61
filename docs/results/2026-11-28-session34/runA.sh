#!/bin/bash
# Session 34, run A (one H200 host): t = s34 (df10f39: queries transposed once per call, two query groups per corpus
# tile, the scatter's bounds checks, k-means' argmin in lanes) against m = main (5694231). The quick diff-test at t
# (the GPU against the new CPU kernels, bit for bit); then the CPU bench, m and t alternated, two rounds (copy and
# read bandwidth, cosine top-10 with 1 and 64 queries next to simsimd, a k-means iteration next to simsimd's
# assignment loop), each round followed by FAISS on the CPU (faiss-cpu 1.15.1, its wheel carried unpacked as a .tar.xz) on the same shapes.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s34A}
mkdir -p /tmp/site && tar -xJf .device-carry/faiss.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site
B=$(mktemp -d); for v in recall-t cpu-m cpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core|MHz|L1d|L2|L3"; uptime; python3 -c 'import faiss, numpy; print("faiss", faiss.__version__, "numpy", numpy.__version__)'; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 110 $B/recall-t diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
F='memory|cosine_top10_n100000_d768/(cpu/knn|peer-simsimd)/|kmeans_n100000_d128_k1024/'
for rep in 1 2; do
  for v in m t; do
    timeout 120 $B/cpu-$v --bench "$F" --warm-up-time 1 --measurement-time 3 > $W/cpu-$v-$rep.txt 2>&1
    echo "cpu $v $rep: rc=$?"; grep -A2 -E '^(cpu/memory|cosine|kmeans)' $W/cpu-$v-$rep.txt | grep -E '^[a-z]|time:' | sed 's/ \+/ /g' | paste - - | cut -c1-130
  done
  timeout 90 python3 benches/peers/faiss_cpu.py --iters 10 > $W/faiss-$rep.json 2> $W/faiss-$rep.err; echo "faiss $rep: rc=$? $(cat $W/faiss-$rep.json)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
