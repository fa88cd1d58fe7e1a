#!/usr/bin/env bash
# Session 58, last device run: APT's one-token rule path with 4-bit weights through `forward`
# (session 57's rule, unrun there) with memcheck, then a longer tuning of 2-bit weights on
# 8192 x 28672 on an H100 (issue 16: 78-79% of the floor with the tuner's first three).
set -u
OUT=${OUT:-/tmp}
export TILUS_CACHE_DIR=/tmp/tilus-cache
CS=/usr/local/cuda/bin/compute-sanitizer
T=.dev/s58/gpu_apt
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
  echo "== gpu_apt_imma_is_the_one_token_path_of_its_rule"
  timeout 200 $T gpu_apt_imma_is_the_one_token_path_of_its_rule --exact --nocapture --test-threads 1
  echo "rc $?"
  echo "== memcheck"
  timeout 200 $CS --tool memcheck $T gpu_apt_imma_is_the_one_token_path_of_its_rule --exact --test-threads 1 2>&1 | tail -6
} 2>&1 | tee "$OUT/apt-rule.txt"
for w in u2 i2; do
  timeout 150 .dev/s58/tilus-new bench qmatmul --wdtype $w --m 1 --n 8192 --k 28672 --tune 24 --verbose 2>&1
done | tee "$OUT/down-2bit.txt"
