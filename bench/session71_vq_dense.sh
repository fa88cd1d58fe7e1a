#!/usr/bin/env bash
# Prepared in session 70 for the next session's H100 (issue 18; not yet run). Session 70 built
# prefill's path for VQ weights, the dense weight (`vq_dequant`) and one cuBLAS GEMM on it
# (`GpuVqLinear::forward_dense_into`, docs/vq.md), checked on the interpreter only. This run
# checks it on the GPU and times it against the direct kernel, cuBLAS f16 and the element-wise
# kernel, to set the token count the layer should switch at.
#   1. the GPU check `gpu_vq_dense_prefill_matches_interpreter_and_reference` (bit for bit against
#      the interpreter, the f64 reference at m = 33 and 257), then under compute-sanitizer
#      memcheck
#   2. `tilus bench vq --dense` for the three default formats on the Llama-70B shapes at 16, 32,
#      64, 128, 256, 1024 and 4096 tokens (the direct kernel's time grows with m/16; the dense
#      path's is the dequantize, about n·k·2 bytes written and read once, plus cuBLAS's GEMM)
#   3. the whole `gpu_vq` (the layer's forward now takes the path from `dense_from` tokens)
# Binaries `tilus` and the `gpu_vq` test in $BIN (default .dev/s71). Log $OUT/s71-vq-dense.txt;
# about 4 minutes (the direct kernel at 4096 tokens on 57344 x 8192 is about 25 ms a run).
set -u
BIN=${BIN:-.dev/s71}
OUT=${OUT:-/tmp}
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  timeout 120 $BIN/gpu_vq --test-threads=1 --exact \
    gpu_vq_dense_prefill_matches_interpreter_and_reference 2>&1 | grep "^test\|result\|panick"
  timeout 300 $BIN/tilus bench vq --dense --m 16,32,64,128,256,1024,4096 --runs 5
  timeout 120 compute-sanitizer --tool memcheck --print-limit 5 $BIN/gpu_vq --test-threads=1 \
    --exact gpu_vq_dense_prefill_matches_interpreter_and_reference 2>&1 | tail -4
  timeout 150 $BIN/gpu_vq --test-threads=1 2>&1 | grep "^test\|result\|panick"
} > "$OUT/s71-vq-dense.txt" 2>&1
tail -40 "$OUT/s71-vq-dense.txt"
