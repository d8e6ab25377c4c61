#!/bin/bash
# Session 29, run G (H200 host): the session's tip 9679f0b. The facade's GPU tests (the quick diff-test among them:
# the GPU's spreading and clip-and-noise against this CPU code, bit for bit) and `recall demo`; then the CPU bench,
# tip (t) against main d055f23 (m), 'spread_1M_nodes_3_hops' and clip-and-noise (as called, into), alternated
# two rounds; the bench's read and copy beside them.
N=${RUN:-s29G}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-s29.xz > $B/gpu-test; xz -dc .device-carry/recall-s29.xz > $B/recall
for v in m t; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|panicked" $W/gpu-test.txt
T0=$(date +%s); timeout 60 $B/recall demo > $W/demo.txt 2>&1; echo "demo: rc=$? $(( $(date +%s) - T0 ))s"; tail -12 $W/demo.txt
for rep in 1 2; do for v in m t; do [ $(( $(date +%s) - S0 )) -lt 400 ] || break
  T0=$(date +%s); timeout 70 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops|clip_noise_n100000_d768/cpu/clip_and_noise(_into)?$' --warm-up-time 1 --measurement-time 3 > $W/b-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E '^(spread|clip)|time:' $W/b-$v-$rep.txt | grep -v '%' | sed 's/ \+/ /g' | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-t --bench 'cpu/memory' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
