#!/usr/bin/env bash
# Session 67 (issues 15 and 20): H100 points measured so far only on H200s, each baseline in
# the same run. PART=apt: APT-LLM layers at 1, 64 and 4096 tokens on the paper's shapes and at one
# and 64 on the Llama-70B ones (the H100 last timed APT in session 9), torch's cuBLAS f16 and
# int8 `_int_mm` beside them, and three `gpu_apt` checks. PART=small: the quantized matmul's
# batched decode on the three other Llama-70B layers, tuned, cuBLAS f16 in the sweep. From the
# repository root on the device; `tilus` (main) as tilus-main and the `gpu_apt` test in $BIN
# (default .dev/s67). Log: $OUT/s67-$PART.txt.
# Prepared in session 67; run in session 68 on an H100 (logs:
# docs/benchmarks-issue20-h100-s68-apt.txt for PART=apt, docs/benchmarks-issue15-h100-s68-small.txt
# and .csv for PART=small).
set -u
BIN=${BIN:-.dev/s67}
OUT=${OUT:-/tmp}
PART=${PART:?set PART=apt or PART=small}
log=$OUT/s67-$PART.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  if [ "$PART" = apt ]; then
    echo "== APT, paper shapes, 1, 64 and 4096 tokens"
    timeout 200 $BIN/tilus-main bench apt --m 1,64,4096 --widths W1A2,W2A2,W3A4 \
      --no-weight-only --runs 10
    echo "== APT, Llama-70B shapes, one and 64 tokens"
    timeout 120 $BIN/tilus-main bench apt --m 1,64 --shapes llama70b --widths W2A2,W3A4 \
      --no-weight-only --runs 10
    echo "== torch: cuBLAS f16 and int8 _int_mm"
    timeout 80 python3 bench/torch_apt.py --m 1,64,4096 --runs 10
    timeout 50 python3 bench/torch_apt.py --m 1,64 --shapes llama70b --runs 10
    echo "== gpu_apt: the layer against the reference, the 1-bit warpgroup MMA, the GPU re-layout"
    timeout 100 $BIN/gpu_apt --test-threads=1 gpu_apt_linear_matches_reference \
      gpu_apt_bgmma_matches_the_one_bit_gemm gpu_apt_split_planes_matches_the_host
  else
    echo "== quantized matmul, 10240 x 8192, 8192 x 8192 and 8192 x 28672, 16-256 tokens"
    timeout 560 $BIN/tilus-main bench sweep --shapes 10240x8192,8192x8192,8192x28672 \
      --wdtypes i4,u4,u2 --m 16,32,64,128,256 --tune 4 --csv $OUT/s67-small.csv
  fi
} > "$log" 2>&1
tail -60 "$log"
