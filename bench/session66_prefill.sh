#!/usr/bin/env bash
# Session 66 (issue 15): the fused prefill tile with a producer warpgroup (`WS=1`: the copy
# engine's ring filled by its own warps, the two consumer warpgroups only dequantize and
# multiply), and stream-k workers with two k tiles a stage, against the tuner's pick, 4096
# tokens on 57344 x 8192, alternated; then `gpu_vq` on main (the VQ gemv's grid now written
# from its tile parameters). Binaries in $BIN (default .dev/s66c): tilus-main (`cargo build
# --release`), gpu_vq (`cargo test --release --test gpu_vq --no-run`).
# Log: $OUT/s66-prefill-ws.txt. ROUNDS (default 2) and VQ_TIMEOUT (default 240 s) shorten it.
set -u
BIN=${BIN:-.dev/s66c}
OUT=${OUT:-/tmp}
log=$OUT/s66-prefill-ws.txt
b=METHOD=gemv_wgmma,BK=64,BM=256,BN=128,WARPS=8
{
  nvidia-smi --query-gpu=name --format=csv,noheader
  for round in $(seq 1 ${ROUNDS:-2}); do
    for w in i4 u2; do
      echo "== round $round, $w, 4096 tokens"
      timeout 60 $BIN/tilus-main bench qmatmul --wdtype $w --m 4096 --verbose \
        --config $b,STAGES=5 --config $b,STAGES=5,WS=1 --config $b,STAGES=6,WS=1 \
        --config $b,STAGES=3,STAGE_TILES=2,STREAM_K=8 2>&1 |
        grep "^  \|^$w "
    done
  done
  echo "== gpu_vq (main)"
  TILUS_REQUIRE_GPU=1 timeout ${VQ_TIMEOUT:-240} $BIN/gpu_vq --test-threads=1 2>&1 | grep "^test \|test result"
} > "$log" 2>&1
cat "$log"
