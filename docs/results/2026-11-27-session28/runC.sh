#!/bin/bash
# Session 28, run C (CPU only, the H200 host's 16 Xeon cores): what bounds clip-and-noise into a reused buffer
# (criterion cpu bench, 100,000 x 768). One throwaway binary x (s28's code, f20b334 + e2d750d, with two environment
# switches): X_NONOISE (the batch's noise not made: the op's memory traffic, norms and output pass alone) and X_NT2
# (each row's noise made first, then the row written with non-temporal stores, 64-byte aligned, plain stores at
# the row's two partial lines). At 16, 8 and 4 rayon threads; the bench's copy and read beside them.
N=${RUN:-s28C}
B=$(mktemp -d); xz -dc .device-carry/cpu-s28x.xz > $B/x; chmod +x $B/x
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
run() { # name threads env...
  local name=$1 th=$2; shift 2
  T0=$(date +%s); env RAYON_NUM_THREADS=$th "$@" timeout 40 $B/x --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/$name-t$th.txt 2>&1
  echo "$name t$th: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/$name-t$th.txt | head -1 | sed 's/ *time: *//')"
}
for rep in 1 2; do
  run plain-$rep 16; run nt2-$rep 16 X_NT2=1; run nonoise-$rep 16 X_NONOISE=1; run nonoise-nt2-$rep 16 X_NONOISE=1 X_NT2=1
done
run plain 8; run nonoise 8 X_NONOISE=1; run nonoise-nt2 8 X_NONOISE=1 X_NT2=1; run plain 4
timeout 60 $B/x --bench 'cpu/memory' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
