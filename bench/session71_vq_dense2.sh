#!/usr/bin/env bash
# Session 71, second H100 run (issue 18). The first (bench/session71_vq_dense.sh,
# docs/benchmarks-issue18-h100-s71-dense.txt) found prefill's dense weight slow: `vq_dequant`
# read every value's code and codebook component with a 2-byte load from global memory (GPTVQ-2
# at 57344 x 8192: about 970 us of the path's 1192, against 313 us to write 940 MB at 3 TB/s).
# It now reads one code and one codebook row (`gather_rows` from global: one 8- or 16-byte load)
# per vector. This run checks it and times the path again where the layer's switch lies:
#   1. the dense GPU check (bit for bit against the interpreter, the f64 reference at m = 33 and
#      257, the layer's own choice of path), and `gather_rows` from global memory on the GPU
#      (now by vectors) against the interpreter
#   2. `tilus bench vq --dense` for the three formats on the Llama-70B shapes, m = 32 to 256
#   3. the dense check under compute-sanitizer memcheck, then the whole `gpu_vq`
# Binaries `tilus`, `gpu_vq`, `gpu_codegen` in $BIN (default .dev/s71). Log $OUT/s71-vq-dense2.txt.
set -u
BIN=${BIN:-.dev/s71}
OUT=${OUT:-/tmp}
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  timeout 60 $BIN/gpu_vq --test-threads=1 --exact \
    gpu_vq_dense_prefill_matches_interpreter_and_reference 2>&1 | grep "^test\|result\|panick"
  timeout 60 $BIN/gpu_codegen --test-threads=1 gather_rows 2>&1 | grep "^test\|result\|panick"
  timeout 220 $BIN/tilus bench vq --dense --m 32,64,128,256 --runs 5
  timeout 90 compute-sanitizer --tool memcheck --print-limit 5 $BIN/gpu_vq --test-threads=1 \
    --exact gpu_vq_dense_prefill_matches_interpreter_and_reference 2>&1 | tail -3
  timeout 150 $BIN/gpu_vq --test-threads=1 2>&1 | grep "^test\|result\|panick"
} > "$OUT/s71-vq-dense2.txt" 2>&1
grep -v "^[a-z0-9]* m=" "$OUT/s71-vq-dense2.txt" | tail -60
