#!/bin/bash
# Run U (1 x H200): spreading from a seed list (branch seeds): diff-tests, bench spread x2, sanitizers; glibc's THP
# for malloc (GLIBC_TUNABLES=glibc.malloc.hugetlb=1) on clip_and_noise's break-even and on spreading; ncu full sets of
# the dense hop and of cuSPARSE's csrmv for the next session. Binary: lead e9bb021.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runU.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
t timeout 120 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu"
t timeout 60 $R bench spread $A --peer-script $P --out $W/spread.md > $W/spread.log 2>&1
t timeout 60 $R bench spread $A --peer-script $P --out $W/spread-2.md > $W/spread-2.log 2>&1
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 t timeout 60 $R bench spread $A --peer-script $P --out $W/spread-thp.md > $W/spread-thp.log 2>&1
t timeout 100 $R bench break-even --ops clip_and_noise --out $W/be-noise.md > $W/be-noise.log 2>&1
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 t timeout 100 $R bench break-even --ops clip_and_noise --out $W/be-noise-thp.md > $W/be-noise-thp.log 2>&1
t timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck.txt 2>&1
t timeout 120 compute-sanitizer --tool racecheck $R bench spread --nodes 20000 --edges 300000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 1 --no-cpu --peer-script none > $W/racecheck-spread.txt 2>&1
t timeout 120 ncu --set full -k regex:"spread_hop" --launch-skip 3 --launch-count 1 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --no-cpu --iters 1 --peer-script none --graph-dir /tmp/g4 > $W/ncu-full-hop.txt 2>&1
t timeout 120 ncu --set full -k regex:"csrmv" --launch-count 1 python3 $P spread --graph-dir /tmp/recall-bench-graph --hops 3 --iters 1 > $W/ncu-full-cusparse.txt 2>&1
