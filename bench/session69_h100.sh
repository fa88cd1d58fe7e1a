#!/usr/bin/env bash
# Session 69 (issues 15 and 20) on the H100; one PART a device call. cuBLAS f16 is in each sweep.
#   apt      the APT layer's multi-token GEMM tuned per token bucket: session 68's
#            `bench/session68_apt_tune.sh` (the tuner's GPU check and its two runs), the GPU
#            re-layout check (not run in session 68), both under compute-sanitizer memcheck too
#   wide     5- to 8-bit weights on 57344 x 8192 at 256 and 1024 tokens (issue 15's targets
#            there name every type; the H100 had timed only 1- to 4-bit ones), and i4 and u4 at
#            128 tokens with session 68's second stream-k candidate
#   small    u1, i2, u3, i3 and f3e1m1 on the three smaller Llama-70B layers at 32-256 tokens,
#            then the re-layout and the warpgroup-MMA forward under memcheck
#   more     5- to 8-bit weights at 4096 tokens; bf16 activations at 256 and 1024 (57344 x 8192)
#   apt4096  W1A2 and W2A2 at 4096 tokens tuned, torch's f16 and int8 beside them
#   rest     the GPU check of the 128 x 128 tile on two stream-k workers a multiprocessor, the
#            smaller layers from 256 tokens on (4- to 8-bit), bf16 at 32 and 256 tokens on
#            them, every tuned point of i4 at 256 tokens on 8192 x 8192, and W2A2's
#            4096-token miss at 1024 x 1024
#   m256     every point of the tuner's first eight at 256 tokens (u2, u8) on the smaller layers,
#            and i4 at 128 and 1024 tokens on the two shorter ones
# Binaries `tilus` and the `gpu_apt` and `gpu_qmatmul` tests in $BIN (default .dev/s69). Log:
# $OUT/s69-$PART.txt, CSVs beside it.
set -u
BIN=${BIN:-.dev/s69}
OUT=${OUT:-/tmp}
PART=${PART:?set PART=apt, wide, small, more, apt4096, rest or m256}
log=$OUT/s69-$PART.txt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  case "$PART" in
  apt)
    BIN=$BIN OUT=$OUT bash bench/session68_apt_tune.sh > /dev/null
    cat "$OUT/s68-apt-tune.txt"
    echo "== gpu_apt: the GPU re-layout against the host"
    timeout 60 $BIN/gpu_apt --test-threads=1 gpu_apt_split_planes_matches_the_host 2>&1 | grep -v "^$"
    echo "== compute-sanitizer memcheck: the re-layout and the layer"
    timeout 150 compute-sanitizer --tool memcheck $BIN/gpu_apt --test-threads=1 \
      gpu_apt_split_planes_matches_the_host gpu_apt_linear_matches_reference 2>&1 | tail -8
    ;;
  wide)
    timeout 330 $BIN/tilus bench sweep --shapes 57344x8192 \
      --wdtypes u5,i5,u6,i6,u7,i7,u8,i8,f5e2m2,f6e3m2,f7e3m3,f8e4m3 --m 256,1024 --tune 3 \
      --csv $OUT/s69-wide.csv
    timeout 100 $BIN/tilus bench sweep --shapes 57344x8192 --wdtypes i4,u4 --m 128 --tune 4 \
      --verbose --csv $OUT/s69-m128.csv
    ;;
  small)
    timeout 400 $BIN/tilus bench sweep --shapes 10240x8192,8192x8192,8192x28672 \
      --wdtypes u1,i2,u3,i3,f3e1m1 --m 32,64,128,256 --tune 3 --csv $OUT/s69-small.csv
    echo "== memcheck"
    timeout 170 compute-sanitizer --tool memcheck $BIN/gpu_apt --test-threads=1 \
      gpu_apt_split_planes_matches_the_host gpu_apt_forward_takes_the_warpgroup_mma 2>&1
    ;;
  more)
    timeout 250 $BIN/tilus bench sweep --shapes 57344x8192 --wdtypes u5,i6,u8,i8,f5e2m2,f8e4m3 \
      --m 4096 --tune 3 --csv $OUT/s69-prefill.csv
    timeout 250 $BIN/tilus bench sweep --adtype bf16 --shapes 57344x8192 \
      --wdtypes i4,u4,u2,i8,f8e4m3 --m 256,1024 --tune 3 --csv $OUT/s69-bf16.csv
    ;;
  apt4096)
    echo "== APT tuned, W1A2 and W2A2 at 4096 tokens, paper shapes"
    timeout 200 $BIN/tilus bench apt --m 4096 --widths W1A2,W2A2 --no-weight-only --runs 10 --tune
    echo "== torch: cuBLAS f16 and int8 _int_mm"
    timeout 100 python3 bench/torch_apt.py --m 64,4096 --runs 10
    ;;
  rest)
    echo "== gpu_qmatmul: stream-k tiles, the 128 x 128 tile two workers a multiprocessor"
    timeout 120 $BIN/gpu_qmatmul --test-threads=1 gemv_wgmma_two_tiles_a_stage_match_the_reference \
      2>&1 | grep -v "^$" | tail -6
    timeout 300 $BIN/tilus bench sweep --shapes 10240x8192,8192x8192,8192x28672 \
      --wdtypes i4,u2,u5,i6,u8,f8e4m3 --m 256,1024,4096 --tune 3 --csv $OUT/s69-rest.csv
    timeout 150 $BIN/tilus bench sweep --adtype bf16 --shapes 10240x8192,8192x8192,8192x28672 \
      --wdtypes i4,u2 --m 32,256 --tune 3 --csv $OUT/s69-rest-bf16.csv
    timeout 100 $BIN/tilus bench sweep --shapes 8192x8192 --wdtypes i4 --m 256 --tune 12 \
      --verbose
    echo "== APT tuned, W2A2 at 4096 tokens, 1024 x 1024"
    timeout 60 $BIN/tilus bench apt --m 4096 --widths W2A2 --shapes 1024x1024 --no-weight-only \
      --runs 10 --tune
    timeout 60 python3 bench/torch_apt.py --m 4096 --shapes 1024x1024 --runs 10
    ;;
  m256)
    timeout 200 $BIN/tilus bench sweep --shapes 10240x8192,8192x8192,8192x28672 --wdtypes u2,u8 \
      --m 256 --tune 8 --verbose
    timeout 100 $BIN/tilus bench sweep --shapes 10240x8192,8192x8192 --wdtypes i4 --m 128,1024 \
      --tune 8 --verbose
    ;;
  esac
} > "$log" 2>&1
tail -60 "$log"
