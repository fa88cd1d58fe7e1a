#!/usr/bin/env python3
"""An independent writer of GPTQ and AWQ checkpoints for tests/checkpoint_import.rs.

Usage: write_checkpoints.py OUT_DIR

Quantizes random f32 weights (fixed seeds) the way GPTQ and AWQ checkpoints store them, packs
them as AutoGPTQ's and AutoAWQ's packers do (written here from the format descriptions), and
writes next to each checkpoint `NAME.ref.safetensors` holding, per layer prefix P, `P.weight`:
the writer's own dequantization in float64, `[k, n]` (in_features x out_features, the
checkpoint's row order), computed with numpy from ints unpacked back out of the packed words.
`manifest.json` lists every file and what the importer must find in it.

Only numpy and safetensors are needed.
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

# (prefix, k, n) of the layers in every file: two shapes, both fitting every bit width
# (3-bit needs k and n multiples of 32).
LAYERS = [
    ("model.layers.0.self_attn.q_proj", 256, 64),
    ("model.layers.0.mlp.down_proj", 128, 96),
]

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def f16_round(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16)


# ---------------------------------------------------------------- GPTQ packing (AutoGPTQ)


def gptq_pack_rows(intweight, bits):
    """Pack uint32 `intweight[k, n]` along k into int32 `[k * bits / 32, n]`, as AutoGPTQ's
    `QuantLinear.pack` does (3-bit: 32 values over 3 words, explicit boundary values)."""
    intweight = intweight.astype(np.uint64)
    k, n = intweight.shape
    out = np.zeros((k * bits // 32, n), dtype=np.uint64)
    i = 0
    row = 0
    while row < out.shape[0]:
        if bits in (2, 4, 8):
            for j in range(i, i + 32 // bits):
                out[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        elif bits == 3:
            for j in range(i, i + 10):
                out[row] |= intweight[j] << (3 * (j - i))
            i += 10
            out[row] |= intweight[i] << 30
            row += 1
            out[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                out[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            out[row] |= intweight[i] << 31
            row += 1
            out[row] |= (intweight[i] >> 1) & 0x3
            i += 1
            for j in range(i, i + 10):
                out[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
        else:
            raise ValueError(bits)
    return (out & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def gptq_pack_cols(intzeros, bits):
    """Pack `[groups, n]` along n into int32 `[groups, n * bits / 32]` (AutoGPTQ's qzeros)."""
    return np.ascontiguousarray(gptq_pack_rows(np.ascontiguousarray(intzeros.T), bits).T)


def unpack_stream_rows(words, bits, count):
    """Read back `count` values per column of int32 `words` packed along rows as one bit
    stream (value i at bits [i*bits, (i+1)*bits) of the concatenated words)."""
    w = words.view(np.uint32).astype(np.uint64)
    out = np.zeros((count, w.shape[1]), dtype=np.uint64)
    mask = (1 << bits) - 1
    for i in range(count):
        bit = i * bits
        r, off = divmod(bit, 32)
        v = w[r] >> np.uint64(off)
        if off + bits > 32:
            v |= w[r + 1] << np.uint64(32 - off)
        out[i] = v & np.uint64(mask)
    return out.astype(np.int64)


def gptq_quantize(w, bits, group, sym, act_order, rng):
    """GPTQ-style round-to-nearest quantization of w[k, n] (no Hessian: the format is what is
    tested). Returns the tensors of one layer and the g_idx used."""
    k, n = w.shape
    maxq = (1 << bits) - 1
    groups = k // group
    if act_order:
        # GPTQ's act-order: rows are visited in a permuted order and g_idx[row] is the group
        # of its position in that order.
        perm = rng.permutation(k)
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[perm] = np.arange(k, dtype=np.int32) // group
    else:
        g_idx = (np.arange(k) // group).astype(np.int32)
    scales = np.zeros((groups, n), dtype=np.float16)
    zeros = np.zeros((groups, n), dtype=np.int64)
    for g in range(groups):
        rows = w[g_idx == g]
        lo = np.minimum(rows.min(axis=0), 0).astype(np.float64)
        hi = np.maximum(rows.max(axis=0), 0).astype(np.float64)
        if sym:
            amax = np.maximum(np.abs(lo), hi)
            s = f16_round(2 * amax / maxq)
            z = np.full(n, (maxq + 1) // 2)
        else:
            s = f16_round((hi - lo) / maxq)
            # v1 stores zero - 1: keep zero >= 1 so the stored value is not negative.
            z = np.clip(np.round(-lo / s.astype(np.float64)), 1, maxq).astype(np.int64)
        scales[g] = s
        zeros[g] = z
    s_rows = scales[g_idx].astype(np.float64)
    z_rows = zeros[g_idx].astype(np.float64)
    q = np.clip(np.round(w.astype(np.float64) / s_rows + z_rows), 0, maxq).astype(np.uint32)
    return q, scales, zeros, g_idx


def write_gptq(out_dir, name, bits, group_of, sym, act_order, v2, seed):
    rng = np.random.default_rng(seed)
    tensors, refs, layers = {}, {}, []
    for prefix, k, n in LAYERS:
        group = group_of(k)
        w = rng.standard_normal((k, n)).astype(np.float32)
        q, scales, zeros, g_idx = gptq_quantize(w, bits, group, sym, act_order, rng)
        stored = zeros if v2 else zeros - 1
        qweight = gptq_pack_rows(q, bits)
        qzeros = gptq_pack_cols(stored.astype(np.uint32), bits)
        tensors[prefix + ".qweight"] = qweight
        tensors[prefix + ".qzeros"] = qzeros
        tensors[prefix + ".scales"] = scales
        tensors[prefix + ".g_idx"] = g_idx
        tensors[prefix + ".bias"] = rng.standard_normal(n).astype(np.float16)
        # The reference dequantization, from ints read back out of the packed words.
        q_back = unpack_stream_rows(qweight, bits, k)
        z_back = unpack_stream_rows(np.ascontiguousarray(qzeros.T), bits, n).T
        assert (q_back == q).all() and (z_back == stored).all(), "packer round trip"
        z_eff = z_back + (0 if v2 else 1)
        deq = (q_back[:, :].astype(np.float64) - z_eff[g_idx].astype(np.float64)) * scales[
            g_idx
        ].astype(np.float64)
        refs[prefix + ".weight"] = deq
        layers.append(
            {
                "prefix": prefix,
                "k": k,
                "n": n,
                "group": group,
                "act_order": bool(act_order),
            }
        )
    meta = {"checkpoint_format": "gptq_v2" if v2 else "gptq"}
    save_file(tensors, os.path.join(out_dir, name + ".safetensors"), metadata=meta)
    save_file(refs, os.path.join(out_dir, name + ".ref.safetensors"))
    return {"file": name, "format": "gptq", "bits": bits, "layers": layers}


# ---------------------------------------------------------------- AWQ packing (AutoAWQ GEMM)


def awq_pack(intweight):
    """Pack uint32 `[rows, n]` along n into int32 `[rows, n / 8]`: nibble i of word `col`
    holds column `col * 8 + AWQ_ORDER[i]` (AutoAWQ's WQLinear_GEMM.from_linear)."""
    rows, n = intweight.shape
    out = np.zeros((rows, n // 8), dtype=np.uint32)
    for col in range(n // 8):
        for i in range(8):
            out[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]].astype(np.uint32) << np.uint32(
                i * 4
            )
    return out.view(np.int32)


def awq_unpack(words):
    """AutoAWQ's unpack_awq + reverse_awq_order: nibbles low first, then reorder columns."""
    w = words.view(np.uint32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    iw = ((w[:, :, None] >> shifts[None, None, :]) & 0xF).reshape(w.shape[0], -1)
    iw = iw.reshape(-1, 8)[:, AWQ_REVERSE_ORDER].reshape(w.shape[0], -1)
    return iw.astype(np.int64)


def write_awq(out_dir, name, group_of, seed):
    rng = np.random.default_rng(seed)
    tensors, refs, layers = {}, {}, []
    for prefix, k, n in LAYERS:
        group = group_of(k)
        groups = k // group
        w = rng.standard_normal((k, n)).astype(np.float32)
        scales = np.zeros((groups, n), dtype=np.float16)
        zeros = np.zeros((groups, n), dtype=np.int64)
        for g in range(groups):
            rows = w[g * group : (g + 1) * group].astype(np.float64)
            lo, hi = rows.min(axis=0), rows.max(axis=0)
            s = f16_round((hi - lo) / 15)
            scales[g] = s
            zeros[g] = np.clip(np.round(-lo / s.astype(np.float64)), 0, 15)
        g_rows = np.arange(k) // group
        q = np.clip(
            np.round(w / scales[g_rows].astype(np.float64) + zeros[g_rows]), 0, 15
        ).astype(np.uint32)
        qweight = awq_pack(q)
        qzeros = awq_pack(zeros.astype(np.uint32))
        tensors[prefix + ".qweight"] = qweight
        tensors[prefix + ".qzeros"] = qzeros
        tensors[prefix + ".scales"] = scales
        q_back = awq_unpack(qweight)
        z_back = awq_unpack(qzeros)
        assert (q_back == q).all() and (z_back == zeros).all(), "packer round trip"
        deq = (q_back.astype(np.float64) - z_back[g_rows].astype(np.float64)) * scales[
            g_rows
        ].astype(np.float64)
        refs[prefix + ".weight"] = deq
        layers.append(
            {"prefix": prefix, "k": k, "n": n, "group": group, "act_order": False}
        )
    save_file(tensors, os.path.join(out_dir, name + ".safetensors"), metadata={"version": "gemm"})
    save_file(refs, os.path.join(out_dir, name + ".ref.safetensors"))
    return {"file": name, "format": "awq", "bits": 4, "layers": layers}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    files = []
    seed = 1000
    for bits in (2, 3, 4, 8):
        for sym in (True, False):
            for act_order in (False, True):
                seed += 1
                name = "gptq_b%d_%s_%s" % (bits, "sym" if sym else "asym", "act" if act_order else "seq")
                files.append(
                    write_gptq(out_dir, name, bits, lambda k: 32, sym, act_order, False, seed)
                )
    # One scale per column (group_size -1: one group of all k rows), and the v2 zero convention.
    files.append(write_gptq(out_dir, "gptq_b4_asym_perchannel", 4, lambda k: k, False, False, False, 7))
    files.append(write_gptq(out_dir, "gptq_b4_asym_v2", 4, lambda k: 64, False, True, True, 8))
    files.append(write_awq(out_dir, "awq_b4_g32", lambda k: 32, 9))
    files.append(write_awq(out_dir, "awq_b4_g64", lambda k: 64, 10))
    for f in files:
        f["v2"] = f["file"].endswith("_v2")
    with open(os.path.join(out_dir, "manifest.json"), "w") as fh:
        json.dump(files, fh, indent=1)


if __name__ == "__main__":
    main()
