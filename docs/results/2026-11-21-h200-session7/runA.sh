#!/bin/bash
# Session 7, run A (1 x H200): spreading off the backend's lock (a stream and buffers per call, up to 4 per
# graph). diff-test sm_90 quick (new concurrent-calls case), then the mixed load and spreading alone with the new
# binary (lead, see info) and the previous one (8696efe) in the same run.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d)
for b in recall recall-old; do gunzip -c .device-carry/gz/$b.gz > $B/$b; chmod +x $B/$b; done
R=$B/recall; O=$B/recall-old
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/s7A.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
tail -3 $W/difftest-sm90-quick.txt
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16"
for v in new old; do
  X=$R; [ $v = old ] && X=$O
  t timeout 150 $X load $L --threads-per-tenant 32 --verify 128 --duration 60 --out $W/load-$v.md > $W/load-$v.log 2>&1
  grep -h "calls/s\|PASSED\|FAILED" $W/load-$v.md | head -3
  t timeout 80 $X load $L --threads-per-tenant 8 --verify 16 --duration 15 --mix 0,0,0,100 --out $W/spread-$v.md > $W/spread-$v.log 2>&1
  grep -h "| spread" $W/spread-$v.md | head -2
done
true
