#!/usr/bin/env bash
# Session 63 (issue 18): the paired product's look-ups by one PRMT (a rank-3 `lookup` of the
# entry-major codebook) against session 63's first build (.dev/s63: paired, gather_rows), and
# the checks. From the repository root on the device; binaries in $NEW (default .dev/s63b) and
# $OLD (default .dev/s63).
set -u
NEW=${NEW:-.dev/s63b}
OLD=${OLD:-.dev/s63}
OUT=${OUT:-/tmp}
log=$OUT/s63-fast.txt
shapes=57344x8192,8192x28672,8192x8192,10240x8192
{
  echo "== gpu_vq (gemv and paired)"
  TILUS_REQUIRE_GPU=1 $NEW/gpu_vq --test-threads=1 gemv_matches paired 2>&1 | tail -6
  echo "== macro_gpu (lookup)"
  TILUS_REQUIRE_GPU=1 $NEW/macro_gpu --test-threads=1 table_lookup 2>&1 | tail -6
  echo "== memcheck, paired"
  compute-sanitizer --tool memcheck $NEW/gpu_vq --test-threads=1 paired 2>&1 | tail -3
  echo "== racecheck, paired"
  compute-sanitizer --tool racecheck $NEW/gpu_vq --test-threads=1 paired 2>&1 | tail -3
  for round in 1 2; do
    echo "== round $round: old, m = 1, 4 (paired, gather_rows)"
    $OLD/tilus bench vq --configs gptvq2 --m 1,4 --shapes $shapes --no-elementwise --no-cublas 2>&1 | grep "^gptvq2 "
    echo "== round $round: new, m = 1, 4 (paired, lookup)"
    $NEW/tilus bench vq --configs gptvq2 --m 1,4 --shapes $shapes 2>&1 | grep -v "^gptvq2 m="
  done
  echo "== m = 16 and aqlm2x8 (the codebook's new row order), old then new"
  $OLD/tilus bench vq --configs gptvq2,aqlm2x8 --m 16 --shapes 57344x8192,8192x8192 --no-elementwise --no-cublas 2>&1 | grep "^gptvq2 \|^aqlm2x8 "
  $NEW/tilus bench vq --configs gptvq2,aqlm2x8 --m 16 --shapes 57344x8192,8192x8192 --no-elementwise --no-cublas 2>&1 | grep "^gptvq2 \|^aqlm2x8 "
} > "$log" 2>&1
tail -5 "$log"
