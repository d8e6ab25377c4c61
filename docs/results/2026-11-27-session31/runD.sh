#!/bin/bash
# Session 31, run D (H200 host CPU only): in one run, main's CPU bench (806cc0b: copy and read bandwidth, clip-and-noise
# into a reused buffer, spreading with every hop pulled and as it runs) and the two diagnostics of run B (the noise
# alone; 16-wide random gathers from a 4 MiB array), twice, alternated.
N=${RUN:-s31D}
B=$(mktemp -d); for v in cpu-m diag; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nproc; lscpu | grep -E "Model name|Model:|MHz"; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do
  timeout 200 $B/cpu-m --bench "memory|clip_noise_n100000_d768/cpu/clip_and_noise_into$|spread_1M" --warm-up-time 1 --measurement-time 5 > $W/cpu-$rep.txt 2>&1
  echo "cpu $rep: $(grep -A2 -E '^(cpu/memory|clip_noise|spread_1M)' $W/cpu-$rep.txt | grep -E '^[a-z]|time:|thrpt:' | sed 's/ \+/ /g' | tr '\n' ' ')"
  timeout 120 $B/diag --ignored --nocapture --test-threads 1 diag_tmp > $W/diag-$rep.txt 2>&1; echo "diag $rep: $(grep 'threads 16' $W/diag-$rep.txt | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - S0 )) s"
true
