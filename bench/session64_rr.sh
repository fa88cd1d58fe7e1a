#!/usr/bin/env bash
# Session 64 (issue 15): the copy engine's loads issued by the warps in turn (`tilus-rr`)
# against one thread issuing all of them (`tilus-prmt`), alternated twice: the warpgroup
# gemv's tuned tiles at 16-128 tokens (57344 x 8192) and the dense GEMM at 8192^3; then the
# GPU tests of every kernel that uses `tma_load`, with compute-sanitizer on two of them. From
# the repository root on the device; binaries in $BIN (default .dev/s64).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-rr.txt
b=METHOD=gemv_wgmma,BK=64
{
  for round in 1 2; do
    for x in tilus-prmt tilus-rr; do
      echo "== round $round: $x"
      for w in u2 i4; do
        $BIN/$x bench qmatmul --wdtype $w --m 16 --verbose \
          --config $b,BM=16,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 2>&1 | grep "^  "
        $BIN/$x bench qmatmul --wdtype $w --m 32 --verbose \
          --config $b,BM=32,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
          --config $b,BM=32,BN=256,WARPS=8,STAGES=8 2>&1 | grep "^  "
        $BIN/$x bench qmatmul --wdtype $w --m 64 --verbose \
          --config $b,BM=64,BN=128,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 2>&1 | grep "^  "
        $BIN/$x bench qmatmul --wdtype $w --m 128 --verbose \
          --config $b,BM=128,BN=128,WARPS=8,STAGES=5 2>&1 | grep "^  "
      done
      $BIN/$x bench dense --shapes 8192x8192x8192 --runs 10 2>&1 | tail -3
    done
  done
  echo "== gpu_gemm"
  TILUS_REQUIRE_GPU=1 timeout 300 $BIN/gpu_gemm --test-threads=1 2>&1 | tail -14
  echo "== gpu_qmatmul (warpgroup gemvs)"
  TILUS_REQUIRE_GPU=1 timeout 300 $BIN/gpu_qmatmul --test-threads=1 wgmma igmma 2>&1 | tail -6
  echo "== gpu_apt (warpgroup MMA, bgmma)"
  TILUS_REQUIRE_GPU=1 timeout 200 $BIN/gpu_apt --test-threads=1 warpgroup bgmma 2>&1 | tail -5
  echo "== memcheck, gpu_gemm tma"
  compute-sanitizer --tool memcheck $BIN/gpu_gemm --test-threads=1 tma_gemm warp_specialized 2>&1 | tail -3
  echo "== racecheck, gpu_gemm tma"
  compute-sanitizer --tool racecheck $BIN/gpu_gemm --test-threads=1 tma_gemm 2>&1 | tail -3
} > "$log" 2>&1
cat "$log"
