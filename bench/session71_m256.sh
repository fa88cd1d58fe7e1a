#!/usr/bin/env bash
# Prepared in session 70 for the next session's H100 (issue 15; not yet run). Perf note 94 found
# the 256-token time on a full wave following the dequantize's instructions a weight: one
# warpgroup a multiprocessor both converts the weight and issues the wgmmas. This probe gives
# each multiprocessor two or four warpgroups from blocks of fewer tokens, so one block's
# converts can run under another's MMAs, at the cost of converting each weight tile once for
# every block of tokens (2x with 128 tokens a block, 4x with 64). Registers (ptxas, sm_90a, u4):
# 128 x 64 tiles 122, 256 x 64 188. Against each layer's session-70 pick, cuBLAS f16 in the
# same run, i4, u4, u8 and f6e3m2 (the cheapest integer convert, a zero point, a byte, and a
# 6-bit float; perf note 94: 4.98, 5.64, 5.47 and 6.58 instructions a weight).
#   8192 x 8192    256 x 64 whole (128 blocks, the pick), 128 x 64 whole two a multiprocessor
#                  (256 blocks on 264 slots), 64 x 64 whole four a multiprocessor (512 on 528)
#   10240 x 8192   256 x 128 on 132 stream-k workers (the pick), 128 x 64 on 264 workers two a
#                  multiprocessor, 128 x 128 on 264 workers two a multiprocessor
# Binary `tilus` in $BIN (default .dev/s71). Log $OUT/s71-m256.txt; about 60 s.
set -u
BIN=${BIN:-.dev/s71}
OUT=${OUT:-/tmp}
W=METHOD=gemv_wgmma,BK=64
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  for t in i4 u4 u8 f6e3m2; do
    timeout 60 $BIN/tilus bench qmatmul --wdtype $t --m 256 --n 8192 --k 8192 --verbose \
      --config $W,BM=256,BN=64,WARPS=4,STAGES=5 \
      --config $W,BM=128,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=2 \
      --config $W,BM=128,BN=64,WARPS=4,STAGES=5,BLOCKS_PER_SM=2 \
      --config $W,BM=64,BN=64,WARPS=4,STAGES=4,BLOCKS_PER_SM=4
    timeout 60 $BIN/tilus bench qmatmul --wdtype $t --m 256 --n 10240 --k 8192 --verbose \
      --config $W,BM=256,BN=128,WARPS=8,STAGES=5,STREAM_K=132 \
      --config $W,BM=128,BN=64,WARPS=4,STAGES=4,STREAM_K=264,BLOCKS_PER_SM=2 \
      --config $W,BM=128,BN=128,WARPS=8,STAGES=4,STREAM_K=264,BLOCKS_PER_SM=2
  done
} > "$OUT/s71-m256.txt" 2>&1
grep -v "^  " "$OUT/s71-m256.txt" | tail -30
