#!/usr/bin/env python3
"""What a kernel that only moves `S` bytes costs when timed the way `tilus bench` times
(CUDA events around one launch, L2 flushed clean before each run, median of the runs).

The memory floor `S / bandwidth` leaves out what every launch pays: the blocks' start, the
first loads' latency from a cold L2 and TLB, the tail. For a layer whose floor is a few
microseconds those costs are most of its time, so this prints an empty kernel and, per size,
next to the floor, a device copy of `S` bytes. (Torch's sum is no bandwidth-bound read: it took
27 us for 14.7 MB on an H200, so it is not a floor.)

Usage: python3 bench/read_floor.py [--mb 0.26,4.2,14.7,117] [--runs 50]
"""
import argparse

import torch

from timing import copy_gbps, make_flush, timed


def main():
    ap = argparse.ArgumentParser()
    # The W2A2 weights of 1024 x 1024, 4096 x 4096, 14336 x 4096 and 57344 x 8192.
    ap.add_argument("--mb", default="0.26,4.19,14.68,117.4")
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    flush = make_flush("clean")
    gbps = copy_gbps(flush, 20)
    print(f"torch {torch.__version__}; {torch.cuda.get_device_name()}; copy bandwidth {gbps:.0f} GB/s; L2 flushed clean")
    one = torch.zeros(1, dtype=torch.int32, device="cuda")
    empty = timed(lambda: one.add_(1), args.runs, flush)
    print(f"empty kernel (one element): {empty:.2f} us")
    print(f"{'MB':>8} {'floor us':>9} {'copy us':>9} {'%floor':>7}")
    for mb in (float(v) for v in args.mb.split(",")):
        words = int(mb * 1e6) // 4
        x = torch.randint(-(1 << 30), 1 << 30, (words,), dtype=torch.int32, device="cuda")
        y = torch.empty_like(x)
        floor = 4 * words / gbps / 1e3
        copy = timed(lambda: y.copy_(x), args.runs, flush)
        print(f"{mb:>8.2f} {floor:>9.2f} {copy:>9.2f} {100 * 2 * floor / copy:>6.1f}%")


if __name__ == "__main__":
    main()
