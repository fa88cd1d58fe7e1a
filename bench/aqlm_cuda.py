#!/usr/bin/env python3
"""AQLM's own CUDA kernels as a baseline for `tilus bench vq` (issue 18): `code1x16_matmat`
(one codebook of 65536 entries, vectors of 8: 2 bits a value) and `code2x8_matmat` (two
codebooks of 256 entries: 2 bits a value), the formats AQLM ships CUDA kernels for (its 2x12
"AQLM-3" has none). Random codes, codebooks and per-channel scales; each kernel checked
against an f32 product with the dequantized weight before it is timed; cuBLAS f16 (`x @ Wᵀ`)
in the same run. Timed as `tilus bench` times (CUDA events around one call, L2 flushed clean
before each run, median), printed in the same table format: time, % of the floor (codes + f16
codebooks and scales + f16 activations and output, over the copy bandwidth measured here) and
the ratio to cuBLAS f16.

AQLM's kernels are matrix-vector products: `m > 1` runs one launch per token (its `matmat`).

Needs the `aqlm` wheel (1.1.7, pure Python: its CUDA sources compile at first import through
`torch.utils.cpp_extension`, so nvcc and ninja must be found). Only its kernel module is loaded
(by path), so `transformers` is not needed:

    pip install --no-deps --target /tmp/aqlm aqlm==1.1.7 ninja
    PATH=/tmp/aqlm/bin:$PATH python3 bench/aqlm_cuda.py --site /tmp/aqlm [--shapes llama70b] [--m 1,16]
"""
import argparse
import importlib.util
import os
import sys

import torch

from timing import copy_gbps, make_flush, timed

LLAMA70B = [(57344, 8192), (8192, 28672), (8192, 8192), (10240, 8192)]
# name: (codebooks, entries, code dtype)
FORMATS = {"1x16": (1, 65536, torch.int16), "2x8": (2, 256, torch.int8)}


def load_kernels(site):
    """Imports `aqlm/inference_kernels/cuda_kernel.py` alone (it compiles the extension and
    registers `torch.ops.aqlm.*`), not the package, whose `__init__` needs transformers."""
    path = os.path.join(site, "aqlm", "inference_kernels", "cuda_kernel.py")
    spec = importlib.util.spec_from_file_location("aqlm_cuda_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def make_layer(fmt, n, k):
    """Codes `[n, k / 8, C]` (AQLM's layout, as its int type: read modulo the entries),
    codebooks `[C, entries, 1, 8]` f16, scales `[n, 1, 1, 1]` f16."""
    c, entries, dtype = FORMATS[fmt]
    raw = torch.randint(0, entries, (n, k // 8, c), device="cuda", dtype=torch.int32)
    # The kernels read the codes' bits unsigned: store them as two's complement.
    codes = (raw - entries * (raw >= entries // 2)).to(dtype)
    books = (torch.randn(c, entries, 1, 8, device="cuda") / 4).half()
    scales = (torch.rand(n, 1, 1, 1, device="cuda") + 0.5).half()
    return raw, codes, books, scales


def dequantize(raw, books, scales):
    """W `[n, k]` in f32: Σ_c books[c, raw[:, :, c]] scaled per row."""
    n, kv, c = raw.shape
    w = torch.zeros(n, kv, 8, device="cuda")
    for i in range(c):
        w += books[i, :, 0, :].float()[raw[:, :, i].long()]
    return w.reshape(n, kv * 8) * scales.reshape(n, 1).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", required=True, help="where the aqlm wheel was installed")
    ap.add_argument("--shapes", default="llama70b")
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--formats", default="2x8,1x16")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    shapes = LLAMA70B if args.shapes == "llama70b" else [
        tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")
    ]
    ms = [int(v) for v in args.m.split(",")]
    formats = args.formats.split(",")
    for f in formats:
        if f not in FORMATS:
            sys.exit(f"--formats: unknown format {f!r} (known: {', '.join(FORMATS)})")
    load_kernels(args.site)
    ops = {"1x16": torch.ops.aqlm.code1x16_matmat, "2x8": torch.ops.aqlm.code2x8_matmat}
    torch.manual_seed(0)
    flush = make_flush("clean")
    gbps = copy_gbps(flush, args.runs)
    print(f"aqlm CUDA kernels; torch {torch.__version__}; {torch.cuda.get_device_name()}; "
          f"copy bandwidth {gbps:.0f} GB/s; L2 flushed")
    print(f"{'format':<8} {'m':>3} {'n x k':>12} {'us':>9} {'%floor':>7} {'rel err':>8} "
          f"{'cuBLAS us':>10} {'vs f16':>7}")
    for n, k in shapes:
        wf = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for fmt in formats:
            raw, codes, books, scales = make_layer(fmt, n, k)
            w = dequantize(raw, books, scales)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                y = ops[fmt](x, codes, books, scales, None)
                ref = x.float() @ w.t()
                err = ((y.float() - ref).norm() / ref.norm()).item()
                us = timed(lambda: ops[fmt](x, codes, books, scales, None), args.runs, flush)
                f16 = timed(lambda: x @ wf.t(), args.runs, flush)
                nbytes = codes.numel() * codes.element_size() + books.numel() * 2 + n * 2
                nbytes += 2 * m * (k + n)
                floor = nbytes / gbps / 1e3
                flag = "" if err < 1e-2 else "  WRONG"
                print(f"{'aqlm' + fmt:<8} {m:>3} {f'{n}x{k}':>12} {us:>9.1f} "
                      f"{100 * floor / us:>6.1f}% {err:>8.1e} {f16:>10.1f} {f16 / us:>6.2f}x{flag}")


if __name__ == "__main__":
    main()
