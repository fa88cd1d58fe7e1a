//! The VM programs of decode attention, written with `#[kernel]`: the split-KV main kernel and
//! the combine step of flash decoding.
//!
//! One block computes one (sequence, KV head, split): the `G` query heads that share the KV
//! head (grouped-query attention) against the split's slice of the sequence. The query rows are
//! the `m` side of `mma.m16n8k16` (padded to 16 rows; rows past `G` are masked on load and
//! store), so a KV head's keys and values are read once for all of its query heads.
//!
//! Per tile of `BT` tokens, every warp computes the whole score tile `S = Q·Kᵀ` (the redundant
//! mma work is small next to the memory time, and it saves a shared-memory exchange and a
//! barrier per tile), the online softmax update, and its `D / NW` columns of `O += P·V`. K and V
//! tiles stream through a `STAGES`-deep `cp.async` pipeline in swizzled shared memory; K is
//! read with `ldmatrix` in the transposed B layout and reinterpreted as `Kᵀ` for free, V with
//! `ldmatrix.trans`, and `P` moves from the accumulator layout to the A operand by a `view` (two
//! adjacent n tiles of the C fragment are one A fragment).

/// Flash-decoding attention for one (sequence, KV head, split).
///
/// Tile parameters: head dim `D`; `BT` tokens per tile; `NW` warps; `STAGES` of the K/V
/// pipeline; `OCC`, the blocks per multiprocessor the registers are limited for (1: no limit);
/// `PAGED` (1: the cache is pages of `P` tokens found through `block_table`; 0:
/// contiguous, sequence `b` at rows `b · stride ..`); `PART` (1: write the unnormalized partial
/// output and its softmax statistics for the combine step; 0: one split, write `out`).
/// Data types: `A` of queries, outputs and (with `QUANT = 0`) the cache; with `QUANT = 1` the
/// cache holds codes of `KV` (`i8`, `f8e4m3`, `u4`, ...) standing for `(code - zero) · scale`
/// with a scale and zero point per token and KV head.
///
/// Parameters:
/// - `kv_heads`, `group` (query heads per KV head), `splits` (blocks along the sequence);
/// - `rows`: rows of the cache views (`pages · P`, or `batch · stride`); `stride`: the block
///   table's row length (paged) or the contiguous cache's rows per sequence;
/// - `scale_log2`: the softmax scale times `log2(e)`; `window`: attend only the last `window`
///   tokens (0: all);
/// - `q [batch · kv_heads, group, D]` (the query heads of KV head `h` are `h · group ..`);
/// - `k_cache`, `v_cache [rows, kv_heads · D]` of `A`, or with `QUANT = 1` of `KV` codes, packed;
/// - `k_meta`, `v_meta [kv_heads, rows, 2]` f32 (with `QUANT = 1`): `(scale, zero)` per token
///   and KV head;
/// - `block_table [batch, stride]` i32 (with `PAGED = 1`), `seq_lens [batch]` i32;
/// - `out [batch · kv_heads, group, D]` (with `PART = 0`), or with `PART = 1` the f32
///   partials `part_o [batch · kv_heads, splits, group, D]`, the split's `Σ 2^(s - m) v`, and
///   `part_ml [batch · kv_heads, group, 2, splits]`, its running maximum `m` (of the base-2
///   scores) and `l = Σ 2^(s - m)`.
///
/// Cache rows are addressed with 64-bit offsets: a cache may hold more than 2^31 elements.
#[tilus::kernel(
    lazy,
    grid = [kv_heads, batch, splits],
    warps = NW,
    blocks_per_sm = OCC,
    space(
        D = [64, 128],
        BT = [32],
        NW = [4],
        STAGES = [3],
        OCC = [1],
        PAGED = [0, 1],
        P = [32],
        PART = [0, 1],
        QUANT = [0, 1],
    ),
    dtypes(A = [f16, bf16], KV = [i8, u4, f8e4m3]),
)]
#[allow(clippy::too_many_arguments)]
pub fn attention_decode<
    const D: i32,
    const BT: i32,
    const NW: i32,
    const STAGES: i32,
    const OCC: i32,
    const PAGED: i32,
    const P: i32,
    const PART: i32,
    const QUANT: i32,
    A: DTypeParam,
    KV: DTypeParam,
>(
    batch: i32,
    kv_heads: i32,
    group: i32,
    splits: i32,
    rows: i32,
    stride: i32,
    scale_log2: f32,
    window: i32,
    q: Global<A>,
    k_cache: Global<u8>,
    v_cache: Global<u8>,
    k_meta: Global<f32>,
    v_meta: Global<f32>,
    block_table: Global<i32>,
    seq_lens: Global<i32>,
    out: GlobalMut<A>,
    part_o: GlobalMut<f32>,
    part_ml: GlobalMut<f32>,
) {
    // Q [16, D] and the scores S [16, BT]: every warp holds all of them.
    let lq = layout!(replicated(NW).local(1, D / 16).mma_a);
    let ls = layout!(replicated(NW).local(1, BT / 8).mma_c);
    // K as loaded, [BT, D], and as the B operand Kᵀ [D, BT] (locals in the same order).
    let lk = layout!(replicated(NW).column_local(BT / 8, D / 16).mma_b_t);
    let lkt = layout!(replicated(NW).local(D / 16, BT / 8).mma_b);
    // P [16, BT] as the A operand of P·V; V [BT, D] and O [16, D] split by columns over warps.
    let lp = layout!(replicated(NW).local(1, BT / 16).mma_a);
    let lv = layout!(spatial(1, NW).local(BT / 16, D / (8 * NW)).mma_b);
    let lo = layout!(spatial(1, NW).local(1, D / (8 * NW)).mma_c);

    let [h, b, s] = block_indices();
    let bh = b * kv_heads + h;
    let one = layout!(local(1));
    let len = item(load_global(view_global(seq_lens, [batch]), one, [b]));
    // A length past the capacity is clamped to it (lengths come from the device: any value).
    let capacity = if PAGED == 1 { stride * P } else { stride };
    let len = min(max(len, 0), capacity);
    // The split's tokens: whole tiles from the window's first tile, `per` tokens per split.
    let first = if window > 0 { max(0, len - window) } else { 0 };
    let base = first / BT * BT;
    let per = cdiv(cdiv(len - base, splits), BT) * BT;
    let t0 = base + s * per;
    let t1 = min(len, t0 + per);
    let ntiles = max(0, cdiv(t1 - t0, BT));

    let gbt = if PAGED == 1 {
        view_global(block_table, [batch, stride])
    } else {
        ()
    };
    // The cache row of token `t` (the first of a tile: tiles never straddle a page).
    let row_of = |t: i32| {
        if PAGED == 1 {
            // A page index outside the cache (any value may come from the device) becomes
            // -1 or the page past the end, whose rows read as zero.
            let page = min(max(item(load_global(gbt, one, [b, t / P])), -1), rows / P);
            page * P + t % P
        } else {
            b * stride + t
        }
    };

    let sw = if D == 128 { 4 } else { 3 };
    // Bytes of one token's head in the cache (codes are packed: 4-bit codes take D / 2).
    let cb = D * KV::BITS / 8;
    // The K and V tiles as they arrive: the activation type, or codes as bytes.
    let sk = if QUANT == 0 {
        shared::<A>([STAGES, BT, D], swizzle(3, 3, sw))
    } else {
        shared::<u8>([STAGES, BT, cb])
    };
    let sv = if QUANT == 0 {
        shared::<A>([STAGES, BT, D], swizzle(3, 3, sw))
    } else {
        shared::<u8>([STAGES, BT, cb])
    };
    // Quantized caches: each tile's `(scale, zero)` per token, through the same pipeline.
    let skm = if QUANT == 1 {
        shared::<f32>([STAGES, BT, 2])
    } else {
        ()
    };
    let svm = if QUANT == 1 {
        shared::<f32>([STAGES, BT, 2])
    } else {
        ()
    };
    // Cache rows past the sequence read as zero (a view ending at the last valid row), so the
    // values of unwritten cache slots never reach P·V; a page index past the cache reads zeros.
    let issue = |tile: i32, stage: i32| {
        let t = t0 + tile * BT;
        let row = row_of(t);
        let end = max(0, min(rows, row + min(BT, len - t)));
        if QUANT == 0 {
            copy_async(
                view_global::<A>(k_cache, [end, kv_heads * D]),
                slice_shared(sk, [stage, 0, 0], [BT, D]),
                [row as i64, h * D],
            );
            copy_async(
                view_global::<A>(v_cache, [end, kv_heads * D]),
                slice_shared(sv, [stage, 0, 0], [BT, D]),
                [row as i64, h * D],
            );
        } else {
            copy_async(
                view_global(k_cache, [end, kv_heads * cb]),
                slice_shared(sk, [stage, 0, 0], [BT, cb]),
                [row as i64, h * cb],
            );
            copy_async(
                view_global(v_cache, [end, kv_heads * cb]),
                slice_shared(sv, [stage, 0, 0], [BT, cb]),
                [row as i64, h * cb],
            );
            // Head h's rows of the metadata: rows past the sequence are in bounds but may hold
            // anything (NaN included); the dequantization zeroes them.
            copy_async(
                view_global(k_meta, [kv_heads * rows, 2]),
                slice_shared(skm, [stage, 0, 0], [BT, 2]),
                [h * rows + row, 0],
            );
            copy_async(
                view_global(v_meta, [kv_heads * rows, 2]),
                slice_shared(svm, [stage, 0, 0], [BT, 2]),
                [h * rows + row, 0],
            );
        }
    };
    #[unroll]
    for st in 0..STAGES - 1 {
        if st < ntiles {
            issue(st, st);
        }
        commit_group();
    }

    // Quantized caches: each tile is dequantized, `(code - zero) · scale` per token, into one
    // stage of `A` in shared memory, from which the mma operands load as for an `A` cache.
    // Each thread converts runs of `vec` codes (16 bytes, or fewer for small tiles).
    let vec = min(128 / KV::BITS, BT * D / (32 * NW));
    let rpt = BT * D / (vec * 32 * NW);
    let lcodes = layout!(local(rpt, 1).spatial(BT / rpt, D / vec).local(1, vec));
    let lbytes = layout!(local(rpt, 1)
        .spatial(BT / rpt, D / vec)
        .local(1, vec * KV::BITS / 8));
    let skd = if QUANT == 1 {
        shared::<A>([BT, D], swizzle(3, 3, sw))
    } else {
        ()
    };
    let svd = if QUANT == 1 {
        shared::<A>([BT, D], swizzle(3, 3, sw))
    } else {
        ()
    };
    // Codes become `A` in shared memory (exact: every code of at most 8 bits is an f16 or bf16
    // value); scales and zero points apply in f32 to the scores and the probabilities.
    let convert = |codes: Tensor, out: Tensor| {
        store_shared(cast::<A>(view::<KV>(codes, lcodes)), out, [0, 0]);
    };
    // A per-token vector of the tile: [BT, 1] as read from the metadata, with the threads of
    // the score tile's columns (the score layout transposed, reduced over the query rows), and
    // viewed for free as the [1, BT] vector the scores broadcast with.
    let mma_ct = layout!(local(1, 2).column_spatial(4, 8).local(2, 1));
    let lst = layout!(replicated(NW).local(BT / 8, 1).mma_ct);
    let ltt = layout!(reduce(lst, [1]));
    let lt = layout!(reduce(ls, [0]));
    let token_vec = |meta: Tensor, col: i32| view::<f32>(load_shared(meta, ltt, [0, col]), lt);

    let gq = view_global(q, [batch * kv_heads, group, D]);
    let rq = load_global(gq, lq, [bh, 0, 0]);
    // Quantized: -Σ_d q per query row, for the zero points.
    let neg_qsum = if QUANT == 1 {
        neg(sum(cast::<f32>(rq), 1))
    } else {
        ()
    };
    let mut acc = register::<f32>(lo, 0.0);
    // Running maximum (base 2, floored so that fully masked tiles stay NaN-free) and sum.
    let mut m = reduce_max(register::<f32>(ls, -3.0e38), 1);
    let mut l = sum(register::<f32>(ls, 0.0), 1);
    for tile in 0..ntiles {
        wait_group(STAGES - 2);
        sync();
        let stage = tile % STAGES;
        let t = t0 + tile * BT;
        // The K and V operands of this tile, in shared memory as `A`.
        let (ks, vs) = if QUANT == 1 {
            let kc = load_shared(slice_shared(sk, [stage, 0, 0], [BT, cb]), lbytes, [0, 0]);
            let vc = load_shared(slice_shared(sv, [stage, 0, 0], [BT, cb]), lbytes, [0, 0]);
            convert(kc, skd);
            convert(vc, svd);
            sync();
            (skd, svd)
        } else {
            (
                slice_shared(sk, [stage, 0, 0], [BT, D]),
                slice_shared(sv, [stage, 0, 0], [BT, D]),
            )
        };
        let rk = load_shared(ks, lk, [0, 0]);
        let rv = load_shared(vs, lv, [0, 0]);
        let next = tile + (STAGES - 1);
        if next < ntiles {
            issue(next, next % STAGES);
        }
        commit_group();
        let kt = view::<A>(rk, lkt);
        let scores = dot(rq, kt, register::<f32>(ls, 0.0));
        // Tokens outside [first, len) do not take part.
        let tok = arange(ls, 1, t);
        let valid = (tok >= first) & (tok < len);
        // Quantized: s = scale · (q · code) - scale · zero · Σq, per token (column); the
        // metadata of rows past the sequence (anything, NaN included) is replaced by 0.
        let (scores, vscale, voffset) = if QUANT == 1 {
            let live = arange(lt, 1, t) < len;
            let km = slice_shared(skm, [stage, 0, 0], [BT, 2]);
            let vm = slice_shared(svm, [stage, 0, 0], [BT, 2]);
            let ks_t = select(live, token_vec(km, 0), 0.0);
            let ko_t = select(live, token_vec(km, 1) * ks_t, 0.0);
            let vs_t = select(live, token_vec(vm, 0), 0.0);
            let vo_t = select(live, token_vec(vm, 1) * vs_t, 0.0);
            let offsets = register::<f32>(ls, 0.0) + ko_t;
            (mul_add(offsets, neg_qsum, scores * ks_t), vs_t, vo_t)
        } else {
            (scores, (), ())
        };
        let scores = select(valid, scores * scale_log2, f32::NEG_INFINITY);
        let m_new = max(m, reduce_max(scores, 1));
        let p = exp2(scores - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + sum(p, 1);
        acc = acc * alpha;
        // Quantized: o += (p · scale) · code - Σ_t p · scale · zero.
        let pv = if QUANT == 1 { p * vscale } else { p };
        let pa = view::<A>(cast::<A>(pv), lp);
        acc = dot(pa, rv, acc);
        if QUANT == 1 {
            acc = acc - sum(p * voffset, 1);
        }
        m = m_new;
    }
    wait_group(0);

    if PART == 1 {
        // Partials for the combine step: o per (sequence, KV head, split, query head), and m
        // and l as runs over the splits per (sequence, KV head, query head).
        let po = view_global(part_o, [batch * kv_heads, splits, group, D]);
        store_global(acc, po, [bh, s, 0, 0]);
        let gml = view_global(part_ml, [batch * kv_heads, group, 2 * splits]);
        store_global(m, gml, [bh, 0, s]);
        store_global(l, gml, [bh, 0, splits + s]);
    } else {
        let inv = 1.0 / max(l, 1e-30);
        store_global(
            cast::<A>(acc * inv),
            view_global(out, [batch * kv_heads, group, D]),
            [bh, 0, 0],
        );
    }
}

/// The combine step of flash decoding: for each (sequence, KV head, query head), merges the
/// `splits` partial outputs of [`attention_decode`] (`PART = 1`) into `out [batch · kv_heads,
/// group, D]`: `m = max_s m_s`, `out = Σ_s 2^(m_s - m) o_s / Σ_s 2^(m_s - m) l_s`. 32 splits
/// at a time, eight per warp (eight running states per thread, so that each step's loads are
/// independent and in flight together: one split per warp and step left a split-KV of 132
/// partials latency-bound, ~11 us), then the 32 states merge. A split without tokens
/// (`m_s = -3e38`, `l_s = 0`, `o_s = 0`) adds nothing.
#[tilus::kernel(
    lazy,
    grid = [batch * kv_heads, group],
    warps = 4,
    space(D = [64, 128]),
    dtypes(A = [f16, bf16]),
)]
pub fn attention_combine<const D: i32, A: DTypeParam>(
    batch: i32,
    kv_heads: i32,
    group: i32,
    splits: i32,
    part_o: Global<f32>,
    part_ml: Global<f32>,
    out: GlobalMut<A>,
) {
    // 32 splits at a time (split `4 i + w` in local `i` of warp `w`), each a row of D columns.
    let lo = layout!(local(8, 1).spatial(4, 32).local(1, D / 32));
    let lr = layout!(reduce(lo, [1]));
    let [bh, g] = block_indices();
    let gpo = view_global(part_o, [batch * kv_heads, splits, group * D]);
    // The m (then l) of every split, as a column [splits, 1] per (sequence, KV head, query head).
    let gml = view_global(part_ml, [batch * kv_heads * group * 2, splits, 1]);
    let row = (bh * group + g) * 2;
    let mut m = register::<f32>(lr, -3.0e38);
    let mut l = register::<f32>(lr, 0.0);
    let mut o = register::<f32>(lo, 0.0);
    for s0 in (0..splits).step_by(32) {
        let ms = load_global(gml, lr, [row, s0, 0], -3.0e38);
        let m_new = max(m, ms);
        let a = exp2(m - m_new);
        let w = exp2(ms - m_new);
        l = l * a + load_global(gml, lr, [row + 1, s0, 0]) * w;
        o = o * a + load_global(gpo, lo, [bh, s0, g * D]) * w;
        m = m_new;
    }
    let mt = reduce_max(m, 0);
    let w = exp2(m - mt);
    let lt = sum(l * w, 0);
    let ot = sum(o * w, 0);
    let inv = 1.0 / max(lt, 1e-30);
    store_global(
        cast::<A>(ot * inv),
        view_global(out, [batch * kv_heads, group, D]),
        [bh, g, 0],
    );
}

/// Appends the keys and values of `tokens` new tokens to a cache of the activation type: token
/// `t`'s head `h` goes to cache row `slots[t]` (`new_k`, `new_v` `[tokens, kv_heads, D]`, the
/// caches `[rows, kv_heads, D]`). A slot outside `0..rows` skips the token (serving engines pad
/// batches with slot -1).
#[tilus::kernel(
    lazy,
    grid = [tokens, kv_heads],
    warps = 1,
    space(D = [64, 128]),
    dtypes(A = [f16, bf16]),
)]
#[allow(clippy::too_many_arguments)]
pub fn kv_append<const D: i32, A: DTypeParam>(
    tokens: i32,
    kv_heads: i32,
    rows: i32,
    new_k: Global<A>,
    new_v: Global<A>,
    slots: Global<i32>,
    k_cache: GlobalMut<A>,
    v_cache: GlobalMut<A>,
) {
    let lx = layout!(spatial(1, 32).local(1, D / 32));
    let [t, h] = block_indices();
    let slot = item(load_global(
        view_global(slots, [tokens]),
        layout!(local(1)),
        [t],
    ));
    if slot >= 0 && slot < rows {
        let src = [t * kv_heads + h, 0];
        let dst = [slot as i64, h * D];
        let gk = view_global(new_k, [tokens * kv_heads, D]);
        let gv = view_global(new_v, [tokens * kv_heads, D]);
        store_global(
            load_global(gk, lx, src),
            view_global(k_cache, [rows, kv_heads * D]),
            dst,
        );
        store_global(
            load_global(gv, lx, src),
            view_global(v_cache, [rows, kv_heads * D]),
            dst,
        );
    }
}

/// [`kv_append`] for a quantized cache: each head of each new token is quantized on the fly to
/// codes of `KV` with its own `(scale, zero)`, by the formulas of
/// [`quantize_head`](super::kv::quantize_head) (`SYM = 1`: symmetric, for signed and float
/// codes; `SYM = 0`: spanning `[min, max]`, for unsigned codes), in the same f32 operations, so
/// the codes agree with the host's bit for bit. `qmax` is the largest code value; the caches
/// are packed codes `[rows, kv_heads, D]`, the metadata `[kv_heads, rows, 2]`.
#[tilus::kernel(
    lazy,
    grid = [tokens, kv_heads],
    warps = 1,
    space(D = [64, 128], SYM = [0, 1]),
    dtypes(A = [f16, bf16], KV = [i8, u4, f8e4m3]),
)]
#[allow(clippy::too_many_arguments)]
pub fn kv_append_quantized<const D: i32, const SYM: i32, A: DTypeParam, KV: DTypeParam>(
    tokens: i32,
    kv_heads: i32,
    rows: i32,
    qmax: f32,
    new_k: Global<A>,
    new_v: Global<A>,
    slots: Global<i32>,
    k_cache: GlobalMut<u8>,
    v_cache: GlobalMut<u8>,
    k_meta: GlobalMut<f32>,
    v_meta: GlobalMut<f32>,
) {
    let lx = layout!(spatial(1, 32).local(1, D / 32));
    let lb = layout!(spatial(1, 32).local(1, D / 32 * KV::BITS / 8));
    let lr = layout!(reduce(lx, [1]));
    let [t, h] = block_indices();
    let cb = D * KV::BITS / 8;
    let inv_qmax = 1.0 / qmax;
    let slot = item(load_global(
        view_global(slots, [tokens]),
        layout!(local(1)),
        [t],
    ));
    let put = |src: Tensor, cache: Tensor, meta: Tensor| {
        let x = cast::<f32>(load_global(src, lx, [t * kv_heads + h, 0]));
        let mx = reduce_max(x, 1);
        let mn = reduce_min(x, 1);
        let amax = max(abs(mn), abs(mx));
        let (scale, zero) = if SYM == 1 {
            (max(amax, 1e-30) * inv_qmax, register::<f32>(lr, 0.0))
        } else {
            let scale = max(max(mx - mn, amax * 1e-6), 1e-30) * inv_qmax;
            (scale, neg(mn) / scale)
        };
        let codes = cast::<KV>(x * (1.0 / scale) + zero);
        store_global(view::<u8>(codes, lb), cache, [slot as i64, h * cb]);
        store_global(scale, meta, [h * rows + slot, 0]);
        store_global(zero, meta, [h * rows + slot, 1]);
    };
    if slot >= 0 && slot < rows {
        put(
            view_global(new_k, [tokens * kv_heads, D]),
            view_global(k_cache, [rows, kv_heads * cb]),
            view_global(k_meta, [kv_heads * rows, 2]),
        );
        put(
            view_global(new_v, [tokens * kv_heads, D]),
            view_global(v_cache, [rows, kv_heads * cb]),
            view_global(v_meta, [kv_heads * rows, 2]),
        );
    }
}
