#!/usr/bin/env bash
# Session 66 (issue 15, perf notes 87-88): session 65's two unmeasured branches
# against main, alternated, at the tuner's 16-, 32- and 64-token tiles on 57344 x 8192, then
# their GPU checks. Checks first where the device time may run out: run it with ORDER=checks.
# Binaries in $BIN (default .dev/s66), stripped, built with `cargo build --release --bin tilus`
# and `cargo test --release --test NAME --no-run` (target/release/deps/NAME-<hash>):
#   tilus-main        main
#   tilus-freed       branch ring-freed (ring stages freed on mbarriers, no block barrier)
#   tilus-interleave  branch wgmma-interleave (a narrow wgmma's k steps outside its blocks)
#   gpu_qmatmul-freed, gpu_qmatmul-interleave, gpu_gemm-interleave, gpu_apt-interleave
# Log: $OUT/s66-ab.txt.
set -u
BIN=${BIN:-.dev/s66}
OUT=${OUT:-/tmp}
log=$OUT/s66-ab.txt
b=METHOD=gemv_wgmma,BK=64
checks() {
  echo "== gpu_qmatmul, ring-freed (warpgroup gemvs), then racecheck"
  TILUS_REQUIRE_GPU=1 timeout 200 $BIN/gpu_qmatmul-freed --test-threads=1 gemv_wgmma 2>&1 | grep "^test \|test result"
  TILUS_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
    $BIN/gpu_qmatmul-freed --test-threads=1 gemv_wgmma_matches 2>&1 | tail -3
  echo "== wgmma-interleave: gpu_qmatmul (warpgroup gemvs), gpu_gemm, gpu_apt"
  TILUS_REQUIRE_GPU=1 timeout 200 $BIN/gpu_qmatmul-interleave --test-threads=1 gemv_wgmma 2>&1 | grep "^test \|test result"
  TILUS_REQUIRE_GPU=1 timeout 120 $BIN/gpu_gemm-interleave --test-threads=1 2>&1 | grep "test result"
  TILUS_REQUIRE_GPU=1 timeout 120 $BIN/gpu_apt-interleave --test-threads=1 2>&1 | grep "test result"
}
ab() {
  for round in 1 2; do
    for x in tilus-main tilus-freed tilus-interleave; do
      echo "== round $round: $x"
      timeout 30 $BIN/$x bench qmatmul --wdtype u2 --m 16 --verbose \
        --config $b,BM=16,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 2>&1 | grep "^  "
      for w in u2 u4; do
        timeout 30 $BIN/$x bench qmatmul --wdtype $w --m 32 --verbose \
          --config $b,BM=32,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 2>&1 | grep "^  "
      done
      timeout 30 $BIN/$x bench qmatmul --wdtype i4 --m 64 --verbose \
        --config $b,BM=64,BN=128,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 2>&1 | grep "^  "
    done
  done
}
{
  nvidia-smi --query-gpu=name --format=csv,noheader
  if [ "${ORDER:-ab}" = checks ]; then checks; ab; else ab; checks; fi
} > "$log" 2>&1
cat "$log"
