#!/usr/bin/env bash
# What session 53 built without a GPU, to run on the next lent one (docs/perf-notes.md 74, 75).
# Build here first, with the binaries of the commit before it beside them for the comparison:
#   git worktree add /tmp/old 8a6ff94 && (cd /tmp/old && cargo build --release) \
#     && bash ../shared/tools/device-pack.sh --test gpu_apt \
#     && cp /tmp/old/target/release/tilus .dev/bin/bin-tilus-old
# then on the GPU machine, from the project root: bash bench/session53_device.sh
# Writes $OUT/s53.log (one log: only eight files come back).
set -u
B=.dev/bin
L=${OUT:-/tmp}/s53.log
export PATH=/usr/local/cuda/bin:$PATH
apt() { # binary shape width [extra flags]
  local bin=$1 shape=$2 w=$3; shift 3
  echo "== $bin apt $shape $w $*" >> "$L"
  "$B/$bin" bench apt --m 1 --shapes "$shape" --widths "$w" --popc-only --no-cublas \
    --no-weight-only --runs 10 "$@" 2>&1 | grep -E "^W|rror|popc tiles" >> "$L"
}
# 1. Correctness: the popc walk and the tuner on the GPU, then the sanitizers on the walk.
"$B/test-gpu_apt-test" popc --test-threads=1 2>&1 | grep -E "^test |test result|panicked" >> "$L"
compute-sanitizer --tool memcheck "$B/test-gpu_apt-test" gpu_apt_popc_walks_row_groups \
  --test-threads=1 2>&1 | tail -3 >> "$L"
compute-sanitizer --tool racecheck "$B/test-gpu_apt-test" gpu_apt_popc_walks_row_groups \
  --test-threads=1 2>&1 | tail -3 >> "$L"
# 2. The token's copy (note 74): old and new interleaved, the rule's tiles.
for shape in 57344x8192 8192x28672 10240x8192 8192x8192; do
  for w in W2A2 W3A4; do
    apt bin-tilus-old "$shape" "$w"
    apt bin-tilus "$shape" "$w"
  done
done
# W3A4's register prefetch is still sunk below the token by ptxas: a ring of two pins it.
apt bin-tilus 57344x8192 W3A4 --popc-tiles 16x2x4x1x2x2
apt bin-tilus 57344x8192 W3A4 --popc-tiles 16x2x4x1x3x2
# 3. The tuner per layer (the winner and the rule are printed).
apt bin-tilus llama70b W2A2,W3A4 --tune
# 4. The look-up kernel's first weight tile (note 75): u1, old and new.
for bin in bin-tilus-old bin-tilus; do
  echo "== $bin qmatmul u1" >> "$L"
  "$B/$bin" bench qmatmul --wdtype u1 --m 1 --n 57344 --k 8192 \
    --config METHOD=lut,BN=896,SPLIT_K=4,BLOCKS_PER_SM=2 2>&1 | tail -4 >> "$L"
done
tail -80 "$L"
