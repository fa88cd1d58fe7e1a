#!/usr/bin/env bash
# Session 73 (issue 18): the register gather and the three-tier codebook cache on the GPU.
# Run from the repository root on the GPU machine with the binaries in $B (default .dev/s73):
# checks (the register gather, the cached GEMV at every tiering, both under compute-sanitizer),
# then `tilus bench vq --tiers` at one token on the Llama-70B layers.
set -uo pipefail
B=${B:-.dev/s73}
OUT=${OUT:-/tmp}
export TILUS_REQUIRE_GPU=1
log=$OUT/s73-checks.log
{
  $B/macro_gpu register_rows_on_gpu --nocapture --test-threads=1
  $B/gpu_vq gpu_vq_cached --nocapture --test-threads=1
  compute-sanitizer --tool memcheck --error-exitcode 9 $B/macro_gpu register_rows_on_gpu --test-threads=1
  compute-sanitizer --tool memcheck --error-exitcode 9 $B/gpu_vq gpu_vq_cached --test-threads=1
  compute-sanitizer --tool racecheck --error-exitcode 9 $B/gpu_vq gpu_vq_cached --test-threads=1
} 2>&1 | tee "$log"
$B/tilus bench vq --configs ${CONFIGS:-gptvq2,aqlm2x8,aqlm3} --m 1 --tiers --no-elementwise \
  --runs ${RUNS:-10} 2>&1 | tee "$OUT/s73-bench.log"
