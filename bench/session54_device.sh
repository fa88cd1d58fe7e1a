#!/usr/bin/env bash
# The device run for what sessions 53 and 54 built without a GPU (docs/perf-notes.md 74-76):
# the popc kernel's token copy (53) and balanced blocks (54), the popc tuner, the look-up
# kernel's first weight tile. Three builds side by side, interleaved: 8a6ff94 (before 53),
# 69007e0 (53) and this one. Build here first:
#   git worktree add /tmp/old 8a6ff94 && (cd /tmp/old && cargo build --release)
#   git worktree add /tmp/s53 69007e0 && (cd /tmp/s53 && cargo build --release)
#   bash ../shared/tools/device-pack.sh --test gpu_apt && rm -f .dev/bin/example-*
#   cp /tmp/old/target/release/tilus .dev/bin/bin-tilus-old
#   cp /tmp/s53/target/release/tilus .dev/bin/bin-tilus-s53
# then on the GPU machine, from the project root: bash bench/session54_device.sh [tune]
# Writes $OUT/s54.log (one log: only eight files come back). With `tune`, only the tuner runs.
set -u
B=.dev/bin
L=${OUT:-/tmp}/s54.log
export PATH=/usr/local/cuda/bin:$PATH
apt() { # binary shapes widths [extra flags]
  local bin=$1 shape=$2 w=$3; shift 3
  echo "== $bin apt $shape $w $*" >> "$L"
  "$B/$bin" bench apt --m 1 --shapes "$shape" --widths "$w" --popc-only --no-cublas \
    --no-weight-only --runs 20 "$@" 2>&1 | grep -E "^W|^\||rror|popc tiles|copy" >> "$L"
}
if [ "${1:-}" = tune ]; then
  apt bin-tilus llama70b W2A2,W3A4 --tune
  tail -60 "$L"
  exit
fi
# 1. Correctness: the popc tests (the tuner's too) on the GPU, the sanitizers on the walk.
"$B/test-gpu_apt-test" popc --test-threads=1 2>&1 | grep -E "^test |test result|panicked" >> "$L"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool "$B/test-gpu_apt-test" gpu_apt_popc_walks_row_groups \
    --test-threads=1 2>&1 | tail -3 >> "$L"
done
# 2. Before 53, 53 and 54, interleaved twice: the rule's tiles on the Llama-70B layers.
for pass in 1 2; do
  for bin in bin-tilus-old bin-tilus-s53 bin-tilus; do
    apt $bin llama70b W2A2,W3A4
  done
done
# W2A2's ring deeper than the rule's 3 stages (more bytes in flight a multiprocessor).
apt bin-tilus 57344x8192 W2A2 --popc-tiles 8x4x4x1x4x2,8x4x4x1x5x2
# W3A4's register prefetch is sunk below the token by ptxas: a ring of two pins it.
apt bin-tilus 57344x8192 W3A4 --popc-tiles 16x2x4x1x2x2
apt bin-tilus 57344x8192 W3A4 --popc-tiles 16x2x4x1x3x2
# 3. The look-up kernel's first weight tile (note 75): u1, before 53 and after, twice.
for pass in 1 2; do
  for bin in bin-tilus-old bin-tilus; do
    echo "== $bin qmatmul u1" >> "$L"
    "$B/$bin" bench qmatmul --wdtype u1 --m 1 --n 57344 --k 8192 \
      --config METHOD=lut,BN=896,SPLIT_K=4,BLOCKS_PER_SM=2 2>&1 | tail -4 >> "$L"
  done
done
tail -120 "$L"
