#!/usr/bin/env bash
# Session 65, the first device run: the GPU checks session 64 could not run, in order of need.
# 1. gpu_vq (main at 1a13ab7: one-PRMT look-ups in every GPTVQ-2 product), then memcheck and
#    racecheck on its paired and 16-token tests;
# 2. bench/session64_last.sh (copy-engine loads issued by the warps in turn, branch
#    tma-issuer-rr, against main, alternated; the GPU tests of the kernels that use tma_load);
# 3. bench/session64_probe.sh (64-column blocks at 64 tokens) with main's binary.
# Binaries in $BIN (default .dev/s65), stripped: gpu_vq built from main at 1a13ab7, the rest
# as session64_last.sh says. One log: $OUT/s65-first.txt.
set -u
export BIN=${BIN:-.dev/s65}
export OUT=${OUT:-/tmp}
log=$OUT/s65-first.txt
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  echo "== gpu_vq"
  TILUS_REQUIRE_GPU=1 timeout 200 $BIN/gpu_vq --test-threads=1 2>&1 | tail -12
  for tool in memcheck racecheck; do
    echo "== $tool: gpu_vq paired, gemv"
    TILUS_REQUIRE_GPU=1 timeout 120 $san --tool $tool --error-exitcode 9 \
      $BIN/gpu_vq --test-threads=1 paired gemv_matches 2>&1 | tail -5
    echo "exit ${PIPESTATUS[0]}"
  done
} > "$log" 2>&1
bash bench/session64_last.sh > /dev/null 2>&1; cat $OUT/s64-last.txt >> "$log"
TILUS=$BIN/tilus-prmt bash bench/session64_probe.sh > /dev/null 2>&1; cat $OUT/s64-probe.txt >> "$log"
cat "$log"
