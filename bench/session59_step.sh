#!/usr/bin/env bash
# Issue 16: the gemvs launched as programmatic dependents (sessions 59-60). Pack into $B:
# `tilus` (this tree), `tilus-old` (the tree before 723ec51), and the `gpu_qmatmul` and
# `gpu_linear` test binaries, stripped; then on the GPU machine:
#   B=.dev/s60 bash bench/session59_step.sh
# The most wanted results come first (a run may be cut short by its time limit).
set -u
B=${B:-.dev/s59}
O=${OUT:-/tmp}
export TILUS_REQUIRE_GPU=1
{
  $B/gpu_qmatmul --test-threads=1 dependent_launch gemv_imma_matches gemv_every 2>&1
  $B/gpu_linear --test-threads=1 2>&1
} | tee $O/tests.txt
# A Llama-70B decode step at one token, ordinary and dependent launches.
$B/tilus bench step --wdtypes u1,u2,i4,i8 --m 1 --shapes llama70b 2>&1 | tee $O/step.txt
# Each layer alone, before and after (the ordinary launch's code changed too), in turns.
for i in 1 2; do
  for b in tilus-old tilus; do
    echo "== $b round $i"
    $B/$b bench sweep --shapes llama70b --wdtypes u2,i4,i8 --m 1 --tune 3 2>/dev/null
  done
  [ $i = 1 ] && {
    compute-sanitizer --tool memcheck $B/gpu_qmatmul dependent_launch 2>&1 | tail -4
    compute-sanitizer --tool racecheck $B/gpu_qmatmul dependent_launch 2>&1 | tail -4
  }
done 2>&1 | tee $O/alone.txt
