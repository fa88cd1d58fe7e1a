#!/usr/bin/env python3
"""Torch baselines for `tilus bench rowwise`: softmax, LayerNorm, RMSNorm (with and without a
residual add), rotary embedding, SiLU-and-mul and argmax, f16 on the GPU, timed the same way
(CUDA events around one launch, L2 flushed before each run, median of the runs) and printed as
the same table: time, GB/s (bytes read + written), % of the copy-bandwidth floor measured here.

Usage: python3 bench/torch_rowwise.py [--shapes 8192x8192,4096x1024] [--runs 50]
"""
import argparse

import torch
import torch.nn.functional as F

from timing import copy_gbps, make_flush, timed


def rotary(x, cos, sin):
    # NeoX style: the two halves of each head rotate together.
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8192x8192,4096x1024")
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    # The memset-only flush of the published row-wise tables (see bench/timing.py).
    flush = make_flush("dirty")
    gbps = copy_gbps(flush, args.runs)
    print(f"torch {torch.__version__}; copy bandwidth {gbps:.0f} GB/s")
    print(f"{'kernel':<14} {'shape':>11} {'time us':>9} {'GB/s':>7} {'%floor':>7} {'copy us':>8} {'%copy':>7}")
    h = torch.float16
    for shape in args.shapes.split(","):
        rows, n = (int(v) for v in shape.split("x"))
        x = torch.randn(rows, n, dtype=h, device="cuda")
        res = torch.randn_like(x)
        w = torch.randn(n, dtype=h, device="cuda")
        bias = torch.randn(n, dtype=h, device="cuda")
        el = 2  # bytes per f16
        xy = 2 * rows * n * el
        cases = [
            ("softmax", lambda: torch.softmax(x, dim=-1), xy),
            ("layernorm", lambda: F.layer_norm(x, (n,), w, bias, 1e-5), xy + 2 * n * el),
            ("rmsnorm", lambda: F.rms_norm(x, (n,), w, 1e-6), xy + n * el),
            # vLLM's fused_add_rms_norm semantics: r = x + res (written back), y = rmsnorm(r).
            ("add_rmsnorm", lambda: F.rms_norm(x + res, (n,), w, 1e-6), 2 * xy + n * el),
            ("argmax", lambda: torch.argmax(x, dim=-1), rows * n * el + rows * 8),
        ]
        half = n // 2
        gate_up = x
        cases.append(("silu_and_mul", lambda: F.silu(gate_up[:, :half]) * gate_up[:, half:],
                      rows * n * el + rows * half * el))
        head = 128
        if n % head == 0:
            q = x.view(rows, n // head, head)
            cos = torch.randn(rows, 1, head // 2, dtype=h, device="cuda")
            sin = torch.randn(rows, 1, head // 2, dtype=h, device="cuda")
            cases.append(("rotary", lambda: rotary(q, cos, sin), xy + 2 * rows * head // 2 * el))
        for name, fn, nbytes in cases:
            us = timed(fn, args.runs, flush)
            bw = nbytes / us / 1e3
            # A copy moving the same bytes (half read, half written): the floor at this size.
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            cu = timed(lambda: dst.copy_(src), 20, flush)
            print(f"{name:<14} {shape:>11} {us:>9.1f} {bw:>7.0f} {100 * bw / gbps:>6.1f}% {cu:>8.1f} {100 * cu / us:>6.1f}%")


if __name__ == "__main__":
    main()
