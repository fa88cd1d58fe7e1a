#!/usr/bin/env bash
# Issue 16 (session 62), second run: the persistent one-token integer-mma gemv with its next
# unit claimed a unit ahead and the ring topped up before each unit's digit split, against
# the tuned tilings, in turns; then its GPU test under compute-sanitizer.
#   B=.dev/s62 bash bench/session62_claim_ahead.sh     (`tilus` and `gpu_qmatmul` in $B)
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
  echo "== u2 57344 x 8192"
  one u2 57344 8192 BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=132
  echo "== u1 57344 x 8192"
  one u1 57344 8192 BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 8192 x 28672"
  one u2 8192 28672 BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=14,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 8192 x 8192"
  one u2 8192 8192 BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=396,BLOCKS_PER_SM=3
} 2>&1 | tee $O/claim-ahead.txt
{
  G=$B/gpu_qmatmul
  TILUS_REQUIRE_GPU=1 $G --test-threads=1 persistent --nocapture 2>&1 | tail -14
  echo "== memcheck"
  TILUS_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck $G --test-threads=1 persistent 2>&1 | tail -2
  echo "== racecheck"
  TILUS_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool racecheck $G --test-threads=1 persistent 2>&1 | tail -2
} 2>&1 | tee $O/claim-ahead-tests.txt
