#!/usr/bin/env bash
# Session 68 (issue 20): the APT layer's multi-token GEMM tuned per token bucket
# (`kernels::apt::tune::tune_batch`, `tilus bench apt --tune`) against the rule: the GPU check of
# the tuner first, then W2A2 at 64 tokens on the paper's shapes (the 64-token target) and W1A2
# at 4096 on 1024 x 1024 (the one 4096-token miss), cuBLAS f16 in bench apt's own column. Sized
# for the ~180 s of device time left in session 68 (torch's int8 is in the session's first APT
# log, docs/benchmarks-issue20-h100-s68-apt.txt). Binaries `tilus` and the `gpu_apt` test in
# $BIN (default .dev/s68). Log: $OUT/s68-apt-tune.txt.
set -u
BIN=${BIN:-.dev/s68}
OUT=${OUT:-/tmp}
log=$OUT/s68-apt-tune.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== gpu_apt: the batch tuner"
  timeout 70 $BIN/gpu_apt --test-threads=1 gpu_apt_batch_tune_picks_the_fastest_point \
    --nocapture 2>&1 | grep -v "^$"
  echo "== APT tuned, paper shapes, W2A2 at 64 tokens"
  timeout 60 $BIN/tilus bench apt --m 64 --widths W2A2 --no-weight-only --runs 10 --tune
  echo "== APT tuned, W1A2 at 4096 tokens, 1024 x 1024"
  timeout 30 $BIN/tilus bench apt --m 4096 --widths W1A2 --shapes 1024x1024 --no-weight-only \
    --runs 10 --tune
} > "$log" 2>&1
grep -v "bgmma BM=\|imma ImmaTiles\|gemm AptTiles" "$log" | tail -70
