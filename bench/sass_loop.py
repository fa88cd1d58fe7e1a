#!/usr/bin/env python3
"""Instructions per weight, registers and blocks of a sweep's picks, from the SASS (no GPU).

Usage, from the repository root (needs target/release/tilus and .ci/run's CUDA wheels in
.venv-cuda):
    python3 bench/sass_loop.py docs/benchmarks-issue16-h100-s68-m1.csv [--missed]

For every row of a `tilus bench sweep` CSV (with --missed: only those under issue 16's target
on their layer, 85% of the floor on 57344 x 8192 and 8192 x 28672, 80% elsewhere), `tilus emit
qmatmul --ptx sm_90a` makes the pick's kernel, ptxas gives its registers and cuobjdump its SASS.
The k loop is the innermost backward branch whose body holds the kernel's MMA. Its weights a
warp: the tile's `bn x bk` (x 2 with two k tiles a stage) over the warps, times the unroll that
the MMA count shows (each IMMA.16832 of the integer gemv takes 512 weights a warp, each HGMMA
of the warpgroup gemv 256 a warp (64 x 16 a warpgroup), each IGMMA 512, each HMMA.16816 256
over 8 tokens in the gemv, where the weight is A, and 128 over 16 tokens in the fused kernel,
where it is B). Thread
instructions per weight = loop instructions x 32 / those weights. The body counts every
instruction of the loop, branches not taken included, so it bounds the executed count from
above. The issue time is what the layer's warp instructions need at 4 schedulers x 132
multiprocessors a cycle at 1.98 GHz, counting the weights once for every block of `bm` tokens
(each dequantizes them again): time the kernel cannot be under if the loop is all it runs.
Not for the look-up (`lut`) kernel (its loop is table building and reads, not MMAs; printed
without the loop's columns) nor dequantize-then-cuBLAS picks (left out).
"""
import collections, csv, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".venv-cuda/nvidia/cu13/bin")
TILUS = os.path.join(ROOT, "target/release/tilus")
ISSUE_PER_S = 4 * 132 * 1.98e9
os.environ.setdefault("TILUS_PYTHON_SITE", os.path.join(ROOT, ".venv-cuda"))
METHODS = {"gemv-imma": "gemv_imma", "gemv": "gemv", "gemv-wgmma": "gemv_wgmma",
           "gemv-igmma": "gemv_igmma"}
# The MMA whose count gives the loop's weights, and the weights each takes a warp.
MMA = {"gemv_imma": ("IMMA", 512), "gemv_wgmma": ("HGMMA", 256), "gemv_igmma": ("IGMMA", 512),
       "gemv": ("HMMA", 256), "fused": ("HMMA", 128)}


def parse(config, wdtype, adtype):
    """The sweep's config string as `tilus emit` keys, and the k tiles a ring stage."""
    words = config.split()
    tiles = 2 if words[-1] == "kt2" else 1
    method = words[-2] if tiles == 2 else words[-1]
    keys = {"WDTYPE": wdtype, "ADTYPE": adtype, "GROUP": "128",
            "METHOD": METHODS.get(method, "fused")}
    names = [("bm", "BM"), ("bn", "BN"), ("bk", "BK"), ("w", "WARPS"), ("sk", "SPLIT_K"),
             ("stream", "STREAM_K"), ("s", "STAGES"), ("o", "BLOCKS_PER_SM")]
    for word in words:
        for prefix, key in names:
            m = re.fullmatch(prefix + r"(\d+)", word)
            if m and key not in keys:
                keys[key] = m.group(1)
                break
    if tiles == 2:
        keys["STAGE_TILES"] = "2"
    return keys, tiles


def innermost_loop(kernel, config, mma, tmp="/tmp/tilus-sass"):
    """Registers and the SASS lines of the innermost backward branch whose body holds `mma`,
    for `tilus emit <kernel> --config <config>` compiled for sm_90a."""
    os.makedirs(tmp, exist_ok=True)
    ptx = subprocess.run([TILUS, "emit", kernel, "--config", config, "--ptx", "sm_90a"],
                         capture_output=True, text=True, check=True).stdout
    with open(f"{tmp}/k.ptx", "w") as f:
        f.write(ptx)
    info = subprocess.run([f"{BIN}/ptxas", "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o",
                           f"{tmp}/k.cubin"], capture_output=True, text=True, check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", info).group(1))
    sass = subprocess.run([f"{BIN}/cuobjdump", "-sass", f"{tmp}/k.cubin"], capture_output=True,
                          text=True, check=True).stdout
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l) for l in sass.splitlines()) if m]
    at = {a: i for i, (a, _) in enumerate(ins)}
    loop = None
    for i, (a, text) in enumerate(ins):
        m = re.search(r"BRA.*?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = [x for _, x in ins[at[int(m.group(1), 16)]:i + 1]]
            if any(re.search(rf"\b{mma}\b", x) for x in body) and (loop is None
                                                                   or len(body) < len(loop)):
                loop = body
    return regs, loop or []


def opcodes(loop):
    """The loop's opcodes with their modifiers (`LDS.64`), guards dropped, counted."""
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] for x in loop)


def k_loop(keys):
    arg = ",".join(f"{k}={v}" for k, v in keys.items())
    mma = MMA[keys["METHOD"]][0]
    regs, loop = innermost_loop("qmatmul", arg, mma)
    ops = collections.Counter(op.split(".")[0] for op in opcodes(loop).elements())
    return regs, len(loop), ops[mma]


def main():
    path, missed = sys.argv[1], "--missed" in sys.argv
    adtype = "bf16" if "bf16" in path else "f16"
    print("| n x k | m | wdtype | pick | registers | loop instructions | MMAs | thread "
          "instructions per weight | blocks | issue us | issue / time | time us | GB/s | "
          "% floor | a same-size copy / time |")
    print("|" + "---|" * 15)
    for r in csv.DictReader(open(path)):
        if r["config"].endswith("dequant+gemm"):
            continue  # cuBLAS's loop, not ours
        n, k = int(r["n"]), int(r["k"])
        target = 85.0 if (n, k) in [(57344, 8192), (8192, 28672)] else 80.0
        if missed and float(r["percent_floor"]) >= target:
            continue
        t = float(r["time_us"])
        tail = (f"{t:.1f} | {float(r['gb_per_s']):.0f} | {float(r['percent_floor']):.1f}% | "
                f"{100 * float(r['copy_us']) / t:.0f}% |")
        if r["config"].endswith("lut"):
            print(f"| {n} x {k} | {r['m']} | {r['wdtype']} | `{r['config']}` | | | | | | | | "
                  + tail)
            continue
        keys, tiles = parse(r["config"], r["wdtype"], adtype)
        regs, body, mmas = k_loop(keys)
        per_mma = MMA[keys["METHOD"]][1]
        # The mma.sync kernels' MMAs take 8 (gemv) or 16 (fused) tokens each: more tokens
        # than that split a weight fragment over several MMAs.
        if keys["METHOD"] == "gemv":
            per_mma //= -(-int(keys["BM"]) // 8)
        elif keys["METHOD"] == "fused":
            per_mma //= -(-int(keys["BM"]) // 16)
        per_stage = int(keys["BN"]) * int(keys["BK"]) * tiles // int(keys["WARPS"])
        unroll = max(1, round(mmas * per_mma / per_stage))
        per_weight = body * 32 / (per_stage * unroll)
        # Every block of tokens dequantizes the weights again.
        m_tiles = -(-int(r["m"]) // int(keys["BM"]))
        issue_us = m_tiles * n * k * per_weight / 32 / ISSUE_PER_S * 1e6
        workers = keys.get("STREAM_K")
        blocks = (f"{workers} workers" if workers else
                  str(-(-int(r["m"]) // int(keys["BM"])) * -(-n // int(keys["BN"]))
                      * int(keys.get("SPLIT_K", 1))))
        print(f"| {n} x {k} | {r['m']} | {r['wdtype']} | `{r['config']}` | {regs} | {body} | "
              f"{mmas} | {per_weight:.2f} | {blocks} | {issue_us:.1f} | {100 * issue_us / t:.0f}% | "
              + tail)


if __name__ == "__main__":
    main()
