#!/usr/bin/env bash
# Session 68 (issue 20): the APT layer's multi-token GEMM tuned per token bucket
# (`kernels::apt::tune::tune_batch`, `tilus bench apt --tune`) against the rule, on the H100:
# the GPU check of the tuner first, then the paper's shapes at 64 and 4096 tokens (W1A2, W2A2:
# the widths of the 64- and 4096-token targets), torch's cuBLAS f16 and int8 `_int_mm` in the
# same run; then (issue 16) the quantized matmul's every-type reference checks on this GPU.
# Binaries `tilus` and the `gpu_apt` test in $BIN (default .dev/s68), the `gpu_qmatmul` test in
# $QBIN (default .dev/s67; its kernels are main's). Log: $OUT/s68-apt-tune.txt.
set -u
BIN=${BIN:-.dev/s68}
QBIN=${QBIN:-.dev/s67}
OUT=${OUT:-/tmp}
log=$OUT/s68-apt-tune.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== gpu_apt: the batch tuner, the GPU re-layout"
  timeout 150 $BIN/gpu_apt --test-threads=1 gpu_apt_batch_tune_picks_the_fastest_point \
    gpu_apt_split_planes_matches_the_host 2>&1 | grep -v "^$"
  echo "== APT tuned, paper shapes, 64 and 4096 tokens"
  timeout 260 $BIN/tilus bench apt --m 64,4096 --widths W1A2,W2A2 --no-weight-only --runs 10 \
    --tune
  echo "== torch: cuBLAS f16 and int8 _int_mm, paper shapes"
  timeout 60 python3 bench/torch_apt.py --m 64,4096 --runs 10
  if [ -x "$QBIN/gpu_qmatmul" ]; then
    echo "== gpu_qmatmul: every weight type against the f64 reference, ragged m"
    timeout 150 $QBIN/gpu_qmatmul every_weight_type_matches_the_reference \
      gemv_every_weight_type_matches_the_reference bf16_zero_points_split_k_and_ragged_m \
      single_launch_split_k_back_to_back_and_ragged_m 2>&1 | grep -v "^$"
  fi
} > "$log" 2>&1
grep -v "bgmma BM=\|imma ImmaTiles\|gemm AptTiles" "$log" | tail -70
