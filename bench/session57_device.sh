#!/usr/bin/env bash
# Session 57's device run. `tests`: the GPU tests of session 56's unrun changes (the grown
# scratch buffers of APT, VQ and the act-order permutation; qmatmul's in-place relayout) and of
# the one-token rule that now takes the integer-mma kernel's split tiles, with memcheck and
# racecheck on the new ones. `bench`: the one-token layers on their rule's path (the layer
# column: `M` for the integer-mma kernel, `P` for popc) beside both kernels, Llama-70B and the
# paper's shapes, and the integer-mma kernel's rule tiles for the widths the rule leaves to popc.
# Build here: bash ../shared/tools/device-pack.sh --test gpu_apt --test gpu --test gpu_vq
#   --test gpu_act_order --test gpu_linear --test gpu_qmatmul
# then on the GPU machine: bash bench/session57_device.sh tests gpu_apt gpu ... | sanitize | bench.
# Writes $OUT/<mode>.log.
set -u
B=.dev/bin
mode=${1:-tests}
L=${OUT:-/tmp}/$mode.log
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$L"
summary() { grep -E "^test |test result|panicked|FAILED|SKIPPED|ERROR SUMMARY|RACECHECK SUMMARY|forward on"; }
case $mode in
tests)
  shift
  for t in "$@"; do
    echo "== $t" >> "$L"
    SECONDS=0
    timeout 240 "$B/test-$t-test" --test-threads=1 --nocapture 2>&1 | summary >> "$L"
    echo "rc=${PIPESTATUS[0]} ${SECONDS}s" >> "$L"
  done
  ;;
sanitize)
  for tool in memcheck racecheck; do
    echo "== $tool" >> "$L"
    timeout 200 compute-sanitizer --tool $tool "$B/test-gpu_apt-test" imma_is_the_one_token \
      --test-threads=1 2>&1 | summary >> "$L"
    timeout 120 compute-sanitizer --tool $tool "$B/test-gpu-test" grow_zeroed \
      --test-threads=1 2>&1 | summary >> "$L"
  done
  ;;
bench)
  for shapes in llama70b paper; do
    "$B/bin-tilus" bench apt --m 1 --shapes $shapes --widths W2A2,W3A4 --no-cublas \
      --no-weight-only --runs 20 >> "$L" 2>&1
  done
  "$B/bin-tilus" bench apt --m 1 --shapes llama70b --widths W1A2,W4A4,W2A8 --popc-only \
    --no-cublas --no-weight-only --runs 20 >> "$L" 2>&1
  ;;
esac
tail -150 "$L"
