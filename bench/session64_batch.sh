#!/usr/bin/env bash
# Session 64 (issue 15): where the quantized matmul stands on the H100 at batched decode
# (16 to 256 tokens), 4-bit weights and lower, tuned, cuBLAS f16 in the same run. Issue 15's
# targets are H100 ratios; sessions 40-47 measured these points on H200s, whose memory is
# faster while the tensor cores are the same. From the repository root on the device;
# binaries in $BIN (default .dev/s64).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-batch.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== 57344 x 8192, 16-256 tokens"
  timeout 420 $BIN/tilus bench sweep --wdtypes u1,u2,i2,u3,i4,u4,f4e2m1 --m 16,32,64,128,256 \
    --tune ${TUNE:-6} --verbose --csv $OUT/s64-batch.csv
  echo "== 64 tokens, 57344 x 8192: ring depth against blocks a multiprocessor (one warpgroup, 128 columns)"
  base=METHOD=gemv_wgmma,BM=64,BN=128,BK=64,WARPS=4
  for w in i4 u2; do
    $BIN/tilus bench qmatmul --wdtype $w --m 64 --verbose \
      --config $base,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $base,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
      --config $base,STAGES=6,STAGE_TILES=2,BLOCKS_PER_SM=1,STREAM_K=132 \
      --config $base,STAGES=6,STAGE_TILES=1,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $base,STAGES=8,STAGE_TILES=1,BLOCKS_PER_SM=2,STREAM_K=264 \
      --config $base,STAGES=12,STAGE_TILES=1,BLOCKS_PER_SM=1,STREAM_K=132 2>&1 | tail -12
  done
} > "$log" 2>&1
tail -45 "$log"
