#!/usr/bin/env bash
# Session 64: GPU checks of the session's kernels (the VQ gemv's one-PRMT look-ups in every
# product), with compute-sanitizer. From the repository root on the device; binaries in $BIN
# (default .dev/s64).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-checks.txt
{
  echo "== gpu_vq (all but the tuner's test)"
  TILUS_REQUIRE_GPU=1 $BIN/gpu_vq --test-threads=1 gemv_matches paired lut rejects 2>&1 | tail -9
  echo "== memcheck, gemv_matches"
  compute-sanitizer --tool memcheck $BIN/gpu_vq --test-threads=1 gemv_matches 2>&1 | tail -3
  echo "== racecheck, gemv_matches"
  compute-sanitizer --tool racecheck $BIN/gpu_vq --test-threads=1 gemv_matches 2>&1 | tail -3
} > "$log" 2>&1
cat "$log"
