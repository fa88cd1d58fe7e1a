#!/usr/bin/env bash
# Session 58 on the device: the integer-mma gemv's GPU reference check (groups shorter than a
# tile included), the group bench (bench/session58_groups.sh), then memcheck and racecheck on
# the reference check. Binaries in .dev/s58 (carried): gpu_qmatmul, tilus-old, tilus-new.
set -u
OUT=${OUT:-/tmp}
T=.dev/s58/gpu_qmatmul
export TILUS_CACHE_DIR=/tmp/tilus-cache
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== gpu_qmatmul gemv_imma_matches_the_reference"
  timeout 200 $T gemv_imma_matches_the_reference --exact --nocapture --test-threads 1
  echo "rc $?"
} 2>&1 | tee "$OUT/tests.txt"
OUT=$OUT bash bench/session58_groups.sh
CS=/usr/local/cuda/bin/compute-sanitizer
{
  echo "== memcheck"
  timeout 240 $CS --tool memcheck $T gemv_imma_matches_the_reference --exact --test-threads 1 2>&1 | tail -15
  echo "rc $?"
  echo "== racecheck"
  timeout 240 $CS --tool racecheck $T gemv_imma_matches_the_reference --exact --test-threads 1 2>&1 | tail -15
  echo "rc $?"
} 2>&1 | tee "$OUT/sanitize.txt"
