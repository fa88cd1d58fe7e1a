#!/usr/bin/env bash
# Session 67 (issues 15 and 20), for a device call of about four minutes: session 66's 128-token
# probe for i4 (the tuner's whole 128 x 128 tiles against two stream-k workers a multiprocessor;
# the whole tiles timed before and after), then APT W2A2 at 64 tokens on the paper's shapes
# beside torch's cuBLAS f16 and int8 `_int_mm` (issue 20's 2.5x and 2.1x). Binary tilus-main in
# $BIN (default .dev/s67). Log: $OUT/s67-short.txt.
# Prepared in session 67; not run: not needed, since session 68 ran its two parts inside
# bench/session67_h100.sh (PART=apt) and bench/session66_m128.sh on an H100.
set -u
BIN=${BIN:-.dev/s67}
OUT=${OUT:-/tmp}
log=$OUT/s67-short.txt
b=METHOD=gemv_wgmma,BK=64,BM=128,BN=128,WARPS=8,STAGES=5
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== i4, 128 tokens"
  timeout 50 $BIN/tilus-main bench qmatmul --wdtype i4 --m 128 --verbose \
    --config $b --config $b,BLOCKS_PER_SM=2,STREAM_K=264 --config $b 2>&1 | grep "^  \|^i4 "
  echo "== APT W2A2, 64 tokens"
  timeout 70 $BIN/tilus-main bench apt --m 64 --widths W2A2 --no-weight-only --runs 20
  timeout 50 python3 bench/torch_apt.py --m 64 --runs 20
} > "$log" 2>&1
cat "$log"
