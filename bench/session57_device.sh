#!/usr/bin/env bash
# Session 57's device run. `tests`: the GPU tests of session 56's unrun changes (the grown
# scratch buffers of APT, VQ and the act-order permutation; qmatmul's in-place relayout) and of
# the one-token rule that now takes the integer-mma kernel's split tiles, with memcheck and
# racecheck on the new ones. `bench`: the one-token layers on their rule's path (the layer
# column: `M` for the integer-mma kernel, `P` for popc) beside both kernels, Llama-70B and the
# paper's shapes, and the integer-mma kernel's rule tiles for the widths the rule leaves to popc.
# Build here: bash ../shared/tools/device-pack.sh --test gpu_apt --test gpu --test gpu_vq
#   --test gpu_act_order --test gpu_linear --test gpu_qmatmul --test gpu_attention
#   --test gpu_attention_cq
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
  # The attention kernels' workspaces now grow through DeviceBuffer::grow_zeroed.
  for t in gpu_attention gpu_attention_cq; do
    echo "== $t" >> "$L"
    timeout 150 "$B/test-$t-test" --test-threads=1 2>&1 | summary >> "$L"
  done
  for tool in memcheck racecheck; do
    echo "== $tool" >> "$L"
    timeout 200 compute-sanitizer --tool $tool "$B/test-gpu_apt-test" imma_is_the_one_token \
      --test-threads=1 2>&1 | summary >> "$L"
    timeout 120 compute-sanitizer --tool $tool "$B/test-gpu-test" grow_zeroed \
      --test-threads=1 2>&1 | summary >> "$L"
    timeout 120 compute-sanitizer --tool $tool "$B/test-gpu_apt-test" forward_into \
      --test-threads=1 2>&1 | summary >> "$L"
  done
  ;;
bench)
  for shapes in llama70b paper; do
    "$B/bin-tilus" bench apt --m 1 --shapes $shapes --widths W2A2,W3A4 --no-cublas \
      --no-weight-only --runs 20 >> "$L" 2>&1
  done
  # A decode step of one Llama-70B block (forward_into back to back) against the layers alone.
  timeout 200 "$B/bin-tilus" bench apt --step --m 1 --shapes llama70b --widths W2A2,W3A4 \
    --runs 20 >> "$L" 2>&1
  timeout 120 "$B/bin-tilus" bench apt --m 1 --shapes llama70b --widths W1A2,W4A4 --popc-only \
    --no-cublas --no-weight-only --runs 20 >> "$L" 2>&1
  # The benches whose timing moved onto time_launches (a smoke run each).
  timeout 60 "$B/bin-tilus" bench rowwise --shapes 4096x1024 --runs 5 2>&1 | tail -12 >> "$L"
  for a in "" "--kv cq2" "--prefill 1x1024x32x8x128"; do
    # shellcheck disable=SC2086 # the flags split on purpose
    timeout 60 "$B/bin-tilus" bench attention --batch 1 --lens 1024 --runs 5 $a 2>&1 | tail -6 >> "$L"
  done
  ;;
esac
tail -150 "$L"
