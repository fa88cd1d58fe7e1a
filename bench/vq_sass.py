#!/usr/bin/env python3
"""Instructions and shared-memory bytes a weight of `tilus bench vq`'s picks, from the SASS (no GPU).

Usage, from the repository root (needs target/release/tilus and .ci/run's CUDA wheels in
.venv-cuda):
    python3 bench/vq_sass.py docs/benchmarks-issue18-h100-s68-vq.txt

For every row of a `tilus bench vq` log whose pick is the direct kernel (`cache` column
`x<copies> w<warps> t<product> s<stages> k/<split>`), `tilus emit vq` makes that kernel for the
row's format, shape and tokens, ptxas gives its registers and cuobjdump its SASS; the k loop
is the innermost backward branch holding an `HMMA` (bench/sass_loop.py). Each `HMMA.16816`
takes 128 weights a warp in the 16-token product (`t0`, the weight is B: 8 rows x 16 k) and
256 in the transposed ones (`t1`-`t3`, the weight is A). From the loop's count:
- issue us: the layer's warp instructions at 4 schedulers x 132 multiprocessors a cycle at
  1.98 GHz, once for every block of tokens;
- shared us: the loop's shared-memory bytes (`LDS` by width, `LDSM` by matrices, `STS`) at
  128 bytes a cycle a multiprocessor, with no bank conflict (a lower bound: conflicts and the
  code staging outside the loop add to it).
Rows whose pick is the look-up tables (`lut`) are listed without the loop's columns.
"""
import os, re, sys

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_loop import ISSUE_PER_S, innermost_loop, opcodes  # noqa: E402

SHARED_PER_S = 128 * 132 * 1.98e9
ROW = re.compile(r"^(\w+)\s+(\d+)\s+(\d+)x(\d+)\s+([\d.]+)\s+\S+\s+\d+\s+([\d.]+)%.*?"
                 r"\s((?:x\d+ w\d+ t\d s\d k/\d+(?: atomic)?)|lut [\dx]+)\s*$")


def shared_bytes(op, count):
    """Bytes a warp moves through the shared pipe for `count` of the SASS opcode `op`."""
    base = op.split(".")[0]
    if base == "LDSM":
        mats = 4 if ".x4" in op.lower() else 2 if ".x2" in op.lower() else 1
        return count * mats * 128
    if base in ("LDS", "STS"):
        width = re.search(r"\.(32|64|128)\b", op)
        return count * 32 * (int(width.group(1)) // 8 if width else 4)
    return 0


def main():
    print("| config | m | n x k | pick | registers | loop instructions | HMMAs | LDS / STS in the loop "
          "| thread instructions per weight | shared bytes per weight | issue us | shared us "
          "| time us | issue / time | shared / time | % floor |")
    print("|" + "---|" * 16)
    for line in open(sys.argv[1]):
        r = ROW.match(line.rstrip())
        if not r:
            continue
        fmt, m, n, k, t, floor, pick = r.groups()
        m, n, k, t = int(m), int(n), int(k), float(t)
        if pick.startswith("lut"):
            print(f"| {fmt} | {m} | {n} x {k} | `{pick}` | | | | | | | | | {t:.1f} | | | {floor}% |")
            continue
        reps, warps, product, stages, split = map(int, re.findall(r"\d+", pick)[:5])
        cfg = (f"FORMAT={fmt},N={n},K={k},M={m},WARPS={warps},SPLIT={split},STAGES={stages},"
               f"PRODUCT={product},REPLICAS={reps}")
        regs, loop = innermost_loop("vq", cfg, "HMMA")
        ops = opcodes(loop)
        hmma = sum(c for op, c in ops.items() if op.startswith("HMMA"))
        weights = hmma * (128 if product == 0 else 256)
        tokens = 4 if product == 3 else max(8 * product, 16 - 8 * product)
        passes = -(-m // tokens)
        per_weight = len(loop) * 32 / weights
        shared = sum(shared_bytes(op, c) for op, c in ops.items()) / weights
        issue_us = passes * n * k * per_weight / 32 / ISSUE_PER_S * 1e6
        shared_us = passes * n * k * shared / SHARED_PER_S * 1e6
        mem = ", ".join(f"{c} {op}" for op, c in sorted(ops.items())
                        if op.split(".")[0] in ("LDS", "LDSM", "STS"))
        print(f"| {fmt} | {m} | {n} x {k} | `{pick}` | {regs} | {len(loop)} | {hmma} | {mem} | "
              f"{per_weight:.2f} | {shared:.2f} | {issue_us:.1f} | {shared_us:.1f} | {t:.1f} | "
              f"{100 * issue_us / t:.0f}% | {100 * shared_us / t:.0f}% | {floor}% |")


if __name__ == "__main__":
    main()
