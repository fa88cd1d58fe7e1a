#!/usr/bin/env bash
# Session 58 (issue 16): several tokens a block on the integer mma with scale groups shorter
# than a tile. The GPU reference checks of both integer-mma gemvs, memcheck and racecheck on
# the several-token one, then 2 and 4 tokens of i4 in groups of 32 and u2 in groups of 64 with
# the binary before the change (tilus-old) and after it (tilus-new) in the same run.
set -u
OUT=${OUT:-/tmp}
T=.dev/s58/gpu_qmatmul
export TILUS_CACHE_DIR=/tmp/tilus-cache
CS=/usr/local/cuda/bin/compute-sanitizer
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  for t in gemv_imma_tokens_match_the_reference gemv_imma_matches_the_reference; do
    echo "== $t"
    timeout 200 $T $t --exact --nocapture --test-threads 1
    echo "rc $?"
  done
  echo "== memcheck"
  timeout 200 $CS --tool memcheck $T gemv_imma_tokens_match_the_reference --exact --test-threads 1 2>&1 | tail -6
  echo "== racecheck"
  timeout 200 $CS --tool racecheck $T gemv_imma_tokens_match_the_reference --exact --test-threads 1 2>&1 | tail -6
} 2>&1 | tee "$OUT/tokens-tests.txt"
log=$OUT/tokens-bench.txt
: > "$log"
for w in "i4 32" "u2 64"; do
  set -- $w
  for m in 2 4; do
    for b in old new; do
      echo "== $b $1 g$2 m=$m n=57344 k=8192" | tee -a "$log"
      timeout 100 .dev/s58/tilus-$b bench qmatmul --wdtype "$1" --m $m --group "$2" --tune 4 --verbose 2>&1 | tee -a "$log"
    done
  done
done
