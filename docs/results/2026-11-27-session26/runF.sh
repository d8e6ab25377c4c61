#!/bin/bash
# Session 26, run F (H200): the CPU's AVX-512 noise loop reading its two tables by permutes instead of gathers
# (cpu bench h2) against 8f8a1bb's (g), alternated, on the host's 16 Xeon cores; and the GPU side of the split of the
# noise math into index and finish steps (binary s26h: the noise kernels' code changed): the noise group in full, the
# whole quick diff-test, racecheck over the noise group, clip-and-noise 1M x 768 beside f (331e7c2) and torch.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26F}
B=$(mktemp -d); for v in s26f s26h; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
for v in g h; do xz -dc .device-carry/cpu-bench-s26$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|Flags" | sed 's/\(Flags:.\{0,40\}\).*\(avx512f\).*/\1 ... \2 .../'; python3 -c "import torch; print('torch', torch.__version__)" 2>&1 | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in g h; do T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_noise' --warm-up-time 1 --measurement-time 5 > $W/cpu-bench-$v-$rep.txt 2>&1; echo "cpu $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/cpu-bench-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 40 $B/cpu-bench-h --bench 'copy_512' --warm-up-time 1 --measurement-time 5 > $W/cpu-bench-copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/cpu-bench-copy.txt | head -1)"
R=$B/recall-s26h
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --group noise > $W/diff-noise-h.txt 2>&1; echo "h noise full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-noise-h.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-quick-h.txt 2>&1; echo "h quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-h.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 100 $R diff-test --arch all --quick --group noise > $W/diff-noise-all-h.txt 2>&1; echo "h noise all arches: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-noise-all-h.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 80 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group noise > $W/racecheck-noise-h.txt 2>&1; echo "racecheck noise: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY' $W/racecheck-noise-h.txt | tail -1)"
for rep in 1 2; do for v in s26f s26h; do left 480 || break; P=/none; [ $rep = 1 ] && [ $v = s26h ] && P=benches/peers/peers.py
  timeout 60 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script $P --out $W/noise-$v-$rep.md > $W/noise-$v-$rep.log 2>&1; echo "noise $v $rep: $(grep -h 'one pass\|device copy\|torch' $W/noise-$v-$rep.md | cut -d'|' -f3,4,5 | tr '\n' ' ')"; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
