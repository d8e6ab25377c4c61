#!/bin/bash
# Session 27, run E (CPU only, on a GPU host's 16 Xeon cores): clip-and-noise with the AVX-512 noise reading its
# tables by permutes (cpu bench "new" = 4225cac, after 2183515 and b4291a8) against main 0b6495c ("main"),
# and b4291a8 ("mid": its tables still gathered), alternated, two rounds: as called and into a reused buffer; the bench's copy beside them.
N=${RUN:-s27E}
B=$(mktemp -d); for v in main mid new; do xz -dc .device-carry/cpu-s27$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|Socket"; grep -o "avx512[a-z_0-9]*" /proc/cpuinfo | sort -u | tr "\n" " "; echo; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in main mid new; do T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_noise' --warm-up-time 1 --measurement-time 5 > $W/cpu-bench-$v-$rep.txt 2>&1; echo "cpu $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/cpu-bench-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 40 $B/cpu-bench-new --bench 'copy_512' --warm-up-time 1 --measurement-time 5 > $W/cpu-bench-copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/cpu-bench-copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
