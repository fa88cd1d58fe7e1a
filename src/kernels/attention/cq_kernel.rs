//! The VM program of decode attention over a vector-quantized (CQ) KV cache, written with
//! `#[kernel]` ([`super::cq`] is the host side, `docs/vq.md` the format).
//!
//! A token's keys (and values) of one KV head are `D / V` codes, one byte each, standing for
//! rows of a 256-entry codebook of `V`-vectors (one codebook per KV head, or with `PG = 1` one
//! per head and channel group). One block computes one (sequence, KV head, split) and holds
//! the head's K and V codebooks in shared memory for its whole life; its `NW` warps take
//! `TW` tokens each of every block tile and run **independent flash-decoding states** (batched
//! `dot`s, one product per warp): no barrier but the ring's, no redundant look-ups. Each warp
//! writes its own partial output, so the combine step ([`super::kernel::attention_combine`])
//! merges `splits · NW` partials.
//!
//! - **`S = Q · Kᵀ`**: the looked-up key rows are the B operand on the run fragments
//!   (`mma_b_k4`: each thread holds 4 consecutive k of a column, one codebook row for `V = 4`,
//!   two for `V = 2`), no register moves. The contraction runs over `d` permuted so that each
//!   thread's codes of a token are contiguous bytes (one 8- or 16-byte load): k-step `r`, lane
//!   group `c` reads `d = c · D / 4 + 4 r + i`; the queries are loaded in that order once.
//! - **`O += P · V`**: the value rows are the B operand of the ordinary fragment with the
//!   output columns permuted (thread column `g` of n-tile `p` is `d = g · D / 8 + p`): each
//!   thread's look-ups of a token are `D / 8` consecutive `d`, one register permutation
//!   (`cast` with a layout) pairs them by tokens; the output is stored through the inverse.
//! - **The codebook cache**: with one codebook per head (`PG = 0`) it is stored `REP` times
//!   and lane `l` reads copy `l % REP`: with 16 copies a look-up never conflicts on a bank (as
//!   the VQ-GEMV), with 8 (half the shared memory, so a third block fits on a multiprocessor)
//!   two lanes of a phase share a copy and collide half the time; per group codebooks
//!   (`PG = 1`, `D / V` of them) are stored once.
//! - Codes ride a `cp.async` ring `STAGES - 1` tiles ahead; rows past the sequence read as
//!   code 0 (a finite row) and their scores are masked.

/// Flash-decoding attention over a CQ cache for one (sequence, KV head, split).
///
/// Tile parameters: head dim `D` (128); vector size `V` (4: CQ-2, 2: CQ-4); `NW` warps of `TW`
/// tokens per block tile; `STAGES` of the code ring; `PG` (1: a codebook per channel group);
/// `REP` copies of a per-head codebook (8 or 16); `OCC` blocks per multiprocessor the registers
/// are limited for (1: no limit).
/// `A`: the dtype of queries and codebooks.
///
/// Parameters: `kv_heads`, `group` (query heads per KV head, at most 16), `splits`; `stride`
/// (rows per sequence of the contiguous cache: sequence `b`'s token `t` is row
/// `b · stride + t`); `scale_log2` (softmax scale times `log2(e)`); `q [batch · kv_heads, group,
/// D]`; `k_codes`, `v_codes [batch · stride, kv_heads, D / V]` u8; `k_books`, `v_books
/// [kv_heads, books, 256, V]`; `seq_lens [batch]`; the partials `part_o [batch · kv_heads,
/// splits · NW, group, D]` and `part_ml [batch · kv_heads, group, 2, splits · NW]` of
/// [`super::kernel::attention_combine`].
#[tilus::kernel(
    lazy,
    grid = [kv_heads, batch, splits],
    warps = NW,
    blocks_per_sm = OCC,
    space(
        D = [128],
        V = [2, 4],
        NW = [4],
        TW = [16, 32],
        STAGES = [4],
        PG = [0, 1],
        REP = [8, 16],
        OCC = [1, 3],
    ),
    dtypes(A = [f16, bf16]),
)]
#[allow(clippy::too_many_arguments)]
pub fn attention_decode_cq<
    const D: i32,
    const V: i32,
    const NW: i32,
    const TW: i32,
    const STAGES: i32,
    const PG: i32,
    const REP: i32,
    const OCC: i32,
    A: DTypeParam,
>(
    batch: i32,
    kv_heads: i32,
    group: i32,
    splits: i32,
    stride: i32,
    scale_log2: f32,
    q: Global<A>,
    k_codes: Global<u8>,
    v_codes: Global<u8>,
    k_books: Global<A>,
    v_books: Global<A>,
    seq_lens: Global<i32>,
    part_o: GlobalMut<f32>,
    part_ml: GlobalMut<f32>,
) {
    let e = 256;
    // Codes (vectors) per token and head, their 32-bit words; codebook rows in words.
    let nj = D / V;
    let cw = nj / 4;
    let hv = V / 2;
    let nb = if PG == 1 { nj } else { 1 };
    let rep = if PG == 1 { 1 } else { REP };
    let bt = NW * TW;
    let threads = NW * 32;
    // The V ring's rows are padded by 4 words, so that the 8 lanes of a token pair read
    // distinct banks (the K ring's 4-row phases are conflict-free unpadded).
    let rwv = cw + 4;

    let [h, b, s] = block_indices();
    let bh = b * kv_heads + h;
    let one = layout!(local(1));
    let len = item(load_global(view_global(seq_lens, [batch]), one, [b]));
    let len = min(max(len, 0), stride);
    let per = cdiv(cdiv(len, splits), bt) * bt;
    let t0 = s * per;
    let t1 = min(len, t0 + per);
    let ntiles = max(0, cdiv(t1 - t0, bt));
    let rows = batch * stride;

    // The codebooks: `[K/V, book, entry, copy]` rows of `hv` words.
    let sbook = shared::<i32>([2 * nb * e * rep, hv]);
    let skr = shared::<u32>([STAGES, NW, TW, cw]);
    let svr = shared::<u32>([STAGES, NW, TW, rwv]);
    let gkb = view_global::<i32>(k_books, [kv_heads * nb * e, hv]);
    let gvb = view_global::<i32>(v_books, [kv_heads * nb * e, hv]);
    if PG == 1 {
        copy_async(
            gkb,
            slice_shared(sbook, [0, 0], [nb * e, hv]),
            [h * nb * e, 0],
        );
        copy_async(
            gvb,
            slice_shared(sbook, [nb * e, 0], [nb * e, hv]),
            [h * nb * e, 0],
        );
    } else {
        // Copy `c` of entry `x` is row `x · REP + (x + c) % REP`: the lanes of a phase write
        // distinct copies, so distinct banks.
        let lf = layout!(local(e / threads, 1).spatial(threads, 1).local(1, hv));
        let lfi = layout!(local(e / threads, 1).spatial(threads, 1));
        let frow = arange(lfi, 0, 0);
        let kb = load_global(gkb, lf, [h * e, 0]);
        let vb = load_global(gvb, lf, [h * e, 0]);
        #[unroll]
        for c in 0..REP {
            let at = frow * REP + ((frow + c) & (REP - 1));
            scatter_rows(kb, sbook, at, 1);
            scatter_rows(vb, sbook, at + e * REP, 1);
        }
    }

    // Rows past the sequence read as zero: a view ending at its last row.
    let issue = |tile: i32, stage: i32| {
        let t = t0 + tile * bt;
        let row = b * stride + t;
        let end = max(0, min(rows, row + min(bt, len - t)));
        let gke = view_global::<u32>(k_codes, [end, kv_heads * cw]);
        let gve = view_global::<u32>(v_codes, [end, kv_heads * cw]);
        #[unroll]
        for w in 0..NW {
            copy_async(
                gke,
                slice_shared(skr, [stage, w, 0, 0], [TW, cw]),
                [(row + w * TW) as i64, h * cw],
            );
            copy_async(
                gve,
                slice_shared(svr, [stage, w, 0, 0], [TW, cw]),
                [(row + w * TW) as i64, h * cw],
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

    // Q [16, D] in the permuted contraction order (module docs), every warp a copy, as the
    // batched A operand [NW, 16, D] on the runs-of-4 fragment.
    let lqn = layout!(spatial(1, 1)
        .replicated(NW)
        .local(2, 1)
        .spatial(8, 4)
        .local(1, D / 4));
    let lq = layout!(swap_inner_locals(swap_inner_locals(lqn, D / 4, 2), 2, 2));
    let lq3 = layout!(spatial(NW, 1, 1).local(1, 1, D / 16).mma_a_k4);
    let gq = view_global(q, [batch * kv_heads, group, D]);
    let rq = view::<A>(load_global(gq, lq, [bh, 0, 0]), lq3);

    // K codes: words `[NW, TW, cw]`, thread `(g, c)` the `cw / 4` words of lane group `c` of
    // token `g` (+ 8 s); as codes `[NW, nj, TW]` (vector `c · nj / 4 + r`), reordered so that
    // the looked-up rows come in the fragment's order (k-step, n-tile, run).
    let lkw = layout!(spatial(NW, 1, 1)
        .local(1, TW / 8, 1)
        .spatial(8, 4)
        .local(1, cw / 4));
    let lkc = layout!(spatial(NW, 1, 1)
        .local(1, 1, TW / 8)
        .column_spatial(4, 8)
        .local(nj / 4, 1));
    let lki = if V == 4 {
        layout!(swap_inner_locals(lkc, nj / 4, TW / 8))
    } else {
        layout!(swap_inner_locals(
            swap_inner_locals(lkc, nj / 4, TW / 8),
            TW / 8,
            2
        ))
    };
    let lkt = layout!(spatial(NW, 1, 1).local(1, D / 16, TW / 8).mma_b_k4);
    // V codes: thread `(g, c)` holds tokens `16 s + 8 a + 2 c + e`, vectors `g · nj / 8 + u`.
    let lvw = layout!(spatial(NW, 1, 1)
        .local(1, TW / 16, 1)
        .local(2, 1)
        .column_spatial(4, 8)
        .local(2, cw / 8));
    let lvc = layout!(spatial(NW, 1, 1)
        .local(1, TW / 16, 1)
        .local(2, 1)
        .column_spatial(4, 8)
        .local(2, nj / 8));
    // The looked-up values as they come (`d = g · D / 8 + p`), reordered (n-tile outermost),
    // and viewed as the B operand with column `8 p + g` standing for `d`.
    let lvn = layout!(spatial(NW, 1, 1)
        .local(1, TW / 16, 1)
        .local(2, 1)
        .column_spatial(4, 8)
        .local(2, D / 8));
    let lvr = layout!(swap_inner_locals(lvn, D / 8, 4));
    let lvb = layout!(spatial(NW, 1, 1).local(1, TW / 16, D / 8).mma_b);

    // Scores [NW, 16, TW], probabilities as A, the output [NW, 16, D'] (permuted columns).
    let ls = layout!(spatial(NW, 1, 1).local(1, 1, TW / 8).mma_c);
    let lp = layout!(spatial(NW, 1, 1).local(1, 1, TW / 16).mma_a);
    let lo = layout!(spatial(NW, 1, 1).local(1, 1, D / 8).mma_c);

    // Codebook rows: `((which · nb + book) · 256 + code) · rep + copy`, the code-independent
    // part per local. K: lane group `c = j / (nj / 4)`, `g = t % 8`; V: `c = t / 2 % 4`,
    // `g = j / (nj / 8)`; the copy `c + 4 (g % (REP / 4))` (lane `% REP`).
    let gm = REP / 4 - 1;
    let kbase = if PG == 1 {
        arange(lki, 1, 0) * e
    } else {
        arange(lki, 1, 0) / (nj / 4) + ((arange(lki, 2, 0) & gm) << 2)
    };
    let vbase = if PG == 1 {
        arange(lvc, 2, nj) * e
    } else {
        ((arange(lvc, 1, 0) >> 1) & 3) + (((arange(lvc, 2, 0) / (nj / 8)) & gm) << 2) + e * REP
    };

    let mut acc = register::<f32>(lo, 0.0);
    let mut m = reduce_max(register::<f32>(ls, -3.0e38), 2);
    let mut l = sum(register::<f32>(ls, 0.0), 2);
    for tile in 0..ntiles {
        wait_group(STAGES - 2);
        sync();
        let stage = tile % STAGES;
        let kw = load_shared(
            slice_shared(skr, [stage, 0, 0, 0], [NW, TW, cw]),
            lkw,
            [0, 0, 0],
        );
        let vw = load_shared(
            slice_shared(svr, [stage, 0, 0, 0], [NW, TW, cw]),
            lvw,
            [0, 0, 0],
        );
        let next = tile + STAGES - 1;
        if next < ntiles {
            issue(next, next % STAGES);
        }
        commit_group();

        let kidx = cast::<i32>(view::<u8>(kw, lkc), lki);
        let kt = view::<A>(gather_rows(sbook, kidx * rep + kbase, 1), lkt);
        let scores = dot(rq, kt, register::<f32>(ls, 0.0));
        // Warp w's tokens are `t0 + tile · bt + w · TW ..`; those past the sequence are out.
        let tok = arange(ls, 0, 0) * TW + arange(ls, 2, t0 + tile * bt);
        let scores = select(tok < len, scores * scale_log2, f32::NEG_INFINITY);
        let m_new = max(m, reduce_max(scores, 2));
        let p = exp2(scores - m_new);
        let alpha = exp2(m - m_new);
        l = l * alpha + sum(p, 2);
        acc = acc * alpha;
        m = m_new;

        let vidx = cast::<i32>(view::<u8>(vw, lvc));
        let vals = view::<A>(gather_rows(sbook, vidx * rep + vbase, 2), lvn);
        let vb = view::<A>(cast::<A>(vals, lvr), lvb);
        acc = dot(view::<A>(cast::<A>(p), lp), vb, acc);
    }
    wait_group(0);

    // The partials of warp w are split `s · NW + w`. The accumulator's columns back in `d`
    // order (`8 p + 2 c + e'` is `d = (2 c + e') · D / 8 + p`), n-tiles innermost for the store.
    let lreal = layout!(spatial(NW, 1, 1).local(2, 1).spatial(8, 4).local(1, D / 4));
    let lrealp = layout!(swap_inner_locals(lreal, D / 8, 4));
    let out = cast::<f32>(view::<f32>(acc, lrealp), lreal);
    let parts = splits * NW;
    let po = view_global(part_o, [batch * kv_heads, parts, group, D]);
    store_global(out, po, [bh, s * NW, 0, 0]);
    // m and l `[NW, 16, 1]` to their runs over the splits, `(bh · group + q) · 2 (+ 1)` rows
    // of `parts`, column `s · NW + w` (rows past `group` skipped).
    let lm = layout!(reduce(ls, [2]));
    let qrow = arange(lm, 1, 0);
    let at = ((bh * group + qrow) * 2) * parts + arange(lm, 0, s * NW);
    let gml = view_global(part_ml, [batch * kv_heads * group * 2 * parts]);
    scatter(m, gml, select(qrow < group, at, -1));
    scatter(l, gml, select(qrow < group, at + parts, -1));
}

/// Appends `tokens` new tokens to a CQ cache: each vector of `V` channels of `new_k` (and
/// `new_v`) `[tokens · kv_heads, D]` is encoded as its nearest codebook entry (squared distance
/// in f32 against the entries as `A`; ties go to the lower entry, near-ties within f32 rounding
/// either way) and written to cache row `slots[t]` of `k_codes`, `v_codes` `[rows, kv_heads ·
/// D / V]` bytes. A slot outside `0..rows` skips the token. One warp per (token, KV head), one
/// vector per lane, the 256 entries in chunks of 32.
#[tilus::kernel(
    lazy,
    grid = [tokens, kv_heads],
    warps = 1,
    space(D = [128], V = [2, 4], PG = [0, 1]),
    dtypes(A = [f16, bf16]),
)]
#[allow(clippy::too_many_arguments)]
pub fn cq_append<const D: i32, const V: i32, const PG: i32, A: DTypeParam>(
    tokens: i32,
    kv_heads: i32,
    rows: i32,
    new_k: Global<A>,
    new_v: Global<A>,
    slots: Global<i32>,
    k_books: Global<A>,
    v_books: Global<A>,
    k_codes: GlobalMut<u8>,
    v_codes: GlobalMut<u8>,
) {
    let nj = D / V;
    let ch = 32;
    let [t, h] = block_indices();
    let slot = item(load_global(
        view_global(slots, [tokens]),
        layout!(local(1)),
        [t],
    ));
    // [vector, entry, channel]: lane j holds vector j (+ 32 i), every entry of the chunk.
    let lx = layout!(local(nj / 32, 1, 1).spatial(32, 1, 1).local(1, 1, V));
    let ld = layout!(local(nj / 32, 1, 1).spatial(32, 1, 1).local(1, ch, V));
    let lc = if PG == 1 {
        ld
    } else {
        layout!(replicated(32).local(1, ch, V))
    };
    let lbest = layout!(reduce(ld, [1, 2]));
    let put = |src: Tensor, books: Tensor, codes: Tensor| {
        let x = cast::<f32>(load_global(src, lx, [(t * kv_heads + h) * nj, 0, 0]));
        let xs = register::<f32>(ld, 0.0) + x;
        let mut best = register::<f32>(lbest, 3.0e38);
        let mut idx = register::<i32>(lbest, 0);
        for e0 in (0..256).step_by(ch) {
            let at = if PG == 1 { h * nj } else { h };
            let c = cast::<f32>(load_global(books, lc, [at, e0, 0]));
            let diff = xs - c;
            let d = sum(diff * diff, 2);
            let near = reduce_min(d, 1);
            let arg = argmax(neg(d), 1);
            let better = near < best;
            best = select(better, near, best);
            idx = select(better, arg + e0, idx);
        }
        // `[nj, 1, 1]` as the row `[1, nj]` of head h (the same registers).
        let lrow = layout!(local(1, nj / 32).spatial(1, 32));
        let code = cast::<u8>(view::<i32>(idx, lrow));
        store_global(code, codes, [slot as i64, h * nj]);
    };
    if slot >= 0 && slot < rows {
        let nb = if PG == 1 { kv_heads * nj } else { kv_heads };
        // The new tokens as one vector per row.
        put(
            view_global(new_k, [tokens * kv_heads * nj, 1, V]),
            view_global(k_books, [nb, 256, V]),
            view_global(k_codes, [rows, kv_heads * nj]),
        );
        put(
            view_global(new_v, [tokens * kv_heads * nj, 1, V]),
            view_global(v_books, [nb, 256, V]),
            view_global(v_codes, [rows, kv_heads * nj]),
        );
    }
}
