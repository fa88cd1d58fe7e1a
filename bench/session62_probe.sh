#!/usr/bin/env bash
# Issue 16 (session 62): what the one-token integer-mma gemv's fixed ~6 us a wave is (perf note
# 82), in one device call:
#  1. balance: ncu's min, mean and max of active cycles over the multiprocessors (are some idle
#     at the end, or is the tail inside every block?), tuned tilings against the i8 gemv;
#  2. waves: co-resident blocks over several waves around the tuned tilings;
#  3. digits once: the several-token kernel at one token (BM=4, three tokens of padding), whose
#     activations' digits come from one pre-pass, so its blocks can be small like the i8
#     gemv's (the time includes the pre-pass).
#   B=.dev/s62 bash bench/session62_probe.sh     (on the GPU machine; `tilus` in $B)
set -u
B=${B:-.dev/s62}
O=${OUT:-/tmp}
T=$B/tilus
one() { # wdtype n k config...
  local w=$1 n=$2 k=$3; shift 3
  for c in "$@"; do
    $T bench qmatmul --wdtype $w --m 1 --n $n --k $k --config "METHOD=$c" 2>&1 \
      | grep -E "^$w |rror" | head -1 | sed "s|\$|   <- $c|"
  done
}
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__ctas_launched.max,sm__ctas_launched.min,dram__throughput.avg.pct_of_peak_sustained_elapsed
bal() {
  echo "== ncu $*"
  ncu --kernel-name "regex:$1" --launch-skip 3 --launch-count 1 --metrics $M \
    $T bench qmatmul --m 1 "${@:2}" 2>&1 | grep -E "gpu__|sm__|dram__|rror"
}
I=gemv_imma,BM=1
K=gemv_imma,BM=4
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  echo "#### 3. digits once (BM=4 at one token) against the tuned one-token tiling"
  echo "== u2 57344 x 8192"
  one u2 57344 8192 $I,BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 \
    $K,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=2 \
    $K,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=4 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=512,BK=128,WARPS=8,STAGES=3,SPLIT_K=2,BLOCKS_PER_SM=2
  echo "== i4 57344 x 8192"
  one i4 57344 8192 $I,BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=2 \
    $K,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=2 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=4 \
    $K,BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=8
  echo "== u2 8192 x 28672"
  one u2 8192 28672 $I,BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8 \
    $K,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=16
  echo "== u2 8192 x 8192"
  one u2 8192 8192 $I,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=256,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=8 \
    $K,BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=16
  echo "#### 2. waves: co-resident one-token blocks"
  echo "== u2 57344 x 8192"
  one u2 57344 8192 $I,BN=896,BK=128,WARPS=8,STAGES=3,SPLIT_K=4,BLOCKS_PER_SM=2 \
    $I,BN=448,BK=128,WARPS=4,STAGES=4,SPLIT_K=8,BLOCKS_PER_SM=2 \
    $I,BN=256,BK=128,WARPS=4,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=4
  echo "== u1 57344 x 8192"
  one u1 57344 8192 $I,BN=896,BK=256,WARPS=8,STAGES=4,SPLIT_K=2 \
    $I,BN=448,BK=256,WARPS=4,STAGES=4,SPLIT_K=8,BLOCKS_PER_SM=2 \
    $I,BN=256,BK=256,WARPS=4,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=4
  echo "== u2 8192 x 28672"
  one u2 8192 28672 $I,BN=512,BK=128,WARPS=8,STAGES=3,SPLIT_K=16,BLOCKS_PER_SM=2 \
    $I,BN=256,BK=128,WARPS=4,STAGES=3,SPLIT_K=32,BLOCKS_PER_SM=4
  echo "#### 1. balance"
  bal imma --wdtype u2 --n 57344 --k 8192 --config METHOD=$I,BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2
  bal imma --wdtype u2 --n 8192 --k 28672 --config METHOD=$I,BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8
  bal gemv --wdtype i8 --n 57344 --k 8192 --config METHOD=gemv,BM=8,BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=8
  bal tokens --wdtype u2 --n 57344 --k 8192 --config METHOD=$K,BN=128,BK=128,WARPS=4,STAGES=4,SPLIT_K=4
} 2>&1 | tee $O/probe.txt
