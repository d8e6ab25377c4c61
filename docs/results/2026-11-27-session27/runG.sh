#!/bin/bash
# Session 27, run G (H200 host): clip-and-noise 1M x 768 through the user's call on rows in host memory
# (Engine::clip_and_noise, a fresh output each call; Engine::clip_and_noise_into, one output reused; the executor
# runs both on the CPU), main (m, 0b6495c) against g (9d17868: run F's f and the values checked by the backend,
# the CPU in the op's own pass), alternated; no peer (the GPU kernel's rows are printed as a check, not claimed);
# then g's GPU tests.
N=${RUN:-s27G}
B=$(mktemp -d); for v in s26m s27g; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
xz -dc .device-carry/gpu-test-s27g.xz > $B/gpu-test; chmod +x $B/gpu-test
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for v in s26m s27g s26m s27g; do [ $(( $(date +%s) - S0 )) -lt 120 ] || break
  T0=$(date +%s); timeout 110 $B/recall-$v bench noise --rows 1000000 --dim 768 --iters 20 --no-cpu --peer-script /none --out $W/noise-$v-$T0.md > /dev/null 2>&1; echo "$v: rc=$? $(( $(date +%s) - T0 ))s"; grep -h "host memory" $W/noise-$v-$T0.md | cut -d'|' -f2,3,4
done
# g's GPU tests (the facade on the GPU: clip_and_noise_into against the CPU bit for bit, through the default scan).
T0=$(date +%s); timeout 110 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result" $W/gpu-test.txt
echo "total $(( $(date +%s) - S0 )) s"
true
