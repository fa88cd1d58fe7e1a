#!/usr/bin/env python3
"""Torch baselines for `tilus bench apt`: cuBLAS f16 (`a @ b`) and cuBLASLt int8
(`torch._int_mm`, int8 x int8 -> int32) for the same shapes and m values, timed the same way
(CUDA events around one launch, L2 flushed before each run, median of the runs) and printed in
the same table format: time, % of the copy-bandwidth floor of that format's own bytes (weights +
activations + output), TOPS (2 m n k over the time).

`torch._int_mm` needs m > 16 on CUDA: smaller m are padded to 32 rows and marked `*` (the time
of the padded product).

Usage: python3 bench/torch_apt.py [--shapes paper|llama70b|NxK,..] [--m 1,64,4096] [--runs 20]
"""
import argparse

import torch

from timing import copy_gbps, make_flush, timed

PAPER = [(1024, 1024), (2048, 2048), (4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
LLAMA70B = [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="paper")
    ap.add_argument("--m", default="1,64,4096")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    shapes = {"paper": PAPER, "llama70b": LLAMA70B}.get(args.shapes)
    if shapes is None:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    torch.manual_seed(0)
    flush = make_flush("clean")
    gbps = copy_gbps(flush, args.runs)
    print(f"torch {torch.__version__}; {torch.cuda.get_device_name()}; copy bandwidth {gbps:.0f} GB/s; L2 flushed")
    print(f"{'format':<6} {'m':>5} {'n x k':>12} {'time us':>10} {'%floor':>7} {'TOPS':>8}")
    for n, k in shapes:
        for m in ms:
            a = torch.randn(m, k, dtype=torch.float16, device="cuda")
            b = torch.randn(k, n, dtype=torch.float16, device="cuda")
            us = timed(lambda: a @ b, args.runs, flush)
            floor = 2 * (m * k + k * n + m * n) / gbps / 1e3
            tops = 2 * m * n * k / us / 1e6
            print(f"{'f16':<6} {m:>5} {f'{n}x{k}':>12} {us:>10.1f} {100 * floor / us:>6.1f}% {tops:>8.1f}")
            mp = max(m, 32) if m <= 16 else m
            ai = torch.randint(-128, 127, (mp, k), dtype=torch.int8, device="cuda")
            # _int_mm wants the second operand column-major.
            bi = torch.randint(-128, 127, (n, k), dtype=torch.int8, device="cuda").t()
            us = timed(lambda: torch._int_mm(ai, bi), args.runs, flush)
            floor = (mp * k + k * n + 4 * mp * n) / gbps / 1e3
            tops = 2 * m * n * k / us / 1e6
            mark = "*" if mp != m else ""
            print(f"{'int8':<6} {f'{m}{mark}':>5} {f'{n}x{k}':>12} {us:>10.1f} {100 * floor / us:>6.1f}% {tops:>8.1f}")


if __name__ == "__main__":
    main()
