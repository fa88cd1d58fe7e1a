#!/usr/bin/env bash
# Issue 16 (session 61): where the one-token integer-mma gemv's fixed cost goes. Session 58's
# sweep has every integer type 7.3-7.7 us behind a same-size copy on 8192 x 28672 (u1 to u4,
# a 4x spread of bytes) and 5.5-9.3 us on 57344 x 8192: a cost per launch or per block, not
# per byte (perf note 82). Time one configuration as the grid grows (n) and as each block's
# slice grows (k), so that time = fixed + bytes / bandwidth separates; then one ncu profile.
#   B=.dev/s60 bash bench/session61_fixed_cost.sh     (on the GPU machine; `tilus` in $B)
set -u
B=${B:-.dev/s60}
O=${OUT:-/tmp}
T=$B/tilus
imma="METHOD=gemv_imma,BM=1,BN=896,BK=128,WARPS=8,STAGES=4"
{
  echo "== u2 gemv_imma bn896: n grows (k 8192, split 2: blocks 64, 128, 256, 512)"
  for n in 28672 57344 114688 229376; do
    $T bench qmatmul --wdtype u2 --m 1 --n $n --k 8192 --config "$imma,SPLIT_K=2" 2>&1
  done
  echo "== u2 gemv_imma bn896: k grows (n 57344; split 2 to 4096, then the slice held at 4096)"
  for ks in 2048:2 4096:2 8192:2 16384:4 32768:8; do
    $T bench qmatmul --wdtype u2 --m 1 --n 57344 --k ${ks%:*} --config "$imma,SPLIT_K=${ks#*:}" 2>&1
  done
  echo "== u2 gemv_imma bn896: the split's tail (n 57344, k 4096: 64, 128, 256 blocks)"
  for sk in 1 2 4; do
    $T bench qmatmul --wdtype u2 --m 1 --n 57344 --k 4096 --config "$imma,SPLIT_K=$sk" 2>&1
  done
  echo "== i8 gemv bn128 (the contrast: 4.5 us behind the copy at 57344 x 8192): n grows"
  for n in 28672 57344 114688 229376; do
    $T bench qmatmul --wdtype i8 --m 1 --n $n --k 8192 \
      --config METHOD=gemv,BM=8,BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=8 2>&1
  done
} 2>&1 | tee $O/fixed.txt
# One launch of the u2 kernel under ncu: throughput, stalls, occupancy.
ncu --kernel-name regex:imma --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  $T bench qmatmul --wdtype u2 --m 1 --n 57344 --k 8192 --config "$imma,SPLIT_K=2" \
  > $O/ncu.txt 2>&1
tail -60 $O/ncu.txt
