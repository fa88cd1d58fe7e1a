#!/usr/bin/env bash
# Session 63 (issue 18): the VQ gemv after the copy fix (the activations' ring by 16-byte
# chunks again), the paired product with one-PRMT look-ups (the rule up to 4 tokens) against
# the unpaired transposed product (`--product 1`), both alternated; the 16-token kernels of
# three formats; the checks. From the repository root on the device; binaries in $BIN
# (default .dev/s63c).
set -u
BIN=${BIN:-.dev/s63c}
OUT=${OUT:-/tmp}
log=$OUT/s63-fair.txt
shapes=57344x8192,8192x28672,8192x8192,10240x8192
{
  echo "== gpu_vq (all but the tuner's test)"
  TILUS_REQUIRE_GPU=1 $BIN/gpu_vq --test-threads=1 gemv_matches paired lut rejects 2>&1 | tail -9
  echo "== macro_gpu (lookup)"
  TILUS_REQUIRE_GPU=1 $BIN/macro_gpu --test-threads=1 table_lookup 2>&1 | tail -5
  echo "== memcheck, paired"
  compute-sanitizer --tool memcheck $BIN/gpu_vq --test-threads=1 paired 2>&1 | tail -3
  echo "== racecheck, paired"
  compute-sanitizer --tool racecheck $BIN/gpu_vq --test-threads=1 paired 2>&1 | tail -3
  for round in 1 2; do
    echo "== round $round: product 1"
    $BIN/tilus bench vq --configs gptvq2 --m 1,4 --shapes $shapes --product 1 --no-elementwise --no-cublas 2>&1 | grep "^gptvq2 "
    echo "== round $round: the rule (paired)"
    $BIN/tilus bench vq --configs gptvq2 --m 1,4 --shapes $shapes 2>&1 | grep -v "^gptvq2 m="
  done
  echo "== 16 tokens"
  $BIN/tilus bench vq --configs gptvq2,aqlm2x8,aqlm3 --m 16 --shapes 57344x8192,8192x8192 2>&1 | grep -v " m=16 "
} > "$log" 2>&1
tail -5 "$log"
