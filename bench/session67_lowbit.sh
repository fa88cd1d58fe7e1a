#!/usr/bin/env bash
# Session 67 (issue 16): every weight type on the four Llama-70B layers at one and 16 tokens
# on the H100 (session 49 ran this sweep on an H200), the tuner's first three candidates,
# cuBLAS f16 in the same run; bf16 activations at one token on the two wide layers. Binary
# tilus-main in $BIN (default .dev/s67). Log and CSVs under $OUT. PART=1 runs one token, PART=2
# 16 tokens and bf16.
# Prepared in session 67; run in session 68 on an H100 (logs:
# docs/benchmarks-issue16-h100-s68-sweep.txt, both PARTs, and -m1.csv, -m16.csv, -m1-bf16.csv).
set -u
BIN=${BIN:-.dev/s67}
OUT=${OUT:-/tmp}
PART=${PART:?set PART=1 or PART=2}
log=$OUT/s67-lowbit-$PART.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  if [ "$PART" = 1 ]; then
    timeout 560 $BIN/tilus-main bench sweep --shapes llama70b --m 1 --tune 3 --csv $OUT/s67-m1.csv
  else
    timeout 330 $BIN/tilus-main bench sweep --shapes llama70b --m 16 --tune 3 --csv $OUT/s67-m16.csv
    timeout 220 $BIN/tilus-main bench sweep --shapes 57344x8192,8192x28672 --m 1 --adtype bf16 \
      --tune 3 --csv $OUT/s67-m1-bf16.csv
  fi
} > "$log" 2>&1
tail -40 "$log"
