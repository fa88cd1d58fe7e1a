#!/usr/bin/env bash
# Issue 16 (session 62), third run: the persistent one-token integer-mma gemv with a unit's
# column and first tile computed once a unit, and its partials counted behind one fence per
# batch of units (at most 32, and at the worker's end) instead of one a unit; against the
# tuned tilings in turns, ncu's warp states for both, then its GPU test under
# compute-sanitizer.
#   B=.dev/s62 bash bench/session62_publish.sh     (`tilus` and `gpu_qmatmul` in $B)
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
    BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=132 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=8,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2
  echo "== u1 57344 x 8192"
  one u1 57344 8192 BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=2 \
    BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=132 \
    BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=4,STREAM_K=264,BLOCKS_PER_SM=2
  echo "== u2 8192 x 28672"
  one u2 8192 28672 BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=14,STREAM_K=264,BLOCKS_PER_SM=2 \
    BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=14,STREAM_K=132
  echo "== u2 8192 x 8192"
  one u2 8192 8192 BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,STREAM_K=396,BLOCKS_PER_SM=3
} 2>&1 | tee $O/publish.txt
S="--section WarpStateStats --section SchedulerStats --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum"
{
  for c in BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=4,STREAM_K=132; do
    echo "== ncu u2 57344 x 8192 $c"
    ncu --kernel-name regex:imma --launch-skip 3 --launch-count 1 $S $T bench qmatmul --wdtype u2 --m 1 \
      --n 57344 --k 8192 --config METHOD=gemv_imma,BM=1,$c 2>&1 | grep -E "^    [A-Z]|^    [a-z]" | grep -vE "^    -"
  done
} 2>&1 | tee $O/publish-ncu.txt
{
  G=$B/gpu_qmatmul
  TILUS_REQUIRE_GPU=1 $G --test-threads=1 persistent --nocapture 2>&1 | tail -16
  echo "== memcheck"
  TILUS_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck $G --test-threads=1 persistent 2>&1 | tail -2
  echo "== racecheck"
  TILUS_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool racecheck $G --test-threads=1 persistent 2>&1 | tail -2
} 2>&1 | tee $O/publish-tests.txt
