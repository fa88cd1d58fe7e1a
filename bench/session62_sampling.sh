#!/usr/bin/env bash
# Issue 16 (session 62): where the tuned one-token integer-mma gemv's warps wait. ncu's warp
# state sampling per SASS instruction (u2 57344 x 8192, bn896 w8 s4 sk2), summed by opcode
# and listed for the hottest instructions.
#   B=.dev/s62 bash bench/session62_sampling.sh     (on the GPU machine; `tilus` in $B)
set -u
B=${B:-.dev/s62}
O=${OUT:-/tmp}
T=$B/tilus
ncu --kernel-name regex:imma --launch-skip 3 --launch-count 1 --section SourceCounters \
  --section WarpStateStats -f -o /tmp/s62 $T bench qmatmul --wdtype u2 --m 1 --n 57344 --k 8192 \
  --config METHOD=gemv_imma,BM=1,BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 > /dev/null 2>&1
ncu -i /tmp/s62.ncu-rep --page source --csv --print-source sass > /tmp/s62-sass.csv 2>&1
python3 - /tmp/s62-sass.csv <<'PY' 2>&1 | tee $O/sampling.txt
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if any('Source' == c for c in r))
cols = rows[head]
print("columns:", [c for c in cols if 'Sampl' in c or c in ('Source', 'Address')])
src = cols.index('Source')
samp = [i for i, c in enumerate(cols) if c.startswith('Warp Stall Sampling (All')][0]
nsamp = [i for i, c in enumerate(cols) if c.startswith('Warp Stall Sampling (Not')]
tot = collections.Counter(); n = 0; lines = []
for r in rows[head + 1:]:
    if len(r) <= samp: continue
    try: v = float(r[samp] or 0)
    except ValueError: continue
    text = r[src].strip()
    op = text.split()[1] if text.startswith('@') else (text.split() or ['?'])[0]
    tot[op.split('.')[0]] += v; n += v; lines.append((v, text))
print("total samples", n)
for op, v in tot.most_common(20): print(f"{op:10s} {v:8.0f} {100*v/n:5.1f}%")
print("hottest instructions:")
for v, t in sorted(lines, reverse=True)[:25]: print(f"{v:7.0f} {100*v/n:5.1f}%  {t[:110]}")
PY
