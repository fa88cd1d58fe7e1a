#!/usr/bin/env bash
# Session 55's device run: the integer-mma decode kernel (apt_gemv_imma) with k split into
# slices (exact i32 partials, the last slice of a block finishes), exact against the 1-bit
# GEMM, then timed beside the popc kernel on the Llama-70B layers (docs/perf-notes.md 78), the
# one-token path and tuner (popc and integer-mma points) checked and timed.
# Build here: bash ../shared/tools/device-pack.sh --test gpu_apt, then on the GPU machine:
# bash bench/session55_imma.sh. Writes $OUT/imma.log.
set -u
B=.dev/bin
L=${OUT:-/tmp}/imma.log
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$L"
for t in imma decode_tune; do
  "$B/test-gpu_apt-test" $t --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panicked|tuned" >> "$L"
done
TILES=448x256x4x4,448x256x4x4x2,256x256x4x5x3,256x256x4x5x4,256x256x4x5x8,128x256x4x8x2,128x256x4x8x4,64x256x4x8
for pass in 1 2; do
  echo "== pass $pass" >> "$L"
  "$B/bin-tilus" bench apt --m 1 --shapes llama70b --widths W2A2,W3A4 --popc-only --no-cublas \
    --no-weight-only --runs 20 --imma-tiles "$TILES" >> "$L" 2>&1
done
# The layer's own path at one token (the layer column: `M` for the integer-mma kernel).
"$B/bin-tilus" bench apt --m 1 --shapes 57344x8192 --widths W3A4,W2A2 --no-cublas --no-weight-only \
  --runs 20 >> "$L" 2>&1
# The one-token tuner's choice per layer (popc and integer-mma points).
"$B/bin-tilus" bench apt --m 1 --shapes llama70b --widths W2A2,W3A4 --popc-only --no-cublas \
  --no-weight-only --runs 20 --tune >> "$L" 2>&1
timeout 150 compute-sanitizer --tool memcheck "$B/test-gpu_apt-test" imma --test-threads=1 2>&1 \
  | tail -3 >> "$L"
timeout 150 compute-sanitizer --tool racecheck "$B/test-gpu_apt-test" imma --test-threads=1 2>&1 \
  | tail -3 >> "$L"
tail -200 "$L"
