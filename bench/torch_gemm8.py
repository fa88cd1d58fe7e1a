#!/usr/bin/env python3
"""Torch baselines for `tilus bench dense --dtype i8|e4m3|e5m2`: cuBLAS f16 (`a @ b.t()`),
cuBLASLt int8 (`torch._int_mm`, int8 x int8 -> int32) and fp8 (`torch._scaled_mm`, e4m3 x e4m3
-> f16 with unit scales) on the same `c = a · bᵀ` shapes, timed the same way (CUDA events around
one launch, L2 flushed before each run, median of the runs) and printed in the same columns:
time and tera-operations per second (2 m n k over the time).

Usage: python3 bench/torch_gemm8.py [--shapes MxNxK,..] [--runs 10]
"""
import argparse

import torch

from timing import make_flush, timed

DEFAULT = [(8192, 8192, 8192), (8192, 10240, 8192), (8192, 57344, 8192), (8192, 8192, 28672),
           (4096, 4096, 4096)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="default")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    shapes = DEFAULT if args.shapes == "default" else [
        tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    torch.manual_seed(0)
    flush = make_flush("clean")
    print(f"torch {torch.__version__}; {torch.cuda.get_device_name()}; L2 flushed")
    print(f"{'dtype':<5} {'m x n x k':>22} {'us':>10} {'TOPS':>8}  op")
    one = torch.ones((), device="cuda")
    for m, n, k in shapes:
        rows = []
        a = torch.randn(m, k, dtype=torch.float16, device="cuda")
        b = torch.randn(n, k, dtype=torch.float16, device="cuda")
        rows.append(("f16", timed(lambda: a @ b.t(), args.runs, flush), "a @ b.t()"))
        del a, b
        ai = torch.randint(-128, 127, (m, k), dtype=torch.int8, device="cuda")
        bi = torch.randint(-128, 127, (n, k), dtype=torch.int8, device="cuda")
        rows.append(("i8", timed(lambda: torch._int_mm(ai, bi.t()), args.runs, flush),
                     "torch._int_mm"))
        del ai, bi
        af = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        bf = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        rows.append(("e4m3", timed(lambda: torch._scaled_mm(af, bf.t(), scale_a=one, scale_b=one,
                                                            out_dtype=torch.float16),
                                   args.runs, flush), "torch._scaled_mm"))
        del af, bf
        for name, us, op in rows:
            tops = 2 * m * n * k / us / 1e6
            print(f"{name:<5} {f'{m}x{n}x{k}':>22} {us:>10.1f} {tops:>8.0f}  {op}")


if __name__ == "__main__":
    main()
