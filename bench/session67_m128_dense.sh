#!/usr/bin/env bash
# Session 67 (issue 15): the dense f16 GEMM on the H100 against cuBLAS in turns (the H100 last
# ran `bench dense` in session 11, before the persistent and warp-specialized pipelines), then
# session 66's 128-token probe as it is (`bench/session66_m128.sh`). Binaries in $BIN (default
# .dev/s67): tilus-main. Logs: $OUT/s67-dense.txt and $OUT/s66-m128.txt.
# Prepared in session 67; run in session 68 on an H100 (logs:
# docs/benchmarks-issue15-h100-s68-dense.txt and docs/benchmarks-issue15-h100-s68-m128.txt).
set -u
BIN=${BIN:-.dev/s67}
OUT=${OUT:-/tmp}
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== dense f16, cuBLAS in turns"
  timeout 300 $BIN/tilus-main bench dense --runs 5 --rounds 3
} > "$OUT/s67-dense.txt" 2>&1
cat "$OUT/s67-dense.txt"
BIN=$BIN OUT=$OUT bash "$(dirname "$0")/session66_m128.sh"
