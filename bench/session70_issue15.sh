#!/usr/bin/env bash
# Prepared in session 69 for the next session's H100 (issues 15 and 16): what the H100 has not yet timed
# of "every weight type, f16 and bf16" (docs/benchmarks.md lists it), and the check of session
# 69's one-wave tile order (perf note 92), cuBLAS f16 in each sweep. One PART a device call:
#   order   the tuner's first point alone (--tune 1) at 256 tokens on 8192 x 8192: session 69's
#           reorder should give 256 x 64 whole tiles, 51.6-54.8 us for i4, u2, u8
#   wide    every 5- to 8-bit type on 57344 x 8192 at 32, 64, 128 and 8192 tokens, and f8e4m3's
#           fused kernel at 4096 (--verbose prints it beside the dequantize-then-cuBLAS pick)
#   small   every type on the three smaller layers at 256, 1024 and 4096 tokens
#   bf16    every type with bf16 activations: 57344 x 8192 at 32, 256 and 1024 tokens, the
#           smaller layers at 256
#   checks  the whole `gpu_gemm` test (every Hopper GEMM at ragged m 33, 257, 4097; session 65
#           ran only its copy-engine and warp-specialized tests on the H100) and the whole
#           `gpu_qmatmul` (every weight type on every method, ragged m; last whole on an H200 in
#           session 57), one log for the "done when" of issues 15 and 16
# Binaries `tilus`, `gpu_gemm` and `gpu_qmatmul` in $BIN (default .dev/s70). Log
# $OUT/s70-$PART.txt, CSV beside it. Sized from
# session 69's sweeps (about 1 s a point at --tune 3): order 20 s, wide 120 s, small 250 s,
# bf16 200 s, checks up to 590 s (its own call).
set -u
BIN=${BIN:-.dev/s70}
OUT=${OUT:-/tmp}
PART=${PART:?set PART=order, wide, small, bf16 or checks}
ALL=u1,u2,u3,u4,u5,u6,u7,u8,i2,i3,i4,i5,i6,i7,i8,f3e1m1,f4e2m1,f5e2m2,f5e3m1,f6e3m2,f6e2m3
ALL=$ALL,f7e3m3,f7e4m2,f8e4m3,f8e5m2
WIDE=u5,u6,u7,u8,i5,i6,i7,i8,f5e2m2,f5e3m1,f6e3m2,f6e2m3,f7e3m3,f7e4m2,f8e4m3,f8e5m2
SMALL=10240x8192,8192x8192,8192x28672
log=$OUT/s70-$PART.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  case "$PART" in
  order)
    timeout 60 $BIN/tilus bench sweep --shapes 8192x8192 --wdtypes i4,u2,u8 --m 256 --tune 1
    ;;
  wide)
    timeout 300 $BIN/tilus bench sweep --shapes 57344x8192 --wdtypes $WIDE --m 32,64,128,8192 \
      --tune 3 --csv $OUT/s70-wide.csv
    timeout 100 $BIN/tilus bench sweep --shapes 57344x8192 --wdtypes f8e4m3 --m 4096 --tune 4 \
      --verbose
    ;;
  small)
    timeout 500 $BIN/tilus bench sweep --shapes $SMALL --wdtypes $ALL --m 256,1024,4096 --tune 4 \
      --csv $OUT/s70-small.csv
    ;;
  bf16)
    timeout 300 $BIN/tilus bench sweep --adtype bf16 --shapes 57344x8192 --wdtypes $ALL \
      --m 32,256,1024 --tune 3 --csv $OUT/s70-bf16-wide.csv
    timeout 250 $BIN/tilus bench sweep --adtype bf16 --shapes $SMALL --wdtypes $ALL --m 256 \
      --tune 4 --csv $OUT/s70-bf16-small.csv
    ;;
  checks)
    timeout 250 $BIN/gpu_gemm --test-threads=1 2>&1 | grep -v "^$"
    timeout 340 $BIN/gpu_qmatmul --test-threads=1 2>&1 | grep "^test\|result"
    ;;
  esac
} > "$log" 2>&1
grep -v "^  " "$log" | tail -40
