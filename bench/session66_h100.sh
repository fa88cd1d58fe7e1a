#!/usr/bin/env bash
# Session 66 (issue 15): the H100 points that sessions 19-47 measured only on H200s. Prefill
# (1024, 4096 and 8192 tokens; the fused kernel against cuBLAS f16) and bf16 activations at
# batched decode (32-128 tokens), tuned, cuBLAS in the same run. From the repository root on
# the device; `tilus` (main) in $BIN (default .dev/s66, as tilus-main).
set -u
BIN=${BIN:-.dev/s66}
OUT=${OUT:-/tmp}
log=$OUT/s66-h100.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== bf16 activations, 57344 x 8192, 32-128 tokens"
  timeout 200 $BIN/tilus-main bench sweep --adtype bf16 --wdtypes i4,u4,u2 --m 32,64,128 \
    --tune 6 --csv $OUT/s66-bf16.csv
  echo "== prefill, 57344 x 8192 and 8192 x 28672, 1024-8192 tokens"
  timeout 330 $BIN/tilus-main bench sweep --shapes 57344x8192,8192x28672 --wdtypes i4,u2 \
    --m 1024,4096,8192 --tune 4 --verbose --csv $OUT/s66-prefill.csv
} > "$log" 2>&1
tail -40 "$log"
