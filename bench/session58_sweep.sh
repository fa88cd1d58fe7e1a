#!/usr/bin/env bash
# Session 58 (issue 16): one token of the 1- to 8-bit integer types on the four Llama-70B
# layers, groups of 128, with the integer-mma gemv taking groups shorter than a tile (u1).
set -u
B=${B:-.dev/s58/tilus-new}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/sweep.txt"
timeout 560 $B bench sweep --shapes llama70b --m 1 --wdtypes u1,u2,i2,u3,i3,u4,i4,i8 --tune 3 \
    --csv "$OUT/sweep.csv" 2>&1 | tee -a "$OUT/sweep.txt"
