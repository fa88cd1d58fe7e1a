#!/usr/bin/env bash
# Session 65, the last device run (issue 15): more warps or wider blocks for the warpgroup gemv
# at 32, 64 and 128 tokens against the tuner's pick in the same invocation (57344 x 8192), and
# one ncu profile of the 32-token u2 kernel (run second, after the 32-token probes) with stall
# samples per SASS instruction (where the k step's time goes: perf notes 56, 58 and 85).
# From the repository root on the device; `tilus` in $BIN (default .dev/s65b), built from main
# at the commit that adds this script. Logs: $OUT/s65-probe.txt, $OUT/s65-ncu-*.
set -u
BIN=${BIN:-.dev/s65b}
OUT=${OUT:-/tmp}
log=$OUT/s65-probe.txt
b=METHOD=gemv_wgmma,BK=64
q32=$b,BM=32,BN=256,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  for w in u2 u4 f4e2m1; do
    echo "== $w, 32 tokens"
    timeout 60 $BIN/tilus bench qmatmul --wdtype $w --m 32 --verbose --config $q32 \
      --config $b,BM=32,BN=256,WARPS=16,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=1,STREAM_K=132 \
      --config $b,BM=32,BN=128,WARPS=8,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $b,BM=32,BN=128,WARPS=8,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
      2>&1 | grep "^  \|cuBLAS\|^$w"
  done
} > "$log" 2>&1
cat "$log"
# Stall samples per SASS instruction of the 32-token u2 kernel (the tuner's pick).
timeout 240 ncu --kernel-name regex:gemvwg --launch-skip 3 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SchedulerStats \
  --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
  -f -o $OUT/s65-ncu-u2m32 \
  $BIN/tilus bench qmatmul --wdtype u2 --m 32 --config $q32 > $OUT/s65-ncu-run.txt 2>&1
echo "ncu exit $?"
tail -3 $OUT/s65-ncu-run.txt
ncu -i $OUT/s65-ncu-u2m32.ncu-rep --page details > $OUT/s65-ncu-details.txt 2>&1
ncu -i $OUT/s65-ncu-u2m32.ncu-rep --page source --csv --print-source sass > $OUT/s65-ncu-sass.csv 2>&1
ls -la $OUT
grep -i "stall\|issue\|eligible\|active" $OUT/s65-ncu-details.txt | head -40
{
  for w in i4 u2; do
    echo "== $w, 64 tokens"
    timeout 60 $BIN/tilus bench qmatmul --wdtype $w --m 64 --verbose \
      --config $b,BM=64,BN=128,WARPS=4,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=3,STREAM_K=396 \
      --config $b,BM=64,BN=256,WARPS=16,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=1,STREAM_K=132 \
      --config $b,BM=64,BN=256,WARPS=16,STAGES=4,STAGE_TILES=2,BLOCKS_PER_SM=1,STREAM_K=132 \
      --config $b,BM=64,BN=128,WARPS=8,STAGES=3,STAGE_TILES=2,BLOCKS_PER_SM=2,STREAM_K=264 \
      2>&1 | grep "^  \|cuBLAS\|^$w"
  done
  echo "== i4, 128 tokens"
  timeout 60 $BIN/tilus bench qmatmul --wdtype i4 --m 128 --verbose \
    --config $b,BM=128,BN=128,WARPS=4,STAGES=4,BLOCKS_PER_SM=2 \
    --config $b,BM=128,BN=256,WARPS=16,STAGES=4,BLOCKS_PER_SM=1,STREAM_K=132 \
    --config $b,BM=128,BN=256,WARPS=16,STAGES=4,BLOCKS_PER_SM=1 \
    2>&1 | grep "^  \|cuBLAS\|^i4"
} >> "$log" 2>&1
tail -40 "$log"
