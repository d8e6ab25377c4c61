import csv, gzip, sys
rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
hdr = rows[1]; data = [r for r in rows[2:] if len(r) > 10]
ia, isrc, iss, iex = (hdr.index(c) for c in ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"))
g = lambda r, i: float(r[i] or 0)
base = int(data[0][ia], 16)
tot = sum(g(r, iss) for r in data); totex = sum(g(r, iex) for r in data)
print(f"{tot:.0f} samples, {totex:.0f} warp instr, {len(data)} sass lines")
# print every instruction with samples or executed, condensed
cum = 0
for r in data:
    s = g(r, iss); e = g(r, iex); cum += s
    if s >= float(sys.argv[2]) if len(sys.argv) > 2 else s > 0:
        print(f"{int(r[ia],16)-base:6x} {s:6.0f} {100*cum/tot:5.1f}% ex={e:6.0f}  {r[isrc].strip()[:90]}")
