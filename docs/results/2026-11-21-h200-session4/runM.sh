#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for f in recall; do gunzip -c .device-carry/gz/$f.gz > $B/$f; chmod +x $B/$f; done
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runM.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
timeout 210 $R faults vram-pressure --seconds 18 --out $W/faults-vram-pressure.md > $W/faults-vram-pressure.log 2>&1; echo "rc=$?" >> $W/faults-vram-pressure.log
pkill -f "recall hog" || true
MALLOC_MMAP_THRESHOLD_=1048576 timeout 110 $R load --rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 8 --duration 60 --verify 128 --coalesce --batch-across-tenants --max-batch 128 --out $W/load.md > $W/load.log 2>&1; echo "rc=$?" >> $W/load.log
timeout 150 $R bench break-even --reps 3 --ops cosine_scores,similarity,knn,knn_resident,score_candidates --out $W/break-even-1.md > $W/break-even-1.log 2>&1; echo "rc=$?" >> $W/break-even-1.log
