"""Timing shared by the torch baseline scripts, done the way `tilus bench` does it: CUDA events
around one launch, an L2 flush before each run, the median of the runs; and the copy bandwidth
the floors are measured against."""
import statistics

import torch


def make_flush(mode):
    """The L2 flush before each run: overwrite 256 MiB. After that alone L2 is full of dirty
    lines the timed kernel then writes back (`dirty`, Triton's `do_bench` rule); `clean` reads
    128 MiB of it back, so L2 holds clean lines (`tilus bench attention --l2`)."""
    buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    words = buf[: 128 << 20].view(torch.int32)

    def flush():
        buf.zero_()
        if mode == "clean":
            words.sum()

    return flush


def timed(fn, runs, flush):
    """Median microseconds of `runs` runs of `fn` after 3 warm-ups, `flush()` before each."""
    for _ in range(3):
        fn()
    times = []
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(runs):
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def copy_gbps(flush, runs):
    """Device copy bandwidth of 1 GiB, read + write, in GB/s."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), runs, flush)
    return 2 * src.numel() / us / 1e3
