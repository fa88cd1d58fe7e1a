#!/usr/bin/env bash
# Session 64, the last device run (little device time left, so in order of need): the GPU
# checks of the VQ gemv's one-PRMT look-ups; the copy engine's loads issued by the warps in
# turn (`tilus-rr`, branch tma-issuer-rr) against one thread issuing all (`tilus-prmt`) on the
# warpgroup gemv, alternated; the GPU tests of the kernels that use `tma_load`. The log is written as it goes.
# From the repository root on the device; binaries in $BIN (default .dev/s64), stripped:
# `tilus-prmt` and `gpu_vq` built from main at 3439365, `tilus-rr`, `gpu_gemm` and
# `gpu_qmatmul` from branch tma-issuer-rr (`cargo build --release --bin tilus`, `cargo test
# --release --test NAME --no-run`, then target/release/deps/NAME-<hash>).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-last.txt
b=METHOD=gemv_wgmma,BK=64
{
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "== gpu_vq"
  TILUS_REQUIRE_GPU=1 timeout 120 $BIN/gpu_vq --test-threads=1 gemv_matches paired 2>&1 | tail -4
  bench() {
    echo "== round $1: $2"
    timeout 30 $BIN/$2 bench qmatmul --wdtype u2 --m 32 --verbose \
      --config $b,BM=32,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
      2>&1 | grep "^  "
    timeout 30 $BIN/$2 bench qmatmul --wdtype i4 --m 64 --verbose \
      --config $b,BM=64,BN=128,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      2>&1 | grep "^  "
  }
  bench 1 tilus-prmt
  bench 1 tilus-rr
  echo "== gpu_gemm (tma, persistent, warp-specialized)"
  TILUS_REQUIRE_GPU=1 timeout 90 $BIN/gpu_gemm --test-threads=1 tma persistent warp_specialized 2>&1 | tail -6
  echo "== gpu_qmatmul (warpgroup gemvs)"
  TILUS_REQUIRE_GPU=1 timeout 120 $BIN/gpu_qmatmul --test-threads=1 gemv_wgmma 2>&1 | tail -5
  bench 2 tilus-rr
  bench 2 tilus-prmt
  for x in tilus-prmt tilus-rr; do
    echo "== dense 8192^3: $x"
    timeout 60 $BIN/$x bench dense --shapes 8192x8192x8192 --runs 5 --no-cublas 2>&1 | tail -2
  done
} > "$log" 2>&1
cat "$log"
