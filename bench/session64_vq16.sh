#!/usr/bin/env bash
# Session 64 (issue 18): the VQ gemv's one-PRMT look-ups for every product of GPTVQ-2 (the
# 16-token product `t0` and the transposed `t1`/`t2`, not only the paired one), against the
# binary before, alternated twice, the element-wise u2 kernel in the same run. From the
# repository root on the device; binaries in $BIN (default .dev/s64): `tilus` (before) and
# `tilus-prmt` (after).
set -u
BIN=${BIN:-.dev/s64}
OUT=${OUT:-/tmp}
log=$OUT/s64-vq16.txt
shapes=57344x8192,8192x28672,8192x8192,10240x8192
{
  for round in 1 2; do
    for b in tilus tilus-prmt; do
      echo "== round $round: $b"
      $BIN/$b bench vq --configs gptvq2 --m 8,16 --shapes $shapes --no-cublas 2>&1 | grep -v "^gptvq2 m="
    done
  done
} > "$log" 2>&1
tail -30 "$log"
