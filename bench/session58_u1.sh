#!/usr/bin/env bash
# Session 58 (issue 16): one token of a 1-bit weight on the integer-mma gemv (groups of 256,
# the only groups it takes today) against the look-up kernel (groups of 128 and 256), on the
# four Llama-70B layers. Run on the device from the repository root with .dev/bin carried.
set -u
B=${B:-.dev/bin/bin-tilus}
OUT=${OUT:-/tmp}
log=$OUT/u1.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv | tee "$log"
for s in "57344 8192" "8192 28672" "10240 8192" "8192 8192"; do
  set -- $s
  echo "== u1 n=$1 k=$2 group 256 (imma first, then the look-up tiles)" | tee -a "$log"
  timeout 170 $B bench qmatmul --wdtype u1 --m 1 --n "$1" --k "$2" --group 256 --tune 10 --verbose 2>&1 | tee -a "$log"
  echo "== u1 n=$1 k=$2 group 128 (the look-up kernel today)" | tee -a "$log"
  timeout 120 $B bench qmatmul --wdtype u1 --m 1 --n "$1" --k "$2" --group 128 --tune 3 --verbose 2>&1 | tee -a "$log"
done
