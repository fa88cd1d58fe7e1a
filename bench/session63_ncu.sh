#!/usr/bin/env bash
# Session 63 (issue 18): where the paired VQ gemv's time goes (ncu), GPTVQ-2 57344 x 8192, one
# token, the paired product (the rule) and the unpaired one (`--product 1`). From the
# repository root on the device; binaries in $BIN (default .dev/s63c).
set -u
BIN=${BIN:-.dev/s63c}
OUT=${OUT:-/tmp}
log=$OUT/s63-ncu.txt
metrics=sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active,gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio
{
  for p in 3 1; do
    echo "== product $p"
    ncu --kernel-name regex:vq_gemv --launch-skip 3 --launch-count 1 --metrics $metrics \
      $BIN/tilus bench vq --configs gptvq2 --m 1 --shapes 57344x8192 --product $p \
      --no-elementwise --no-cublas --runs 3 2>&1 | grep -v "^==PROF==" | tail -30
  done
} > "$log" 2>&1
tail -3 "$log"
