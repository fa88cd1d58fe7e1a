#!/usr/bin/env bash
# Session 66 (issue 15): 128 tokens on 57344 x 8192, where 4-bit weights sit at 1.60-1.67x
# cuBLAS f16 against the 1.7x target. The tuner's whole 128 x 128 tiles (122 registers and a
# 101 KB ring, so two blocks fit a multiprocessor) against stream-k workers two a multiprocessor
# (the tuner plans one), and 64-column one-warpgroup blocks three a multiprocessor, whole or on
# stream-k. Binary: tilus-main in $BIN (default .dev/s66c). Log: $OUT/s66-m128.txt.
# Not run in sessions 66 and 67 (no device time left; no machine could be started); run in
# session 68 on an H100 by bench/session67_m128_dense.sh
# (log: docs/benchmarks-issue15-h100-s68-m128.txt).
set -u
BIN=${BIN:-.dev/s66c}
OUT=${OUT:-/tmp}
log=$OUT/s66-m128.txt
b=METHOD=gemv_wgmma,BK=64,BM=128
{
  nvidia-smi --query-gpu=name --format=csv,noheader
  for w in i4 u4 f4e2m1 i4; do
    echo "== $w, 128 tokens"
    timeout 60 $BIN/tilus-main bench qmatmul --wdtype $w --m 128 --verbose \
      --config $b,BN=128,WARPS=8,STAGES=5 \
      --config $b,BN=128,WARPS=8,STAGES=5,BLOCKS_PER_SM=2,STREAM_K=264 \
      --config $b,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=3 \
      --config $b,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=3,STREAM_K=396 2>&1 | grep "^  \|^$w "
  done
} > "$log" 2>&1
cat "$log"
