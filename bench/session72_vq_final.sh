#!/usr/bin/env bash
# Session 72, second H100 run (issue 18): the fused VQ-GEMM after the rule change (three
# prefill paths by token count; AQLM-3 on blocks of 128 tokens with a ring of 3 stages).
#   1. the fused and dense GPU checks (AQLM-3's blocks of 128 among the block heights)
#   2. compute-sanitizer memcheck and racecheck on the fused check
#   3. `tilus bench vq --dense`: AQLM-3 at 128-1024 tokens (its fused GEMM on blocks of 128),
#      GPTVQ-2 and AQLM-2x8 at 96 tokens (where the rule hands the direct kernel over on the
#      8192-row layers)
# Binaries `tilus`, `gpu_vq` in $BIN (default .dev/s72b). Log $OUT/s72-vq-final.txt.
set -u
BIN=${BIN:-.dev/s72b}
OUT=${OUT:-/tmp}
log="$OUT/s72-vq-final.txt"
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  timeout 90 $BIN/gpu_vq --test-threads=1 fused dense 2>&1 | grep "^test\|result\|panick\|rel err\|interpreter"
  timeout 110 compute-sanitizer --tool memcheck --print-limit 5 $BIN/gpu_vq --test-threads=1 \
    --exact gpu_vq_fused_gemm_matches_interpreter_and_reference 2>&1 | tail -3
  timeout 130 compute-sanitizer --tool racecheck --print-limit 5 $BIN/gpu_vq --test-threads=1 \
    --exact gpu_vq_fused_gemm_matches_interpreter_and_reference 2>&1 | tail -3
  timeout 70 $BIN/tilus bench vq --dense --configs aqlm3 --m 128,256,1024 --runs 5 \
    --shapes 57344x8192,8192x28672
  timeout 50 $BIN/tilus bench vq --dense --configs gptvq2,aqlm2x8 --m 96 --runs 5
} > "$log" 2>&1
grep -v "^[a-z0-9]* m=" "$log" | tail -60
