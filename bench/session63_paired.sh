#!/usr/bin/env bash
# Session 63 (issue 18): the paired transposed product (`--product 3`) against the rule's
# transposed product (`--product 1`) for GPTVQ-2 at 1 and 4 tokens, and its GPU checks.
# Run on the device from the repository root with the binaries in $BIN (default .dev/s63).
set -u
BIN=${BIN:-.dev/s63}
OUT=${OUT:-/tmp}
log=$OUT/s63-paired${BENCH_ONLY:+-bench}.txt
{
  if [ -z "${BENCH_ONLY:-}" ]; then
    echo "== gpu_vq (the whole file)"
    TILUS_REQUIRE_GPU=1 $BIN/gpu_vq --test-threads=1 2>&1 | tail -12
    echo "== memcheck, paired"
    compute-sanitizer --tool memcheck $BIN/gpu_vq --test-threads=1 paired 2>&1 | tail -4
    echo "== racecheck, paired"
    compute-sanitizer --tool racecheck $BIN/gpu_vq --test-threads=1 paired 2>&1 | tail -4
  fi
  for round in 1 2; do
    for p in 1 3; do
      echo "== round $round product $p"
      $BIN/tilus bench vq --configs gptvq2 --m 1,4 --shapes 57344x8192,8192x28672,8192x8192,10240x8192 --product $p \
        --no-elementwise $([ $p = 3 ] && echo --no-cublas) 2>&1
    done
  done
} > "$log" 2>&1
tail -5 "$log"
