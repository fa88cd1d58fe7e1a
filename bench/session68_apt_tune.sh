#!/usr/bin/env bash
# Session 68 (issue 20): the APT layer's multi-token GEMM tuned per token bucket
# (`kernels::apt::tune::tune_batch`, `tilus bench apt --tune`) against the rule: the GPU check of
# the tuner first, then the paper's shapes, W2A2 at 64 tokens and W1A2/W2A2 at 4096 (the widths
# of those targets), torch's cuBLAS f16 and int8 `_int_mm` in the same run. Sized for the ~330 s
# of device time left in session 68. Binaries `tilus` and the `gpu_apt` test in $BIN (default
# .dev/s68). Log: $OUT/s68-apt-tune.txt.
set -u
BIN=${BIN:-.dev/s68}
OUT=${OUT:-/tmp}
log=$OUT/s68-apt-tune.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== gpu_apt: the batch tuner"
  timeout 90 $BIN/gpu_apt --test-threads=1 gpu_apt_batch_tune_picks_the_fastest_point \
    --nocapture 2>&1 | grep -v "^$"
  echo "== APT tuned, paper shapes, W2A2 at 64 tokens"
  timeout 90 $BIN/tilus bench apt --m 64 --widths W2A2 --no-weight-only --runs 10 --tune
  echo "== APT tuned, paper shapes, W1A2 and W2A2 at 4096 tokens"
  timeout 110 $BIN/tilus bench apt --m 4096 --widths W1A2,W2A2 --no-weight-only --runs 10 --tune
  echo "== torch: cuBLAS f16 and int8 _int_mm, paper shapes"
  timeout 40 python3 bench/torch_apt.py --m 64,4096 --runs 10
} > "$log" 2>&1
grep -v "bgmma BM=\|imma ImmaTiles\|gemm AptTiles" "$log" | tail -70
