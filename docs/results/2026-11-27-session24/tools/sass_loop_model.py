#!/usr/bin/env python3
"""Session 24's control-code model of one SASS loop (a diagnostic, not a benchmark).

Usage:
  nvdisasm -c -hex crates/gpu-kernels/bundle/sm_90a.cubin | awk '/^\\.text\\.KERNEL:/{f=1;next} f&&/^\\.text\\./{exit} f' > k.sass
  python3 sass_loop_model.py k.sass .L_x_NNNN [shared-load latency, default 33] [forward labels taken, comma-separated] [-v]

The loop runs from label .L_x_NNNN to the branch back to it. Each instruction's second encoding word carries its
control code (sm_70 and newer): stall cycles (bits 41-44), write / read scoreboards (46-48, 49-51) and the
scoreboards it waits for (52-57). The model issues one instruction per max(stall, 1) cycles, lets a variable-
latency instruction (LDS: the given latency; SYNCS 20; LDC/S2R 25; others 10) set its write scoreboard, waits where
the wait mask asks, and reports cycles per iteration in steady state. It ignores bank conflicts, branch and
convergence costs beyond the stall counts, and other warps: session 24 measured ~1.35x its figure for
`sm90a_knn1s_cosine` before the change (run A's block 0 span against the loop's share).
"""
import re
import sys

path, label = sys.argv[1], sys.argv[2]
lds_latency = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] != "-v" else 33
taken = set(sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[4] != "-v" else set()
verbose = "-v" in sys.argv

rows, labels, cur, inside = [], {}, None, False
for line in open(path).read().split("\n"):
    s = line.strip()
    m = re.match(r"^(\.L_x_\d+):", s)
    if m and inside:
        labels[m.group(1)] = len(rows)
    if s.startswith(label + ":"):
        inside, labels[label] = True, 0
        continue
    if not inside:
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);\s*/\* (0x[0-9a-f]+) \*/", line)
    if m:
        cur = [m.group(2), int(m.group(3), 16)]
        continue
    m = re.match(r"\s*/\* (0x[0-9a-f]+) \*/", line)
    if m and cur:
        cur.append(int(m.group(1), 16))
        rows.append(cur)
        if "BRA" in cur[0] and label in cur[0]:
            break
        cur = None


def latency(text):
    if "LDS" in text:
        return lds_latency
    if "SYNCS" in text:
        return 20
    if "LDC" in text or "S2R" in text:
        return 25
    return 10


if verbose:
    for text, _, hi in rows:
        print(f"{(hi >> 41) & 0xF:2d} wait{(hi >> 52) & 0x3F:06b}  {text}")
sb, cycle, starts = [0] * 6, 0, []
for _ in range(6):
    starts.append(cycle)
    i = 0
    while i < len(rows):
        text, _, hi = rows[i]
        stall, wb, rb, wait = (hi >> 41) & 0xF, (hi >> 46) & 7, (hi >> 49) & 7, (hi >> 52) & 0x3F
        for b in range(6):
            if wait >> b & 1:
                cycle = max(cycle, sb[b])
        if wb != 7:
            sb[wb] = cycle + latency(text)
        if rb != 7:
            sb[rb] = max(sb[rb], cycle + 4)
        cycle += max(stall, 1)
        m = re.search(r"BRA.*`\((\.L_x_\d+)\)", text)
        if m and m.group(1) in taken and labels.get(m.group(1), -1) > i:
            i = labels[m.group(1)]
            continue
        i += 1
print("instructions", len(rows), "stall sum", sum((hi >> 41) & 0xF for _, _, hi in rows),
      "cycles per iteration", [starts[k + 1] - starts[k] for k in range(5)])
