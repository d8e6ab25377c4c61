#!/bin/bash
# Session 31, run A (H200): t = s31 tip (1084f74: the server's one counting rule, word 2 for the device's merge only, the
# poll delay's division in 32 bits); m = main (806cc0b). The facade's GPU tests, the whole quick diff-test and the knn1
# group on t; recall demo; one query x 1,000 / 10,000 rows served, t and m alternated, three rounds, and one with the
# device's merge; then the CPU's clip-and-noise into a reused buffer, main's bench (cm) against the candidate (cn: norms
# per group of 16 rows, the next group prefetched, each batch's lines written as made), alternated, with the copy.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s31A}
B=$(mktemp -d); for v in recall-m recall-t gpu-test-t cpu-m cpu-n; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|MHz"; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-t
T0=$(date +%s); timeout 150 $B/gpu-test-t --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "test result|panicked" $W/gpu-test.txt
T0=$(date +%s); timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "t quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 30 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-t.txt 2>&1; echo "t knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
timeout 60 $R demo > $W/demo-t.txt 2>&1; echo "demo: rc=$? $(grep -ci 'bit-identical' $W/demo-t.txt) bit-identical lines"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2 3; do for rows in 1000 10000; do for v in t m; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
for rows in 1000 10000; do for v in t m; do
  f=$W/q1-r$rows-$v-devmerge.md
  timeout 30 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=device $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "devmerge x$rows $v"
done; done
echo "gpu part $(( $(date +%s) - S0 )) s"
for rep in 1 2 3; do for v in m n; do
  timeout 60 $B/cpu-$v --bench "memory/copy|clip_noise_n100000_d768/cpu/clip_and_noise_into$" --warm-up-time 1 --measurement-time 5 > $W/cpu-$v-$rep.txt 2>&1
  echo "cpu $rep c$v: $(grep -A1 -E '^(cpu/memory/copy|clip_noise)' $W/cpu-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
