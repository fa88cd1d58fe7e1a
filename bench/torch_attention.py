#!/usr/bin/env python3
"""Torch baseline for `tilus bench attention`: decode attention (one query token per sequence)
with torch's `scaled_dot_product_attention` over a contiguous KV cache (torch has no paged
SDPA), grouped-query heads through `enable_gqa`, timed the same way as the tilus table (CUDA
events around one step, L2 flushed before each run, median) and printed in the same columns:
time, GB/s (K, V, Q and O bytes), % of the copy-bandwidth floor measured here. Each SDPA
backend that accepts the shape is timed; the fastest is reported with its name.

Usage: python3 bench/torch_attention.py [--batch 1,16,64] [--lens 1024,8192] [--heads 64/8/128]
                                        [--dtype f16] [--runs 20] [--l2 clean]
       python3 bench/torch_attention.py --prefill issue   (causal prefill, TFLOP/s)
"""
import argparse
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from timing import copy_gbps, make_flush, timed

BACKENDS = [
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("math", SDPBackend.MATH),
]


def fastest(attend, runs, flush):
    """`(backend name, us)` of the fastest SDPA backend that runs `attend()`, or None."""
    best = None
    for name, backend in BACKENDS:
        def step():
            with sdpa_kernel([backend]):
                return attend()
        try:
            step()
            torch.cuda.synchronize()
        except RuntimeError:
            continue
        us = timed(step, runs, flush)
        if best is None or us < best[1]:
            best = (name, us)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,16,64")
    ap.add_argument("--lens", default="1024,8192,32768,131072")
    ap.add_argument("--heads", default="64/8/128")
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--l2", default="clean", choices=["clean", "dirty"])
    ap.add_argument("--prefill", default=None,
                    help="causal prefill on BxNxHQxHKVxD shapes (or `issue`) instead of decode")
    args = ap.parse_args()
    # Each backend that refuses a shape says why; the table says which one ran.
    warnings.filterwarnings("ignore")
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    hq, hkv, d = (int(v) for v in args.heads.split("/"))
    el = 2
    torch.manual_seed(0)
    flush = make_flush(args.l2)
    if args.prefill:
        prefill(args, dtype, flush)
        return
    gbps = copy_gbps(flush, args.runs)
    print(f"torch {torch.__version__} SDPA decode attention, {args.dtype}, contiguous cache, "
          f"L2 flushed {args.l2}; copy bandwidth {gbps:.0f} GB/s (1 GiB); %floor = bandwidth / that")
    print(f"{'batch':<6} {'kv_len':>8} {'heads q/kv/d':>13} {'backend':>10} {'time us':>10} "
          f"{'GB/s':>8} {'%floor':>7}")
    for b in (int(v) for v in args.batch.split(",")):
        for n in (int(v) for v in args.lens.split(",")):
            q = torch.randn(b, hq, 1, d, dtype=dtype, device="cuda")
            k = torch.randn(b, hkv, n, d, dtype=dtype, device="cuda")
            v = torch.randn_like(k)
            best = fastest(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                           args.runs, flush)
            nbytes = 2 * b * n * hkv * d * el + 2 * b * hq * d * el
            if best is None:
                print(f"{b:<6} {n:>8} {f'{hq}/{hkv}/{d}':>13} {'none':>10}")
                continue
            name, us = best
            bw = nbytes / us / 1e3
            print(f"{b:<6} {n:>8} {f'{hq}/{hkv}/{d}':>13} {name:>10} {us:>10.1f} {bw:>8.0f} "
                  f"{100 * bw / gbps:>6.1f}%")
            del q, k, v
            torch.cuda.empty_cache()


def prefill(args, dtype, flush):
    """Causal prefill with SDPA (`is_causal=True`), the fastest backend that takes the shape;
    TFLOP/s counts 2·n²·d per query head and sequence, as `tilus bench attention --prefill`."""
    shapes = args.prefill
    if shapes == "issue":
        shapes = "1x4096x32x8x128,1x8192x64x8x128"
    print(f"torch {torch.__version__} SDPA causal prefill attention, {args.dtype}, "
          f"L2 flushed {args.l2}")
    print(f"{'batch':<6} {'tokens':>7} {'heads q/kv/d':>13} {'backend':>10} {'time us':>10} "
          f"{'TFLOP/s':>9}")
    for shape in shapes.split(","):
        b, n, hq, hkv, d = (int(v) for v in shape.split("x"))
        q = torch.randn(b, hq, n, d, dtype=dtype, device="cuda")
        k = torch.randn(b, hkv, n, d, dtype=dtype, device="cuda")
        v = torch.randn_like(k)
        best = fastest(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              enable_gqa=True),
                       args.runs, flush)
        flops = 2.0 * b * n * n * d * hq
        name, us = best
        print(f"{b:<6} {n:>7} {f'{hq}/{hkv}/{d}':>13} {name:>10} {us:>10.1f} "
              f"{flops / us * 1e-6:>9.1f}")


if __name__ == "__main__":
    main()
