#!/usr/bin/env bash
# Session 67 (issue 15): the dense f16 GEMM on the H100 against cuBLAS in turns (the H100 last
# ran `bench dense` in session 11, before the persistent and warp-specialized pipelines), then
# session 66's 128-token probe, i4 and u4 only. Binaries in $BIN (default .dev/s67): tilus-main.
# Log: $OUT/s67-dense-m128.txt.
# Prepared in session 67 and not run: no H100 (nor H200) could be started that session.
set -u
BIN=${BIN:-.dev/s67}
OUT=${OUT:-/tmp}
log=$OUT/s67-dense-m128.txt
b=METHOD=gemv_wgmma,BK=64,BM=128
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== dense f16, cuBLAS in turns"
  timeout 300 $BIN/tilus-main bench dense --runs 5 --rounds 3
  for w in i4 u4; do
    echo "== $w, 128 tokens"
    timeout 60 $BIN/tilus-main bench qmatmul --wdtype $w --m 128 --verbose \
      --config $b,BN=128,WARPS=8,STAGES=5 \
      --config $b,BN=128,WARPS=8,STAGES=5,BLOCKS_PER_SM=2,STREAM_K=264 \
      --config $b,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=3 \
      --config $b,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=3,STREAM_K=396 2>&1 | grep "^  \|^$w "
  done
} > "$log" 2>&1
cat "$log"
