#!/usr/bin/env bash
# Issue 16 (session 61): perf note 82 found the one-token integer-mma gemv losing ~6 us a wave
# to idle multiprocessors (one block a multiprocessor, fixed work). Do co-resident blocks over
# several waves hide one block's start and end behind the other's streaming? Tilings around
# the tuned ones (first line of each group), every block count a multiprocessor that fits.
#   B=.dev/s60 bash bench/session61_waves.sh     (on the GPU machine; `tilus` in $B)
set -u
B=${B:-.dev/s60}
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
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=4,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=8,BLOCKS_PER_SM=2 \
    BN=448,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,BLOCKS_PER_SM=2 \
    BN=256,BK=128,WARPS=4,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=4
  echo "== u1 57344 x 8192"
  one u1 57344 8192 BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=512,BK=256,WARPS=8,STAGES=3,SPLIT_K=4,BLOCKS_PER_SM=2 \
    BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=8,BLOCKS_PER_SM=2 \
    BN=256,BK=256,WARPS=4,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=4
  echo "== u2 8192 x 28672"
  one u2 8192 28672 BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8 \
    BN=512,BK=128,WARPS=8,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=2 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=28,BLOCKS_PER_SM=3 \
    BN=256,BK=128,WARPS=4,STAGES=3,SPLIT_K=32,BLOCKS_PER_SM=4
  echo "== u2 8192 x 8192"
  one u2 8192 8192 BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=16,BLOCKS_PER_SM=2 \
    BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=32,BLOCKS_PER_SM=4
} 2>&1 | tee $O/waves.txt
