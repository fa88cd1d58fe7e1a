#!/usr/bin/env bash
# Session 59 (issue 16): the one-token integer-mma gemv launched as a programmatic dependent.
# After `bash ../shared/tools/device-pack.sh`-style packing into .dev/s59 (tilus, tilus-old =
# the session's starting commit, gpu_qmatmul), on the GPU machine:
#   bash bench/session59_step.sh
set -u
B=.dev/s59
O=${OUT:-/tmp}
export TILUS_REQUIRE_GPU=1
{
  $B/gpu_qmatmul --test-threads=1 gemv_imma_dependent gemv_imma_matches 2>&1
  compute-sanitizer --tool memcheck $B/gpu_qmatmul gemv_imma_dependent 2>&1 | tail -4
  compute-sanitizer --tool racecheck $B/gpu_qmatmul gemv_imma_dependent 2>&1 | tail -4
} | tee $O/tests.txt
$B/tilus bench step --wdtypes u2,i4,i2,u4 --m 1 --shapes llama70b 2>&1 | tee $O/step.txt
for i in 1 2; do
  for b in tilus-old tilus; do
    echo "== $b round $i"
    $B/$b bench sweep --shapes llama70b --wdtypes u2,i4 --m 1 --tune 3 2>/dev/null
  done
done 2>&1 | tee $O/alone.txt
