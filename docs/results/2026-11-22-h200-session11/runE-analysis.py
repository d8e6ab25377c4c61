#!/usr/bin/env python3
"""Session 11, run E: warp-stall samples and executed instructions of sm90a_knn_bf16_cosine per code region,
from ncu's per-SASS-instruction export (`ncu --import X --page source --csv --print-source sass`). The region
bounds are offsets read off this build's SASS (main loop: the 24-step loop ending at its back-edge; filter rounds:
the unrolled quick tests and calls of `decide`; the block-wide vote of `merge_round`; the merges; `decide`)."""
import csv, gzip, sys

REGIONS = [(0, 0x2B90, "setup, prologue"), (0x2B90, 0x3280, "main loop (24 steps a tile)"),
           (0x3280, 0x9B40, "after the loop (incl. the seed)"), (0x9B40, 0x14290, "filter rounds (quick test, calls)"),
           (0x14290, 0x14320, "merge_round's bar.red.or"), (0x14320, 0x17950, "merges"),
           (0x17950, 0x17990, "barrier after the merges"), (0x17990, 1 << 30, "decide and the rest")]

for f in sys.argv[1:]:
    rows = list(csv.reader(gzip.open(f, "rt") if f.endswith(".gz") else open(f)))
    hdr, data = rows[1], [r for r in rows[2:] if len(r) > 10]
    ia, iss, iex = (hdr.index(c) for c in ("Address", "Warp Stall Sampling (All Samples)", "Instructions Executed"))
    g = lambda r, i: float(r[i] or 0)
    base = int(data[0][ia], 16)
    tot, totex = sum(g(r, iss) for r in data), sum(g(r, iex) for r in data)
    print(f"== {f}: {tot:.0f} samples, {totex:.0f} warp instructions")
    for a, b, name in REGIONS:
        sel = [r for r in data if a <= int(r[ia], 16) - base < b]
        print(f"{name:36s} samples {100 * sum(g(r, iss) for r in sel) / tot:5.1f} %   "
              f"instructions {100 * sum(g(r, iex) for r in sel) / totex:5.1f} %")
