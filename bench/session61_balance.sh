#!/usr/bin/env bash
# Issue 16 (session 61): are the one-token integer-mma gemv's multiprocessors idle at the end
# (some blocks finishing early: one block a multiprocessor, its work fixed) or busy to the end
# (a tail inside every block)? ncu's spread of active cycles over the multiprocessors, for the
# tuned tilings of session 58 and the i8 gemv's small blocks as the contrast (perf note 82).
#   B=.dev/s60 bash bench/session61_balance.sh     (on the GPU machine; `tilus` in $B)
set -u
B=${B:-.dev/s60}
O=${OUT:-/tmp}
T=$B/tilus
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__ctas_launched.max,dram__throughput.avg.pct_of_peak_sustained_elapsed
run() {
  echo "== $*"
  ncu --kernel-name "regex:$1" --launch-skip 3 --launch-count 1 --metrics $M \
    $T bench qmatmul --m 1 "${@:2}" 2>&1 | grep -E "^  [a-z]|gpu__|sm__|dram__|qmatmul_"
}
{
  run imma --wdtype u2 --n 57344 --k 8192 --config METHOD=gemv_imma,BM=1,BN=896,BK=128,WARPS=8,STAGES=4,SPLIT_K=2
  run imma --wdtype u2 --n 8192 --k 28672 --config METHOD=gemv_imma,BM=1,BN=512,BK=128,WARPS=8,STAGES=4,SPLIT_K=8
  run gemv --wdtype i8 --n 57344 --k 8192 --config METHOD=gemv,BM=8,BN=128,BK=128,WARPS=4,STAGES=3,SPLIT_K=8
} 2>&1 | tee $O/balance.txt
