#!/usr/bin/env bash
# Session 72, H100 (issue 18): the fused VQ-GEMM for prefill (`vq_gemm`, codes looked up into
# wgmma's register operand, no dense weight). PART selects (default: check,bench):
#   check    the GPU check of the fused GEMM (every block height, f64 reference and
#            interpreter, the layer's choice of path), and the dense path's check beside it
#   bench    `tilus bench vq --dense` for GPTVQ-2, AQLM-2x8 and AQLM-3 on the Llama-70B shapes
#            at $M tokens: the direct kernel, the dense path, the fused GEMM at each block
#            height, cuBLAS f16 and the element-wise kernel in the same run
#   sanitize memcheck and racecheck on the fused check, then the whole gpu_vq
# Binaries `tilus`, `gpu_vq` in $BIN (default .dev/s72). Log $OUT/s72-vq-gemm-<part>.txt.
set -u
BIN=${BIN:-.dev/s72}
OUT=${OUT:-/tmp}
M=${M:-16,32,64,128,256,1024,4096}
for part in $(echo "${PART:-check,bench}" | tr , ' '); do
  log="$OUT/s72-vq-gemm-$part.txt"
  case $part in
  check)
    nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$log" 2>&1
    timeout 150 $BIN/gpu_vq --test-threads=1 fused dense 2>&1 |
      grep "^test\|result\|panick\|rel err\|interpreter" >> "$log"
    ;;
  bench)
    timeout 400 $BIN/tilus bench vq --dense --configs gptvq2,aqlm2x8,aqlm3 --m $M --runs 5 \
      > "$log" 2>&1
    ;;
  sanitize)
    {
      timeout 150 compute-sanitizer --tool memcheck --print-limit 5 $BIN/gpu_vq \
        --test-threads=1 --exact gpu_vq_fused_gemm_matches_interpreter_and_reference 2>&1 | tail -3
      timeout 200 compute-sanitizer --tool racecheck --print-limit 5 $BIN/gpu_vq \
        --test-threads=1 --exact gpu_vq_fused_gemm_matches_interpreter_and_reference 2>&1 | tail -3
      timeout 200 $BIN/gpu_vq --test-threads=1 2>&1 | grep "^test\|result\|panick"
    } > "$log" 2>&1
    ;;
  esac
  grep -v "^[a-z0-9]* m=" "$log" | tail -80
done
