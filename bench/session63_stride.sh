#!/usr/bin/env bash
# Session 63 (issue 18), branch vq-codes-stride: the paired VQ gemv with the codes' ring rows
# padded to 12 words (conflict-free LDS.128; the halves' scratch moved into the ring) against
# main's (.dev/s63c), alternated; the GPU check of the paired product. From the repository
# root on the device.
set -u
NEW=${NEW:-.dev/s63e}
OLD=${OLD:-.dev/s63c}
OUT=${OUT:-/tmp}
log=$OUT/s63-stride.txt
shapes=57344x8192,8192x28672,8192x8192,10240x8192
{
  echo "== gpu_vq (paired)"
  TILUS_REQUIRE_GPU=1 $NEW/gpu_vq --test-threads=1 paired 2>&1 | tail -3
  for round in 1 2; do
    for b in $OLD $NEW; do
      echo "== round $round: $b"
      $b/tilus bench vq --configs gptvq2 --m 1,4 --shapes $shapes --no-elementwise --no-cublas 2>&1 | grep "^gptvq2 "
    done
  done
} > "$log" 2>&1
tail -3 "$log"
