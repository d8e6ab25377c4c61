#!/bin/bash
# Run T (1 x H200): spreading with the SIMD seed scan; clip_and_noise break-even cliff (glibc mmap/THP tunables);
# diff-tests sm_90/sm_80, memcheck, racecheck over spreading. Binary: lead (commit in md).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runT.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; cat /sys/kernel/mm/transparent_hugepage/enabled; ldd --version | head -1; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
t timeout 120 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu"
t timeout 60 $R bench spread $A --peer-script $P --out $W/spread.md > $W/spread.log 2>&1
t timeout 60 $R bench spread $A --peer-script $P --out $W/spread-2.md > $W/spread-2.log 2>&1
t timeout 100 $R bench break-even --ops clip_and_noise --out $W/be-noise.md > $W/be-noise.log 2>&1
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295 t timeout 100 $R bench break-even --ops clip_and_noise --out $W/be-noise-nommap.md > $W/be-noise-nommap.log 2>&1
t timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck.txt 2>&1
t timeout 120 compute-sanitizer --tool racecheck $R bench spread --nodes 20000 --edges 300000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 1 --no-cpu --peer-script none > $W/racecheck-spread.txt 2>&1
t timeout 120 compute-sanitizer --tool synccheck $R bench spread --nodes 20000 --edges 300000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 1 --no-cpu --peer-script none > $W/synccheck-spread.txt 2>&1
