#!/usr/bin/env bash
# Session 64 (issue 15): more warps a multiprocessor for the warpgroup gemv at 64 tokens
# (64-column blocks, four a multiprocessor at 101 registers) and other tiles at 64 and 128
# tokens, 57344 x 8192, against the tuner's pick in the same run. From the repository root on
# the device; binaries in $BIN (default .dev/s64).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-probe.txt
TILUS=${TILUS:-$BIN/tilus}
b=METHOD=gemv_wgmma,BK=64
{
  for w in i4 u2; do
    echo "== $w, 64 tokens"
    $TILUS bench qmatmul --wdtype $w --m 64 --verbose \
      --config $b,BM=64,BN=128,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $b,BM=64,BN=64,WARPS=4,STAGES=5,STAGE_TILES=1,BLOCKS_PER_SM=4,STREAM_K=528 \
      --config $b,BM=64,BN=64,WARPS=4,STAGES=4,STAGE_TILES=1,BLOCKS_PER_SM=4,STREAM_K=528 \
      --config $b,BM=64,BN=64,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $b,BM=64,BN=128,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
      2>&1 | grep "^  "
    echo "== $w, 128 tokens"
    $TILUS bench qmatmul --wdtype $w --m 128 --verbose \
      --config $b,BM=128,BN=128,WARPS=8,STAGES=5 \
      --config $b,BM=128,BN=128,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=1,STREAM_K=132 \
      --config $b,BM=128,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=3 \
      --config $b,BM=128,BN=128,WARPS=4,STAGES=4,BLOCKS_PER_SM=2 \
      --config $b,BM=128,BN=128,WARPS=8,STAGES=6 \
      2>&1 | grep "^  \|cuBLAS\|^$w"
  done
} > "$log" 2>&1
cat "$log"
