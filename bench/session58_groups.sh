#!/usr/bin/env bash
# Session 58 (issue 16): scale groups shorter than a tile on the integer-mma gemv. One token of
# u1 in groups of 128 (two groups a 256-row tile: look-up tables first, then the mma), and
# 2- and 4-bit weights in groups of 64 and 32, which the mma refused before this session,
# timed with the old binary (NEW=old) and the new one in the same run.
set -u
OLD=${OLD:-.dev/s58/tilus-old}
NEW=${NEW:-.dev/s58/tilus-new}
OUT=${OUT:-/tmp}
log=$OUT/groups.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | tee "$log"
for s in "57344 8192" "8192 28672" "8192 8192"; do
  set -- $s
  echo "== u1 g128 n=$1 k=$2 (new: the look-up tables, then the mma)" | tee -a "$log"
  timeout 150 $NEW bench qmatmul --wdtype u1 --m 1 --n "$1" --k "$2" --group 128 --tune 10 --verbose 2>&1 | tee -a "$log"
done
for w in "u2 64" "i2 32" "i4 32" "u4 64"; do
  set -- $w
  for s in "57344 8192" "8192 28672"; do
    read n k <<<"$s"
    for b in OLD NEW; do
      echo "== $b $1 g$2 n=$n k=$k" | tee -a "$log"
      timeout 120 ${!b} bench qmatmul --wdtype "$1" --m 1 --n "$n" --k "$k" --group "$2" --tune 6 --verbose 2>&1 | tee -a "$log"
    done
  done
done
