#!/usr/bin/env bash
# Issue 16 (session 62): the one-token integer-mma gemv on persistent workers that claim
# (column tile, k chunk) units as they go (`STREAM_K` workers, `SPLIT_K` chunks a column),
# against the tuned tilings of work fixed at launch, in turns, on the four Llama-70B layers.
# Then the persistent GPU test under compute-sanitizer (memcheck, racecheck).
#   B=.dev/s62 bash bench/session62_persistent.sh     (on the GPU machine; `tilus` and the
#   `gpu_qmatmul` test binary in $B)
set -u
B=${B:-.dev/s62}
O=${OUT:-/tmp}
T=$B/tilus
one() { # wdtype n k config...
  local w=$1 n=$2 k=$3; shift 3
  for c in "$@"; do
    $T bench qmatmul --wdtype $w --m 1 --n $n --k $k --config "METHOD=gemv_imma,BM=1,$c" 2>&1 \
      | grep -E "^$w |rror" | head -1 | sed "s|\$|   <- $c|"
  done
}
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  echo "== u2 57344 x 8192"
  one u2 57344 8192 BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=16,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=8,STREAM_K=132 \
    BN=448,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2
  echo "== u1 57344 x 8192"
  one u1 57344 8192 BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=132 \
    BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=8,STREAM_K=132 \
    BN=896,BK=256,WARPS=8,STAGES=2,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== i4 57344 x 8192"
  one i4 57344 8192 BN=512,BK=64,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=512,BK=64,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=512,BK=64,WARPS=8,STAGES=4,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 8192 x 28672"
  one u2 8192 28672 BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=14,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=28,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=56,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=28,STREAM_K=396,BLOCKS_PER_SM=3
  echo "== u1 8192 x 28672"
  one u1 8192 28672 BN=512,BK=256,WARPS=8,STAGES=4,SPLIT_K=8 \
    BN=512,BK=256,WARPS=8,STAGES=4,SPLIT_K=14,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=512,BK=256,WARPS=8,STAGES=4,SPLIT_K=28,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 8192 x 8192"
  one u2 8192 8192 BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=396,BLOCKS_PER_SM=3 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=16,STREAM_K=396,BLOCKS_PER_SM=3 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=16,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 10240 x 8192"
  one u2 10240 8192 BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=396,BLOCKS_PER_SM=3 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=16,STREAM_K=264,BLOCKS_PER_SM=2
} 2>&1 | tee $O/persistent.txt
{
  G=$(ls $B/gpu_qmatmul* | head -1)
  TILUS_REQUIRE_GPU=1 $G --test-threads=1 persistent --nocapture 2>&1 | tail -15
  echo "== memcheck"
  TILUS_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck $G --test-threads=1 persistent 2>&1 | tail -4
  echo "== racecheck"
  TILUS_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool racecheck $G --test-threads=1 persistent 2>&1 | tail -4
} 2>&1 | tee $O/persistent-tests.txt
