#!/bin/bash
# Session 9, run H (1 x H200, binary 2a49192 = recall-g): where a single small query's time goes, for the next
# step on issue 4's 15 us target: the driver calls' own durations (nsys, CUDA API trace) and the knn1 kernel's
# profile (ncu) at 1 x 1,000 x 768; and gpu-sys's mapped-memory test (58ed675) on a GPU.
export PATH=$PATH:/usr/local/cuda/bin:$(ls -d /usr/local/cuda/nsight-systems*/bin /opt/nvidia/nsight-systems/*/bin 2>/dev/null | tr '\n' ':')
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-g.gz > $B/recall; gunzip -c .device-carry/gz/mapped-test.gz > $B/mapped-test; chmod +x $B/*
R=$B/recall
W=$(mktemp -d)
trap 'cd $W && tar -czf $OUT/s9H.tgz .' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; which nsys ncu; nsys --version; ncu --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $B/mapped-test --nocapture > $W/gpu-sys-mapped-test.txt 2>&1; tail -n 3 $W/gpu-sys-mapped-test.txt
Q="bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script none"
if command -v nsys >/dev/null; then
  t timeout 150 nsys profile --trace=cuda --sample=none --cpuctxsw=none -o $W/knn-n1000 --force-overwrite true $R $Q > $W/nsys-run.txt 2>&1
  t timeout 120 nsys stats --report cuda_api_sum,cuda_gpu_kern_sum --format csv -o $W/knn-n1000 $W/knn-n1000.nsys-rep > $W/nsys-stats.txt 2>&1
  rm -f $W/*.sqlite
  head -n 30 $W/knn-n1000_cuda_api_sum.csv 2>/dev/null | cut -c1-200
fi
t timeout 180 ncu --set full -k regex:knn1 -c 3 $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script none > $W/ncu-knn1-n1000.txt 2>&1
grep -E "Duration|SM Active Cycles|Elapsed Cycles|Registers Per|Achieved Occupancy|Dynamic Shared" $W/ncu-knn1-n1000.txt | head -14
true
