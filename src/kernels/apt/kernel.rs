//! The bit-serial WxAy GEMM and the activation quantizer, written with `#[kernel]`
//! (`docs/apt.md`).
//!
//! **GEMM** `y[m, n] = sa[m] · sw[n] · Σ_k v_a[m, k] · v_w[n, k]` with bipolar values `v` of
//! `ABITS`-bit activations and `WBITS`-bit weights, read as bit planes (`[bits][rows][k / 32]`
//! `u32`, see [`crate::apt::matrix`]). A block computes `BM x BN` outputs with `WM x WN` warps,
//! each warp `FM x FN` mma tiles of `16 x 8`; a k step is `KT` tiles of 256 bits.
//!
//! The planes are stacked into the matrix dimensions: the A operand of a k step is the
//! `[ABITS · BM, BK]` bit matrix of all activation planes (each warp's rows ordered plane,
//! tile, row), the B operand the `[BK, WBITS · BN]` one of all weight planes, so **one u1 `dot`
//! per k step**
//! computes every plane pair, `D[q·BM + i, p·BN + j] += popc(a_q[i] AND w_p[j])`, on the 1-bit
//! tensor cores, accumulating in s32 over all of k. The plane dimensions are locals of every
//! thread (`local(ABITS, WBITS)` outermost), so the **recovery** after the k loop is in
//! registers: a free `view` makes the plane pair a leading dimension of extent `ABITS · WBITS`,
//! each is shifted by `p + q` and summed over that dimension (thread-local), giving
//! `X = Σ_k code_a · code_w`. The bipolar product is then
//! `4X - 2(2^A - 1)·Σ_k code_w - 2(2^W - 1)·Σ_k code_a + K (2^A - 1)(2^W - 1)` (row sums of codes
//! are inputs), exact in i32 (the host checks `4 K (2^A - 1)(2^W - 1) < 2^31`), and the scales
//! are applied once, in f32, before the f16 store. With `STORE_ACC = 1` the i32 product is also
//! stored (the exactness tests).
//!
//! The operands use the *paired* u1 fragments (`mma_b1_ap/bp/cp`, rows and k permuted within
//! each mma tile, which the product does not see), so each thread loads two adjacent words per
//! row: 8-byte loads. With `STAGES = 0` each k step's words are loaded from global memory one
//! step ahead into registers (the loads of step `kb + 1` are issued before the `dot` of step
//! `kb`); with `STAGES >= 2` a ring of shared-memory stages is filled by `cp.async`
//! `STAGES - 1` steps ahead (the activation words are then read from global memory once per
//! block, not once per warp column), rows padded against bank conflicts.

pub use kernels::*;

#[tilus::helpers]
mod kernels {
    /// The bipolar codes (`0..2^ABITS`) of the f32 values `xs` of rows with scales `scale`:
    /// `clamp(floor(x · (1 / scale) · 0.5), -h, h - 1) + h` with `h = 2^(ABITS - 1)`, which is the
    /// host's `(v + 2^ABITS - 1) / 2` of the nearest odd level `v = clamp(2·floor(t / 2) + 1)`
    /// ([`crate::apt::Bipolar::nearest`]; the bounds are integers, so clamping before the floor is
    /// clamping after it). One reciprocal per row, a product, a clamp and a floor per element:
    /// every kernel that quantizes activations uses it, so their codes agree bit for bit.
    #[helper]
    fn bipolar_codes(xs: Tensor, scale: Tensor) -> Tensor {
        let h = 1 << (ABITS - 1);
        let t = xs * (1.0 / scale) * 0.5;
        cast::<i32>(floor(min(max(t, 0.0 - (h as f32)), (h - 1) as f32))) + h
    }

    /// Store the bit planes of `code` (`0..2^bits`, a `[1, 32 · WARPS, 32]` tile of row `r`,
    /// each thread one word's 32 elements; `bit` the element's bit position, `arange` along the
    /// last dimension) as words `[bits][m][k / 32]` of `planes`, from word `w0` of the row.
    /// Words past `k / 32` are masked by the view. The activation quantizer and the weight
    /// re-layout split alike, so their planes agree with the host's
    /// ([`crate::apt::matrix::AptMatrix::planes`]) bit for bit.
    #[helper]
    fn store_planes(code: Tensor, bit: Tensor, bits: i32, r: i32, w0: i32) {
        let gp = view_global(planes, [bits * m, k / 32, 1]);
        #[unroll]
        for q in 0..bits {
            let word = sum(((code >> q) & 1) << bit, 2);
            let words = layout!(spatial(1, 32 * WARPS, 1));
            store_global(view::<u32>(word, words), gp, [q * m + r, w0, 0]);
        }
    }

    /// The u1 fragments `(A, B, C)` of the product and the word layouts `(A, B)` that load them
    /// (`[rows, k / 32]` words, B stored n-major): with the register prefetch (`STAGES = 0`) the
    /// paired set, whose words come two adjacent per row (8-byte global loads); with the
    /// shared-memory ring the standard set, whose words land in the registers the instruction
    /// reads (4-byte shared loads, conflict-free with rows padded to 4 words modulo 8), where
    /// the paired A would need four register moves per mma (ptxas rebuilds the operand quad
    /// for every use).
    #[helper]
    fn u1_fragments() -> (Layout, Layout, Layout, Layout, Layout) {
        if STAGES == 0 {
            (
                layout!(mma_b1_ap),
                layout!(mma_b1_bp),
                layout!(mma_b1_cp),
                layout!(spatial(8, 4).local(2, 2)),
                layout!(spatial(8, 4).local(1, 2)),
            )
        } else {
            (
                layout!(mma_b1_a),
                layout!(mma_b1_b),
                layout!(mma_b1_c),
                layout!(column_local(2, 2).spatial(8, 4)),
                layout!(local(1, 2).spatial(8, 4)),
            )
        }
    }

    /// The largest `4 K (2^A - 1)(2^W - 1)` the i32 recovery holds.
    pub const MAX_PRODUCT: i64 = i32::MAX as i64;

    /// The end of every GEMM of the layer: from `x = Σ_k code_a · code_w` (i32, layout `lc`,
    /// the block's outputs at `[row0, col0]`), the bipolar product of the AND form
    /// `4x - 2(2^A - 1)·Σ code_w - 2(2^W - 1)·Σ code_a + K (2^A - 1)(2^W - 1)`, stored as i32 with
    /// `STORE_ACC = 1`, then scaled in f32 and stored as f16. The same operations in every
    /// kernel, so all give the same bits.
    #[helper]
    fn apt_finish(x: Tensor, lc: Layout, row0: i32, col0: i32) {
        let (sa, sw, fa, fw) = apt_row_col_terms(lc, row0, col0);
        apt_finish_with(x, row0, col0, sa, sw, fa, fw);
    }

    /// The rows' and columns' sums of codes and scales [`apt_finish_with`] reads for the block
    /// of outputs at `[row0, col0]` in layout `lc`: loaded before a k loop, their latency hides
    /// behind it.
    #[helper]
    fn apt_row_col_terms(lc: Layout, row0: i32, col0: i32) -> (Tensor, Tensor, Tensor, Tensor) {
        let lrow = layout!(reduce(lc, [1]));
        let lcol = layout!(reduce(lc, [0]));
        let sa = load_global(view_global(a_sums, [m, 1]), lrow, [row0, 0]);
        let sw = load_global(view_global(w_sums, [1, n]), lcol, [0, col0]);
        let fa = load_global(view_global(a_scales, [m, 1]), lrow, [row0, 0]);
        let fw = load_global(view_global(w_scales, [1, n]), lcol, [0, col0]);
        (sa, sw, fa, fw)
    }

    /// [`apt_finish`] with the terms of [`apt_row_col_terms`] already loaded.
    #[helper]
    fn apt_finish_with(
        x: Tensor,
        row0: i32,
        col0: i32,
        sa: Tensor,
        sw: Tensor,
        fa: Tensor,
        fw: Tensor,
    ) {
        let out = apt_outputs(x, row0, col0, sa, sw, fa, fw);
        store_global(out, view_global(y, [m, n]), [row0, col0]);
    }

    /// The f16 outputs of [`apt_finish_with`] (the i32 products stored with `STORE_ACC = 1`),
    /// for the caller to store.
    #[helper]
    fn apt_outputs(
        x: Tensor,
        row0: i32,
        col0: i32,
        sa: Tensor,
        sw: Tensor,
        fa: Tensor,
        fw: Tensor,
    ) -> Tensor {
        let ma = (1 << ABITS) - 1;
        let mw = (1 << WBITS) - 1;
        let d = x * 4 - sw * (2 * ma) - sa * (2 * mw) + k * (ma * mw);
        if STORE_ACC == 1 {
            store_global(d, view_global(acc_out, [m, n]), [row0, col0]);
        }
        let out = cast::<f32>(d) * fa * fw;
        cast::<f16>(out)
    }

    #[tilus::kernel(
    lazy,
    grid = [cdiv(m, WM * FM * 16), n / (WN * FN * 8)],
    warps = WM * WN,
    space(
        WBITS = [2, 3],
        ABITS = [2],
        WM = [1, 2],
        WN = [2],
        FM = [1],
        FN = [2],
        KT = [1, 2],
        STAGES = [0, 3],
        STORE_ACC = [0, 1],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemm<
        const WBITS: i32,
        const ABITS: i32,
        const WM: i32,
        const WN: i32,
        const FM: i32,
        const FN: i32,
        const KT: i32,
        const STAGES: i32,
        const STORE_ACC: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        a_planes: Global<u32>,
        w_planes: Global<u32>,
        a_sums: Global<i32>,
        a_scales: Global<f32>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
    ) {
        let bm = WM * FM * 16;
        let bn = WN * FN * 8;
        let kw = KT * 8;
        let [bi, bj] = block_indices();
        let ga = view_global(a_planes, [ABITS, m, k / 32]);
        let gw = view_global(w_planes, [WBITS, n, k / 32]);
        let (fa, fb, fc, wa, wb) = u1_fragments();
        // Words of one k step: every plane, each thread's words in its fragments' register order.
        // Warps along m share the weight words, warps along n the activation words. Per warp, the
        // stacked A rows are (plane q, tile fm, row), the stacked B columns (plane p, tile fn, col).
        let la_words = layout!(reduce(spatial(1, WM, WN), [2]).local(ABITS, FM, KT).wa);
        let lw_words = layout!(
            reduce(column_spatial(1, WN, WM), [2])
                .local(1, 1, KT)
                .local(WBITS, FN, 1)
                .wb
        );
        // The same registers as bits: the stacked A `[ABITS·BM, BK]` and B `[BK, WBITS·BN]`.
        let la_bits = layout!(reduce(spatial(WM, WN), [1]).local(ABITS * FM, KT).fa);
        let lw_bits = layout!(reduce(spatial(WM, WN), [0]).local(KT, WBITS * FN).fb);
        let lc = layout!(spatial(WM, WN).local(FM, FN).fc);
        let mut acc = register::<i32>(
            layout!(spatial(WM, WN).local(ABITS, WBITS).local(FM, FN).fc),
            0,
        );
        if STAGES == 0 {
            // Registers: the next step's words (past k the view masks them to zero) are loaded
            // before the current step's dot.
            let mut xa = load_global(ga, la_words, [0, bi * bm, 0]);
            let mut xw = load_global(gw, lw_words, [0, bj * bn, 0]);
            for kb in 0..k / (KT * 256) {
                let na = load_global(ga, la_words, [0, bi * bm, (kb + 1) * kw]);
                let nw = load_global(gw, lw_words, [0, bj * bn, (kb + 1) * kw]);
                acc = dot(view::<u1>(xa, la_bits), view::<u1>(xw, lw_bits), acc);
                xa = na;
                xw = nw;
            }
        } else {
            // A ring of STAGES shared-memory stages filled by cp.async, STAGES - 1 steps ahead.
            // Rows are padded to 4 words modulo 8 (`8 KT + 4`), so that the 4-byte fragment loads
            // of a warp (rows g, words t of the register) fall on 32 distinct banks.
            let pa = 4;
            let pw = 4;
            let sa = shared::<u32>([STAGES, ABITS, bm, kw + pa]);
            let sw = shared::<u32>([STAGES, WBITS, bn, kw + pw]);
            for s in 0..STAGES - 1 {
                copy_async(
                    ga,
                    slice_shared(sa, [s, 0, 0, 0], [ABITS, bm, kw]),
                    [0, bi * bm, s * kw],
                );
                copy_async(
                    gw,
                    slice_shared(sw, [s, 0, 0, 0], [WBITS, bn, kw]),
                    [0, bj * bn, s * kw],
                );
                commit_group();
            }
            for kb in 0..k / (KT * 256) {
                wait_group(STAGES - 2);
                sync();
                let stage = kb % STAGES;
                let xa = load_shared(sa, la_words, [stage, 0, 0, 0]);
                let xw = load_shared(sw, lw_words, [stage, 0, 0, 0]);
                let next = kb + STAGES - 1;
                copy_async(
                    ga,
                    slice_shared(sa, [next % STAGES, 0, 0, 0], [ABITS, bm, kw]),
                    [0, bi * bm, next * kw],
                );
                copy_async(
                    gw,
                    slice_shared(sw, [next % STAGES, 0, 0, 0], [WBITS, bn, kw]),
                    [0, bj * bn, next * kw],
                );
                commit_group();
                acc = dot(view::<u1>(xa, la_bits), view::<u1>(xw, lw_bits), acc);
            }
        }
        // Recovery: the plane pair (q, p) as a leading dimension, shifted by p + q and summed.
        let pairs = view::<i32>(
            acc,
            layout!(
                spatial(1, WM, WN)
                    .local(ABITS * WBITS, 1, 1)
                    .local(FM, FN)
                    .fc
            ),
        );
        let s = arange(layout!(local(ABITS * WBITS, 1, 1)), 0, 0);
        let shift = s % WBITS + s / WBITS;
        let x = view::<i32>(sum(pairs << shift, 0), lc);
        apt_finish(x, lc, bi * bm, bj * bn);
    }

    /// The same layer product as [`apt_gemm`] on the integer warpgroup MMA (sm_90a): the codes
    /// (`0..2^bits`, one byte each: `a_codes [m, k]` in the words [`apt_quantize_act`] writes
    /// with `CODES = 1`, and `w_codes [n, k]`) multiply as `u8` on `wgmma m64nNk32.s32.u8.u8`, which sums
    /// `X = Σ_k code_a · code_w` exactly in i32 without the bit-serial recovery; the bipolar
    /// correction, the scales and the store are [`apt_gemm`]'s, so both give the same bits.
    /// The pipeline is the dense copy-engine GEMM's (`kernels::gemm::gemm_tma_i8`): a ring of
    /// `STAGES` 128-byte rows of `k` per operand row filled by `tma_load` on mbarriers, blocks
    /// in groups of `GROUP` block rows, launched as the quantizer's programmatic dependent (the
    /// weight's first stages requested before `wait_prior_grid()`, as in [`apt_gemm_bgmma`]).
    /// A byte per code is 8 / `bits` times the planes' bytes,
    /// which pays where the product is compute-bound (large `m`): the integer tensor cores run
    /// the whole code product in one instruction stream where the 1-bit ones need
    /// `ABITS · WBITS` plane pairs. `k` a multiple of 16 (the copy engine's 16-byte rows).
    #[tilus::kernel(
    lazy,
    grid = [cdiv(n, BN) * cdiv(m, BM)],
    warps = BM / 16,
    space(
        WBITS = [2],
        ABITS = [2],
        BM = [128, 64],
        BN = [256, 128],
        STAGES = [4],
        GROUP = [8],
        STORE_ACC = [0, 1],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemm_igmma<
        const WBITS: i32,
        const ABITS: i32,
        const BM: i32,
        const BN: i32,
        const STAGES: i32,
        const GROUP: i32,
        const STORE_ACC: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        a_codes: Global<u32>,
        w_codes: Global<u8>,
        a_sums: Global<i32>,
        a_scales: Global<f32>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
    ) {
        let [pid] = block_indices();
        let rows = cdiv(m, BM);
        let cols = cdiv(n, BN);
        let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
        // The activation codes come in the quantizer's words (`CODES = 1`), read as bytes.
        let ga = view_global::<u8>(a_codes, [m, k]);
        let gw = view_global(w_codes, [n, k]);
        let sa = shared::<u8>([STAGES, BM, 128], swizzle(3, 4, 3));
        let sw = shared::<u8>([STAGES, BN, 128], swizzle(3, 4, 3));
        let full = mbarriers(STAGES, 2);
        let lc = layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 8).mma_c);
        let mut acc = register::<i32>(lc, 0);
        let steps = cdiv(k, 128);
        // Launched as the quantizer's dependent: the weight's first stages before the wait,
        // the activations' (the quantizer's codes) after it.
        for s in 0..STAGES - 1 {
            if s < steps {
                tma_load(
                    gw,
                    slice_shared(sw, [s, 0, 0], [BN, 128]),
                    [bj * BN, s * 128],
                    full,
                    s,
                );
            }
        }
        wait_prior_grid();
        for s in 0..STAGES - 1 {
            if s < steps {
                tma_load(
                    ga,
                    slice_shared(sa, [s, 0, 0], [BM, 128]),
                    [bi * BM, s * 128],
                    full,
                    s,
                );
            }
        }
        for t in 0..steps {
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            let ta = slice_shared(sa, [st, 0, 0], [BM, 128]);
            let tw = permute_shared(slice_shared(sw, [st, 0, 0], [BN, 128]), [1, 0]);
            acc = dot_async(ta, tw, acc);
            dot_wait(1);
            // Every warpgroup retired step t - 1: its stage can be refilled.
            sync();
            let next = t + STAGES - 1;
            if next < steps {
                let ns = next % STAGES;
                tma_load(
                    ga,
                    slice_shared(sa, [ns, 0, 0], [BM, 128]),
                    [bi * BM, next * 128],
                    full,
                    ns,
                );
                tma_load(
                    gw,
                    slice_shared(sw, [ns, 0, 0], [BN, 128]),
                    [bj * BN, next * 128],
                    full,
                    ns,
                );
            }
        }
        dot_wait(0);
        apt_finish(acc, lc, bi * BM, bj * BN);
    }

    /// The same layer product as [`apt_gemm`] on the 1-bit warpgroup MMA (sm_90a,
    /// `wgmma m64nNk256.s32.b1.b1.and.popc`): the bit planes as [`apt_gemm`] reads them
    /// (`[bits][rows][k / 32]` words, viewed as bits `[bits · rows, k]`), copied by the copy
    /// engine in 1024-bit rows into a ring of `STAGES` stages, and multiplied as the stacked
    /// `[ABITS · BM, 1024] x [1024, WBITS · BN]` product of every plane pair per stage: the A
    /// rows are (plane q, row), the B columns (plane p, column), and each thread holds all
    /// `ABITS · WBITS` pairs of its outputs (`local(ABITS, 1)` over the warpgroups' row
    /// blocks, the B planes inside the instruction's `N = WBITS · BN`), so the recovery
    /// `x = Σ 2^(p + q) · pair` is in registers, as in [`apt_gemm`], and [`apt_finish`] ends
    /// it. With `WGN = 2` two warpgroups split the block's columns: the B rows are then
    /// ordered (half, plane, column), each warpgroup's `N` holding every plane of its half. A
    /// tile row past `m` (or `n`) reads the next plane's rows; those outputs are never stored.
    /// The kernel is launched as the quantizer's programmatic dependent: the weight's first
    /// `STAGES - 1` stages are requested before `wait_prior_grid()`, the activations' stages
    /// and the rows' and columns' terms of the epilogue after it, before the k loop. The 1-bit
    /// wgmma runs at 8 times the integer one's bit rate (H200: 15.2 P bit-ops/s against 1.9
    /// POPS for `u8`), and the planes are `bits / 8` of the code bytes [`apt_gemm_igmma`]
    /// reads. `k` a multiple of 128 (16-byte rows).
    ///
    /// With `STORE_BOX` of 16, 32 or 64 the f16 outputs go through a shared tile (`BM · BN`
    /// halves beside the ring, which the planner keeps alive to the end: a refill's copy could
    /// be in flight after the loop as far as it can tell) in boxes of `STORE_BOX` columns,
    /// swizzled to the box's width, and the copy engine stores them (`tma_store`): whole lines
    /// instead of each warp's 16-byte pieces of eight rows, and the block exits without
    /// draining its stores. It divides a warpgroup's columns; `n` a multiple of 8 (16-byte
    /// rows for the tensor map). With 0 the threads store their fragments directly.
    #[tilus::kernel(
    lazy,
    grid = [cdiv(n, BN) * cdiv(m, BM)],
    warps = BM / 16 * WGN,
    space(
        WBITS = [2],
        ABITS = [2],
        BM = [64, 128],
        BN = [64, 32],
        WGN = [1, 2],
        STAGES = [4, 3, 2],
        GROUP = [8],
        STORE_ACC = [0, 1],
        STORE_BOX = [0, 16],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemm_bgmma<
        const WBITS: i32,
        const ABITS: i32,
        const BM: i32,
        const BN: i32,
        const WGN: i32,
        const STAGES: i32,
        const GROUP: i32,
        const STORE_ACC: i32,
        const STORE_BOX: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        a_planes: Global<u32>,
        w_planes: Global<u32>,
        a_sums: Global<i32>,
        a_scales: Global<f32>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
    ) {
        let [pid] = block_indices();
        let rows = cdiv(m, BM);
        let cols = cdiv(n, BN);
        let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
        // Plane q's row r is row q·m + r of the stacked bits.
        let ga = view_global::<u1>(a_planes, [ABITS * m, k]);
        let gw = view_global::<u1>(w_planes, [WBITS * n, k]);
        let sa = shared::<u1>([STAGES, ABITS * BM, 1024], swizzle(3, 7, 3));
        let sw = shared::<u1>([STAGES, WBITS * BN, 1024], swizzle(3, 7, 3));
        let full = mbarriers(STAGES, ABITS + WBITS * WGN);
        let hn = BN / WGN;
        // Stage s of step t: one box per plane of A and per (half, plane) of B, all on barrier s.
        let fill_a = |s: i32, t: i32| {
            #[unroll]
            for q in 0..ABITS {
                tma_load(
                    ga,
                    slice_shared(sa, [s, q * BM, 0], [BM, 1024]),
                    [q * m + bi * BM, t * 1024],
                    full,
                    s,
                );
            }
        };
        let fill_w = |s: i32, t: i32| {
            #[unroll]
            for h in 0..WGN {
                #[unroll]
                for p in 0..WBITS {
                    tma_load(
                        gw,
                        slice_shared(sw, [s, (h * WBITS + p) * hn, 0], [hn, 1024]),
                        [p * n + bj * BN + h * hn, t * 1024],
                        full,
                        s,
                    );
                }
            }
        };
        let lc = layout!(spatial(BM / 64, WGN).spatial(4, 1).local(1, hn / 8).mma_c);
        let steps = cdiv(k, 1024);
        // The weight's first stages are requested before the wait: launched as a dependent of
        // the quantizer, they (and the set-up above) overlap it. Everything the quantizer
        // writes (A's planes, sums and scales) is read after the wait. (Filling every stage up
        // front where the ring holds all of k measured no faster: perf note 50.)
        for s in 0..STAGES - 1 {
            if s < steps {
                fill_w(s, s);
            }
        }
        wait_prior_grid();
        for s in 0..STAGES - 1 {
            if s < steps {
                fill_a(s, s);
            }
        }
        let (sa_rows, sw_cols, fa_rows, fw_cols) = apt_row_col_terms(lc, bi * BM, bj * BN);
        let mut acc = register::<i32>(
            layout!(
                local(ABITS, 1)
                    .spatial(BM / 64, WGN)
                    .spatial(4, 1)
                    .local(1, WBITS * hn / 8)
                    .mma_c
            ),
            0,
        );
        for t in 0..steps {
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            let ta = slice_shared(sa, [st, 0, 0], [ABITS * BM, 1024]);
            let tw = permute_shared(slice_shared(sw, [st, 0, 0], [WBITS * BN, 1024]), [1, 0]);
            acc = dot_async(ta, tw, acc);
            dot_wait(1);
            // Every warpgroup retired step t - 1: its stage can be refilled.
            sync();
            let next = t + STAGES - 1;
            if next < steps {
                fill_a(next % STAGES, next);
                fill_w(next % STAGES, next);
            }
        }
        dot_wait(0);
        // Recovery: the plane pair (q, p) as a leading dimension, shifted by p + q and summed.
        let pairs = view::<i32>(
            acc,
            layout!(
                local(ABITS * WBITS, 1, 1)
                    .spatial(BM / 64, WGN)
                    .spatial(4, 1)
                    .local(1, hn / 8)
                    .mma_c
            ),
        );
        let s = arange(layout!(local(ABITS * WBITS, 1, 1)), 0, 0);
        let shift = s % WBITS + s / WBITS;
        let x = view::<i32>(sum(pairs << shift, 0), lc);
        if STORE_BOX > 0 {
            let out = apt_outputs(x, bi * BM, bj * BN, sa_rows, sw_cols, fa_rows, fw_cols);
            // Box b holds columns [b, b + 1) · STORE_BOX of the block: warpgroup h's
            // `hn / STORE_BOX` boxes in order, each 8-column fragment group `j` of `lc` going
            // to box `j / (STORE_BOX / 8)` (the same registers, viewed three-dimensionally).
            let boxes = WGN * hn / STORE_BOX;
            let so = shared::<f16>([boxes, BM, STORE_BOX], swizzle(STORE_BOX / 32 + 1, 3, 3));
            let lb = layout!(
                spatial(WGN, BM / 64, 1)
                    .local(hn / STORE_BOX, 1, 1)
                    .spatial(1, 4, 1)
                    .local(1, 1, STORE_BOX / 8)
                    .mma_c
            );
            store_shared(view::<f16>(out, lb), so, [0, 0, 0]);
            #[unroll]
            for b in 0..boxes {
                tma_store(
                    slice_shared(so, [b, 0, 0], [BM, STORE_BOX]),
                    view_global(y, [m, n]),
                    [bi * BM, bj * BN + b * STORE_BOX],
                );
            }
        } else {
            apt_finish_with(x, bi * BM, bj * BN, sa_rows, sw_cols, fa_rows, fw_cols);
        }
    }

    /// The activation quantizer: per token (row of `x[m, k]`, f16), `scale = max(amax, 2^-100) /
    /// (2^ABITS - 1)`, codes by [`bipolar_codes`] (the host's `(v + 2^ABITS - 1) / 2` of `v = clamp(2·floor(x · (1 / scale) / 2) + 1)`),
    /// written as `ABITS` bit planes `[ABITS][m][k / 32]` with the row's `Σ code` and scale: the
    /// f32 operations of [`crate::apt::matrix::AptMatrix::quantize`] with [`ScaleRule::Max`], so the
    /// codes agree exactly. One block per row; each thread holds 32 consecutive elements (one word
    /// of each plane). With `ONE_PASS = 1` the row (at most `1024 · WARPS` elements) is read once
    /// and kept in registers; otherwise it is read in chunks of `1024 · WARPS` elements twice, for
    /// the maximum and for the codes. `k` a multiple of 32.
    ///
    /// With `CODES = 1` the codes are written as bytes `[m][k]` instead of planes (the buffer
    /// `planes` then holds `m · k / 4` words), for [`apt_gemm_igmma`].
    ///
    /// [`ScaleRule::Max`]: crate::apt::matrix::ScaleRule::Max
    #[tilus::kernel(
    lazy,
    grid = [m],
    warps = WARPS,
    space(ABITS = [2, 4], WARPS = [1, 4], ONE_PASS = [0, 1], CODES = [0, 1]),
)]
    pub fn apt_quantize_act<
        const ABITS: i32,
        const WARPS: i32,
        const ONE_PASS: i32,
        const CODES: i32,
    >(
        m: i32,
        k: i32,
        x: Global<f16>,
        planes: GlobalMut<u32>,
        sums: GlobalMut<i32>,
        scales: GlobalMut<f32>,
    ) {
        // The GEMM launched as this kernel's dependent may start now: it waits for the whole
        // grid before it reads anything written here.
        launch_dependents();
        let maxv = (1 << ABITS) - 1;
        let words = 32 * WARPS;
        let [r] = block_indices();
        // Row r as [k / 32, 32]: each thread holds one word's 32 elements.
        let gx = view_global(x, [m, k / 32, 32]);
        let tile = layout!(spatial(1, 32 * WARPS, 1).local(1, 1, 32));
        let chunks = cdiv(k / 32, words);

        let mut total = register::<i32>(layout!(local(1, 1, 1)), 0);
        let bit = arange(tile, 2, 0);
        // The codes of chunk c (values xs) into the planes and the row's sum of codes.
        let quantize = |xs: Tensor, c: i32, scale: Tensor| {
            let code = bipolar_codes(xs, scale);
            // Words past the row's end are not part of it (their stores are masked by the view).
            let inside = arange(tile, 1, c * words) < k / 32;
            total = total + sum(sum(select(inside, code, 0), 2), 1);
            if CODES == 1 {
                let gc = view_global::<u8>(planes, [m, k / 32, 32]);
                store_global(cast::<u8>(code), gc, [r, c * words, 0]);
            } else {
                store_planes(code, bit, ABITS, r, c * words);
            }
        };
        let scale = if ONE_PASS == 1 {
            let xs = cast::<f32>(load_global(gx, tile, [r, 0, 0]));
            let amax = reduce_max(reduce_max(abs(xs), 2), 1);
            let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
            quantize(xs, 0, scale);
            scale
        } else {
            let mut amax = register::<f32>(layout!(local(1, 1, 1)), 0.0);
            for c in 0..chunks {
                let xs = abs(cast::<f32>(load_global(gx, tile, [r, c * words, 0])));
                amax = max(amax, reduce_max(reduce_max(xs, 2), 1));
            }
            let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
            for c in 0..chunks {
                quantize(
                    cast::<f32>(load_global(gx, tile, [r, c * words, 0])),
                    c,
                    scale,
                );
            }
            scale
        };
        store_global(total, view_global(sums, [m, 1, 1]), [r, 0, 0]);
        store_global(scale, view_global(scales, [m, 1, 1]), [r, 0, 0]);
    }

    /// The weight re-layout on the GPU: the codes `codes[m, k]` (`0..2^BITS`, one byte each, as
    /// [`crate::apt::matrix::AptMatrix::codes`]) into the bit planes `[BITS][m][k / 32]` words
    /// and the rows' sums of codes, the same bits as the host's
    /// [`AptMatrix::planes`](crate::apt::matrix::AptMatrix::planes) and
    /// [`row_sums`](crate::apt::matrix::AptMatrix::row_sums). One block per row, in chunks of
    /// `32 · WARPS` words; `k` a multiple of 32. A code past `2^BITS - 1` keeps its low `BITS`
    /// bits in the planes but counts whole in the sum: the caller checks the codes.
    #[tilus::kernel(
    lazy,
    grid = [m],
    warps = WARPS,
    space(BITS = [1, 2, 3, 4, 5, 6, 7, 8], WARPS = [4]),
)]
    pub fn apt_split_planes<const BITS: i32, const WARPS: i32>(
        m: i32,
        k: i32,
        codes: Global<u8>,
        planes: GlobalMut<u32>,
        sums: GlobalMut<i32>,
    ) {
        let words = 32 * WARPS;
        let [r] = block_indices();
        let gc = view_global(codes, [m, k / 32, 32]);
        let tile = layout!(spatial(1, 32 * WARPS, 1).local(1, 1, 32));
        let bit = arange(tile, 2, 0);
        let mut total = register::<i32>(layout!(local(1, 1, 1)), 0);
        for c in 0..cdiv(k / 32, words) {
            // Words past the row's end load as 0 (masked), adding nothing to the sum.
            let code = cast::<i32>(load_global(gc, tile, [r, c * words, 0]));
            total = total + sum(sum(code, 2), 1);
            store_planes(code, bit, BITS, r, c * words);
        }
        store_global(total, view_global(sums, [m, 1, 1]), [r, 0, 0]);
    }

    /// The fused decode layer (`m <= 16` per block): [`apt_quantize_act`] and [`apt_gemm`] in one
    /// launch. Each block quantizes its (at most 16) tokens of `x[m, k]` (f16) itself, the
    /// quantizer's f32 operations exactly, into bit planes in shared memory
    /// (`[ABITS][16][KWP + 8]` words, `KWP + 4` with the ring: `KWP = k / 32` rounded up to the chunk of `32 · WN` words,
    /// plus 8 words of padding so the 8-byte fragment loads of 8 rows hit distinct banks), with the
    /// rows' sums of codes and scales; rows past `m` are zero. The first weight words are in flight
    /// before that prologue, so it overlaps their latency. The k loop then reads A from shared
    /// memory and B either from global memory one step ahead in registers (`STAGES = 0`) or from a
    /// cp.async ring of `STAGES` shared-memory stages (`STAGES - 1` steps in flight), as
    /// [`apt_gemm`] with `WM = FM = 1`; the epilogue is the same. Repeating the quantization per block costs reads of the activation
    /// from L2 (`16 · k` f16 at most per block) instead of a second launch.
    ///
    /// With `SPLIT > 1` the grid's third dimension splits k into `SPLIT` slices of whole steps; each
    /// block reads its rows whole for the scales (the maximum is over all of k) but quantizes and
    /// multiplies only its slice, and the last block of each output tile adds the exact partials
    /// (the slice's `4 Σ x_a x_w - 2 (2^W - 1) Σ x_a`) from `workspace
    /// [SPLIT, m, n]` (i32) and finishes the tile, counted on `semaphores [cdiv(m, 16) · n / BN]`
    /// (zero before the launch, left zero after it). Any buffer will do for both with `SPLIT = 1`.
    #[tilus::kernel(
    lazy,
    grid = [cdiv(m, 16), n / (WN * FN * 8), SPLIT],
    warps = WN,
    space(
        WBITS = [2],
        ABITS = [2, 4],
        WN = [4],
        FN = [1, 2],
        KT = [2],
        KWP = [128],
        STAGES = [0, 4],
        STORE_ACC = [0, 1],
        SPLIT = [1, 4],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemv<
        const WBITS: i32,
        const ABITS: i32,
        const WN: i32,
        const FN: i32,
        const KT: i32,
        const KWP: i32,
        const STAGES: i32,
        const STORE_ACC: i32,
        const SPLIT: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        x: Global<f16>,
        w_planes: Global<u32>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
        workspace: GlobalMut<i32>,
        semaphores: GlobalMut<i32>,
    ) {
        let maxv = (1 << ABITS) - 1;
        let bn = WN * FN * 8;
        let kw = KT * 8;
        let words = 32 * WN;
        let [bi, bj, bs] = block_indices();
        // This block's k steps: slice `bs` of `SPLIT` (the host keeps SPLIT dividing the steps).
        let per = k / (KT * 256) / SPLIT;
        let kb0 = bs * per;
        let gw = view_global(w_planes, [WBITS, n, k / 32]);
        // The fragments as in `apt_gemm`; the activation planes' rows padded to 8 words (paired:
        // 8-byte loads of 8 rows on distinct banks) or 4 modulo 8 (standard, with the ring).
        let (fa, fb, fc, wa, wb) = u1_fragments();
        let pad = if STAGES == 0 { 8 } else { 4 };
        let lw_words = layout!(
            reduce(column_spatial(1, WN, 1), [2])
                .local(1, 1, KT)
                .local(WBITS, FN, 1)
                .wb
        );
        // The first weight words are in flight before the prologue: into registers (STAGES = 0) or
        // into STAGES - 1 stages of a cp.async ring (rows padded against bank conflicts).
        let pw = if STAGES == 0 { 8 * ((KT + 1) % 2) } else { 4 };
        let sw = shared::<u32>([max(STAGES, 1), WBITS, bn, kw + pw]);
        let mut xw = load_global(gw, lw_words, [0, bj * bn, kb0 * kw]);
        if STAGES > 0 {
            for s in 0..STAGES - 1 {
                copy_async(
                    gw,
                    slice_shared(sw, [s, 0, 0, 0], [WBITS, bn, kw]),
                    [0, bj * bn, (kb0 + s) * kw],
                );
                commit_group();
            }
        }

        // Prologue: the block's tokens quantized into shared memory.
        let sp = shared::<u32>([ABITS, 16, KWP + pad]);
        let ss = shared::<i32>([16, 1]);
        let sf = shared::<f32>([16, 1]);
        let gx = view_global(x, [m, k / 32, 32]);
        let tile = layout!(spatial(1, 32 * WN, 1).local(1, 1, 32));
        let wl = layout!(spatial(1, 1, 32 * WN));
        let chunks = cdiv(k / 32, words);
        // The words of k this block multiplies: `[w0, w1)`.
        let w0 = kb0 * kw;
        let w1 = min(k / 32, (kb0 + per) * kw);
        let bit = arange(tile, 2, 0);
        let rows = min(16, m - bi * 16);
        for rr in 0..rows {
            let row = bi * 16 + rr;
            let mut amax = register::<f32>(layout!(local(1, 1, 1)), 0.0);
            for c in 0..chunks {
                let xs = abs(cast::<f32>(load_global(gx, tile, [row, c * words, 0])));
                amax = max(amax, reduce_max(reduce_max(xs, 2), 1));
            }
            let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
            // Codes for this block's slice of k only (the chunks that hold it), their sum over the
            // slice's words.
            let mut total = register::<i32>(layout!(local(1, 1, 1)), 0);
            for c in w0 / words..min(chunks, cdiv(w1, words)) {
                let xs = cast::<f32>(load_global(gx, tile, [row, c * words, 0]));
                let code = bipolar_codes(xs, scale);
                let wi = arange(tile, 1, c * words);
                let inside = (wi >= w0) & (wi < w1);
                total = total + sum(sum(select(inside, code, 0), 2), 1);
                #[unroll]
                for q in 0..ABITS {
                    let word = sum(((code >> q) & 1) << bit, 2);
                    store_shared(view::<u32>(word, wl), sp, [q, rr, c * words]);
                }
            }
            store_shared(view::<i32>(total, layout!(local(1, 1))), ss, [rr, 0]);
            store_shared(view::<f32>(scale, layout!(local(1, 1))), sf, [rr, 0]);
        }
        // Rows past m are zero (their outputs are masked; nothing reads uninitialised memory).
        let zw = register::<u32>(wl, 0);
        for rr in rows..16 {
            #[unroll]
            for q in 0..ABITS {
                for c in 0..KWP / words {
                    store_shared(zw, sp, [q, rr, c * words]);
                }
            }
            store_shared(register::<i32>(layout!(local(1, 1)), 0), ss, [rr, 0]);
            store_shared(register::<f32>(layout!(local(1, 1)), 0.0), sf, [rr, 0]);
        }
        sync();

        // The k loop: A from shared memory, B one step ahead from global memory.
        let la_words = layout!(reduce(spatial(1, 1, WN), [2]).local(ABITS, 1, KT).wa);
        let la_bits = layout!(reduce(spatial(1, WN), [1]).local(ABITS, KT).fa);
        let lw_bits = layout!(reduce(spatial(1, WN), [0]).local(KT, WBITS * FN).fb);
        let lc = layout!(spatial(1, WN).local(1, FN).fc);
        let mut acc = register::<i32>(
            layout!(spatial(1, WN).local(ABITS, WBITS).local(1, FN).fc),
            0,
        );
        if STAGES == 0 {
            for kb in kb0..kb0 + per {
                let nw = load_global(gw, lw_words, [0, bj * bn, (kb + 1) * kw]);
                let xa = load_shared(sp, la_words, [0, 0, kb * kw]);
                acc = dot(view::<u1>(xa, la_bits), view::<u1>(xw, lw_bits), acc);
                xw = nw;
            }
        } else {
            for j in 0..per {
                wait_group(STAGES - 2);
                sync();
                let xw = load_shared(sw, lw_words, [j % STAGES, 0, 0, 0]);
                let xa = load_shared(sp, la_words, [0, 0, (kb0 + j) * kw]);
                let next = j + STAGES - 1;
                copy_async(
                    gw,
                    slice_shared(sw, [next % STAGES, 0, 0, 0], [WBITS, bn, kw]),
                    [0, bj * bn, (kb0 + next) * kw],
                );
                commit_group();
                acc = dot(view::<u1>(xa, la_bits), view::<u1>(xw, lw_bits), acc);
            }
        }
        wait_group(0);
        // Recovery and epilogue as in `apt_gemm`.
        let pairs = view::<i32>(
            acc,
            layout!(spatial(1, 1, WN).local(ABITS * WBITS, 1, 1).local(1, FN).fc),
        );
        let s = arange(layout!(local(ABITS * WBITS, 1, 1)), 0, 0);
        let shift = s % WBITS + s / WBITS;
        let xsum = view::<i32>(sum(pairs << shift, 0), lc);
        let lrow = layout!(reduce(lc, [1]));
        let lcol = layout!(reduce(lc, [0]));
        // The AND form's terms over this slice: `4 Σ x_a x_w - 2 (2^W - 1) Σ x_a` (the slice's
        // activation codes); the weight's and the constant term are over all of k, added once.
        let ma = (1 << ABITS) - 1;
        let mw = (1 << WBITS) - 1;
        let sa = load_shared(ss, lrow, [0, 0]);
        let part = xsum * 4 - sa * (2 * mw);
        let finish = |part: Tensor| {
            let sw = load_global(view_global(w_sums, [1, n]), lcol, [0, bj * bn]);
            let d = part - sw * (2 * ma) + k * (ma * mw);
            if STORE_ACC == 1 {
                store_global(d, view_global(acc_out, [m, n]), [bi * 16, bj * bn]);
            }
            let fa = load_shared(sf, lrow, [0, 0]);
            let fw = load_global(view_global(w_scales, [1, n]), lcol, [0, bj * bn]);
            let out = cast::<f32>(d) * fa * fw;
            store_global(cast::<f16>(out), view_global(y, [m, n]), [bi * 16, bj * bn]);
        };
        if SPLIT == 1 {
            finish(part);
        } else {
            // Split k in one launch (as the quantized matmul's): each block stores its exact
            // partial, counts it on the tile's semaphore (one thread's atomic), and the block that
            // counts last adds the partials (integers: any order gives the same sum), finishes
            // the tile and resets the semaphore for the next launch.
            let tiles_m = cdiv(m, 16);
            let gws = view_global(workspace, [SPLIT, m, n]);
            store_global(part, gws, [bs, bi * 16, bj * bn]);
            // Release: every thread's stores, then the count.
            sync();
            fence();
            let lanes = layout!(spatial(WN * 32));
            let lane = arange(lanes, 0, 0);
            let index = select(lane == 0, arange(lanes, 0, bj * tiles_m + bi), -1);
            let gsem = view_global(semaphores, [tiles_m * (n / bn)]);
            let old = atomic_add(gsem, index, register::<i32>(lanes, 1));
            // Acquire: after the count, before the barrier that hands it to every thread.
            fence();
            let arrived = item(sum(old, 0));
            if arrived == SPLIT - 1 {
                let mut total = load_global(gws, lc, [0, bi * 16, bj * bn]);
                for part in 1..SPLIT {
                    total = total + load_global(gws, lc, [part, bi * 16, bj * bn]);
                }
                finish(total);
                store_global(
                    register::<i32>(layout!(local(1)), 0),
                    gsem,
                    [bj * tiles_m + bi],
                );
            }
        }
    }

    /// The bit-serial decode GEMV on the CUDA cores: `y[t, n]` for one token `t` per block row of
    /// the grid, the activation quantized in the block's prologue (the quantizer's f32 operations
    /// exactly, as [`apt_gemv`]), the plane-pair products counted with `popc` instead of the 1-bit
    /// tensor cores.
    ///
    /// At one token the 1-bit mma wastes 15 of its 16 rows (or 7 of 8 columns transposed): W3A4 at
    /// 14336 x 4096 costs 22 G bit operations for 59 M weights. Here a product of one weight word
    /// and one activation word is an `AND` and a `popc`, 32 k at a time and nothing padded:
    /// `Σ_k x_a x_w = Σ_{p,q} 2^(p+q) Σ_words popc(w_p AND a_q)`.
    ///
    /// A row group is `WARPS` warps of `R` weight rows each; a lane holds `VEC` consecutive words
    /// of each of its warp's rows and planes (16-byte loads at `VEC = 4`, two at 8; a warp reads `32 · VEC`
    /// consecutive words of a row: coalesced in the planes' `[WBITS][n][k / 32]` layout, no
    /// re-layout), the activation words of the same k from shared memory (the same for every
    /// warp: broadcast). Each lane keeps one partial sum per row over all of k; the lanes of a row
    /// are added once at the group's end (shuffles). A block quantizes its token once (a row of
    /// up to two prologue chunks loaded at once and kept in registers for the maximum and the
    /// codes, longer rows read twice in chunks) and then
    /// walks row groups `bj, bj + blocks, ..` (`blocks` a launch argument, about two per SM), so the
    /// quantization is not repeated per group. The next chunk's weight words are loaded before the
    /// current one is counted, and the first chunk's before the prologue, so the quantization
    /// overlaps their latency.
    ///
    /// `KWP` is the activation planes' capacity in words: at least `k / 32` rounded up to
    /// `32 · WARPS / QS` (the prologue's chunk, `QS` threads per word; the host rounds `k / 32` up to a power of two first, so
    /// that one compiled kernel serves several `k`); `VEC` divides `WARPS`. Rows past `n` read zero
    /// weight words and are not stored.
    #[tilus::kernel(
    lazy,
    grid = [min(cdiv(n, WARPS * R), blocks), m],
    warps = WARPS,
    space(
        WBITS = [2],
        ABITS = [2, 4],
        WARPS = [4, 8],
        R = [2, 4],
        VEC = [2, 4],
        KWP = [256],
        STAGES = [0, 4],
        QS = [1, 4],
        STORE_ACC = [0, 1],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemv_popc<
        const WBITS: i32,
        const ABITS: i32,
        const WARPS: i32,
        const R: i32,
        const VEC: i32,
        const KWP: i32,
        const STAGES: i32,
        const QS: i32,
        const STORE_ACC: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        blocks: i32,
        x: Global<f16>,
        w_planes: Global<u32>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
    ) {
        let maxv = (1 << ABITS) - 1;
        let rows = WARPS * R;
        let cw = 32 * VEC;
        let kw = k / 32;
        let [bj, t] = block_indices();
        // The weight words of one chunk: warp w's rows `R·w..R·w + R`, lane l's words
        // `VEC·l..VEC·l + VEC` of the chunk, every plane.
        let gw = view_global(w_planes, [WBITS, n, kw]);
        let lw = layout!(spatial(1, WARPS, 1)
            .local(WBITS, R, 1)
            .spatial(1, 1, 32)
            .local(1, 1, VEC));
        let lw4 = layout!(spatial(1, WARPS, 1, 1)
            .local(WBITS, R, 1, 1)
            .spatial(1, 1, 32, 1)
            .local(1, 1, 1, VEC));
        // The block's row groups `bj, bj + nb, ..`, each over all of k in `nch` chunks: step `i` is
        // chunk `i % nch` of the block's group `i / nch`.
        let nb = min(cdiv(n, rows), blocks);
        let nch = cdiv(kw, cw);
        let steps = cdiv(cdiv(n, rows) - bj, nb) * nch;
        // The prologue's token: `QS` threads share a word (32 / QS elements each, its bits
        // gathered by shuffles), so a block of many warps quantizes a short row in a short chain.
        // Up to two chunks (`KWP` words, the planes' capacity) are read at once and kept in
        // registers as f16 for the maximum and the codes: one round trip to memory instead of
        // one per chunk and pass. They are requested first, as every block waits for them
        // before it counts a word, and by the copy engine in a group of their own: ptxas moves
        // register loads (and the arithmetic on them) past the weight's requests, which then
        // left only once the token had arrived; copies stay in their groups' order.
        let words = 32 * WARPS / QS;
        let gx = view_global(x, [m, kw, 32]);
        let one_trip = KWP <= 2 * words;
        let sx = shared::<f16>([1, if one_trip { KWP } else { 1 }, 32]);
        if one_trip {
            copy_async(gx, sx, [t, 0, 0]);
            commit_group();
        }
        // The first weight words are in flight before the prologue: one chunk in registers
        // (`STAGES = 0`), or `STAGES - 1` chunks of a cp.async ring of whole groups' chunks
        // (steps past the block's last group copy rows past n: masked, no access).
        let mut xw = if STAGES == 0 {
            load_global(gw, lw, [0, bj * rows, 0])
        } else {
            ()
        };
        // The ring's fills walk the steps as the loop does, chunk `fc` of group `fg`: counted,
        // not divided out of the step by the runtime `nch`. Behind a chain of divisions ptxas
        // scheduled the first copies after the token's first use, so they left only once the
        // token had arrived. Steps past the block's last group copy rows past n (masked, no
        // access).
        let groups = cdiv(n, rows);
        let ring = shared::<u32>([max(STAGES, 1), WBITS, rows, cw]);
        let mut fg = bj;
        let mut fc = 0;
        for j in 0..STAGES - 1 {
            copy_async(
                gw,
                slice_shared(ring, [j, 0, 0, 0], [WBITS, rows, cw]),
                [0, min(fg, groups) * rows, fc * cw],
            );
            commit_group();
            if fc == nch - 1 {
                fc = 0;
                fg += nb;
            } else {
                fc += 1;
            }
        }

        // Prologue: token t quantized into shared memory, `[ABITS][KWP]` words, the chunks that
        // hold k (zero past k; the k loop reads no further).
        let sp = shared::<u32>([ABITS, KWP]);
        let chunks = max(KWP / words, 1);
        let tile_all = layout!(local(1, chunks, 1)
            .spatial(1, words, QS)
            .local(1, 1, 32 / QS));
        let xh = if one_trip {
            // The token's group is the oldest: wait for it alone.
            wait_group(max(STAGES - 1, 0));
            sync();
            load_shared(sx, tile_all, [0, 0, 0])
        } else {
            ()
        };
        let tile = layout!(spatial(1, words, QS).local(1, 1, 32 / QS));
        let wl = layout!(spatial(1, words).replicated(QS));
        let mut total = register::<i32>(layout!(local(1, 1, 1)), 0);
        // The codes of `xs` (f32 in layout `lay`, words `first..` of the row; zero past k)
        // added to the token's sum and stored as `ABITS` planes (`wlay`: one word a thread).
        let planes = |xs, scale, lay, wlay, first| {
            let code = bipolar_codes(xs, scale);
            let code = select(arange(lay, 1, first) < kw, code, 0);
            total = total + sum(sum(code, 2), 1);
            let bit = arange(lay, 2, 0);
            #[unroll]
            for q in 0..ABITS {
                let word = sum(((code >> q) & 1) << bit, 2);
                store_shared(view::<u32>(word, wlay), sp, [q, first]);
            }
        };
        // Longer rows than two chunks are read from global memory in chunks twice.
        let scale = if one_trip {
            let wl_all = layout!(local(1, chunks).spatial(1, words).replicated(QS));
            let amax = reduce_max(reduce_max(abs(cast::<f32>(xh)), 2), 1);
            let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
            planes(cast::<f32>(xh), scale, tile_all, wl_all, 0);
            scale
        } else {
            let mut amax = register::<f32>(layout!(local(1, 1, 1)), 0.0);
            for c in 0..cdiv(kw, words) {
                let xs = abs(cast::<f32>(load_global(gx, tile, [t, c * words, 0])));
                amax = max(amax, reduce_max(reduce_max(xs, 2), 1));
            }
            let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
            for c in 0..cdiv(kw, words) {
                let xs = cast::<f32>(load_global(gx, tile, [t, c * words, 0]));
                planes(xs, scale, tile, wl, c * words);
            }
            scale
        };
        sync();

        // Per step, `popc(w_p AND a_q) << (p + q)` is summed over the lane's words and every
        // plane pair into the lane's partial of each row (`plane_dot`: the words of each weight
        // added as bits first, a few `popc`s a row); the words of step `i + 1` (registers) or
        // `i + STAGES - 1` (the ring) are requested before step `i`'s are counted.
        let la = layout!(local(ABITS, 1)
            .replicated(WARPS)
            .spatial(1, 32)
            .local(1, VEC));
        let la4 = layout!(local(ABITS, 1, 1, 1)
            .replicated(WARPS)
            .spatial(1, 1, 32, 1)
            .local(1, 1, 1, VEC));
        let lacc = layout!(spatial(1, WARPS, 1, 1)
            .local(1, R, 1, 1)
            .spatial(1, 1, 32, 1));
        let lrow = layout!(reduce(
            spatial(1, WARPS, 1, 1)
                .local(1, R, 1, 1)
                .spatial(1, 1, 32, 1),
            [2]
        ));
        let gsw = view_global(w_sums, [1, n, 1, 1]);
        let gfw = view_global(w_scales, [1, n, 1, 1]);
        let gy = view_global(y, [m, n, 1, 1]);
        let ma = (1 << ABITS) - 1;
        let mw = (1 << WBITS) - 1;
        // The token's terms of the AND form: `K (2^A - 1)(2^W - 1) - 2 (2^W - 1) Σ_k x_a`.
        let token = total * (0 - 2 * mw) + k * (ma * mw);
        let mut sw = load_global(gsw, lrow, [0, bj * rows, 0, 0]);
        let mut fw = load_global(gfw, lrow, [0, bj * rows, 0, 0]);
        let mut acc = register::<i32>(lacc, 0);
        // Step `i` is chunk `c` of group `g`, counted along instead of divided out of `i` (three
        // integer divisions by the runtime `nch` a step were a dependent chain of about 60
        // instructions); `(fg, fc)` is the ring's next fill, step `i + STAGES - 1`.
        let mut g = bj;
        let mut c = 0;
        for i in 0..steps {
            let last = c == nch - 1;
            let ng = if last { g + nb } else { g };
            let nc = if last { 0 } else { c + 1 };
            let w4 = if STAGES == 0 {
                let nw = load_global(gw, lw, [0, ng * rows, nc * cw]);
                let w = view::<u32>(xw, lw4);
                xw = nw;
                w
            } else {
                wait_group(STAGES - 2);
                sync();
                let w = view::<u32>(load_shared(ring, lw, [i % STAGES, 0, 0, 0]), lw4);
                let j = i + STAGES - 1;
                copy_async(
                    gw,
                    slice_shared(ring, [j % STAGES, 0, 0, 0], [WBITS, rows, cw]),
                    [0, min(fg, groups) * rows, fc * cw],
                );
                commit_group();
                if fc == nch - 1 {
                    fc = 0;
                    fg += nb;
                } else {
                    fc += 1;
                }
                w
            };
            let a = view::<u32>(load_shared(sp, la, [0, c * cw]), la4);
            acc = acc + plane_dot(w4, a, 3);
            if last {
                // The group's rows: the lanes added, the AND form's correction, the scales (as
                // `apt_gemm`); the next group's row sums and scales loaded for its end.
                let d = sum(acc, 2) * 4 - sw * (2 * ma) + token;
                if STORE_ACC == 1 {
                    store_global(d, view_global(acc_out, [m, n, 1, 1]), [t, g * rows, 0, 0]);
                }
                let out = cast::<f32>(d) * scale * fw;
                store_global(cast::<f16>(out), gy, [t, g * rows, 0, 0]);
                sw = load_global(gsw, lrow, [0, (g + nb) * rows, 0, 0]);
                fw = load_global(gfw, lrow, [0, (g + nb) * rows, 0, 0]);
                acc = register::<i32>(lacc, 0);
            }
            g = ng;
            c = nc;
        }
        if STAGES > 0 {
            wait_group(0);
        }
    }

    /// The decode GEMV on the integer tensor cores (`mma.m16n8k32 .s32.u8.s8`): `y[t, n]` for
    /// one token `t` per block row, the weight's codes in `qmatmul_gemv_imma`'s byte layout
    /// (the host re-lays the planes out once, [`crate::kernels::apt::ImmaTiles`]), the
    /// activation quantized in the block's prologue (the quantizer's f32 operations exactly,
    /// as [`apt_gemv_popc`]).
    ///
    /// `X = Σ_k code_a · code_w` is one mma a field: field `f` of every weight byte, masked in
    /// place, is its code times `2^pos_f`, a u8 A fragment of `BK / P` rows of k (`P = 8 /
    /// bits` fields a byte; 3- and 5-bit codes rebuilt from two planes by two `lop3`s, as
    /// there). The token's codes (`0..2^ABITS`, s8) are B: field `f`'s k-range goes in mma
    /// column `f` and zeros in the others, so column `f` of the i32 accumulator sums field `f`
    /// alone, `2^pos_f Σ code_a code_w`, and is shifted down exactly at the end (the host checks
    /// `2^pos_f · K (2^A - 1)(2^W - 1) < 2^31`). At one token the mma's 8 columns were 7/8
    /// padding: the fields fill them, so the weights need no shift. The AND form's correction and
    /// the scales then as [`apt_finish`], bit for bit the popc kernel's outputs.
    ///
    /// The weight tiles stream through a `STAGES`-deep cp.async ring behind the token's copy
    /// (its own commit group, first); `KC` is the token's capacity in shared memory (`k`
    /// rounded up, so one compiled kernel serves several `k`), read in chunks of `XV`
    /// elements a thread (`32 · WN · XV` divides `k`); a thread loads its weight bytes `VEC`
    /// at a time.
    ///
    /// With `SPLIT > 1` the grid's third dimension splits the k tiles into `SPLIT` slices (sizes
    /// differing by at most one tile), so that layers of few output blocks fill the machine.
    /// Every block still reads the whole token for its scale; it stores its slice's exact
    /// partial `4 Σ x_a x_w - 2 (2^W - 1) Σ x_a` (i32, linear in the slice) into `workspace
    /// [SPLIT, m, n]` and counts it on `semaphores [m · n / BN]` (zero before the launch, left
    /// zero after it); the block that counts last adds the partials (integers: any order, the
    /// same sum) and finishes the outputs. Any buffer will do for both with `SPLIT = 1`.
    #[tilus::kernel(
    lazy,
    grid = [n / BN, m, SPLIT],
    warps = WN,
    space(
        WBITS = [2, 3],
        ABITS = [2, 4],
        BN = [128],
        BK = [128],
        WN = [4],
        STAGES = [3],
        KC = [4096],
        XV = [8],
        VEC = [16],
        STORE_ACC = [0, 1],
        SPLIT = [1, 4],
    ),
)]
    #[allow(clippy::too_many_arguments)]
    pub fn apt_gemv_imma<
        const WBITS: i32,
        const ABITS: i32,
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const STAGES: i32,
        const KC: i32,
        const XV: i32,
        const VEC: i32,
        const STORE_ACC: i32,
        const SPLIT: i32,
    >(
        m: i32,
        n: i32,
        k: i32,
        x: Global<f16>,
        w_bytes: Global<u8>,
        w_sums: Global<i32>,
        w_scales: Global<f32>,
        y: GlobalMut<f16>,
        acc_out: GlobalMut<i32>,
        workspace: GlobalMut<i32>,
        semaphores: GlobalMut<i32>,
    ) {
        // The byte layout of `qmatmul_gemv_imma` for unsigned codes: `P` fields a byte (of a
        // `hb`-bit plane and a 1-bit plane for 3 and 5 bits), field `f` at bit `pos_f`.
        let planes = WBITS == 3 || WBITS == 5;
        let hb = if planes { WBITS - 1 } else { WBITS };
        let p = 8 / hb;
        let top = if planes { 8 - WBITS } else { WBITS * (p - 1) };
        let fk = BK / p;
        let rep_n = BN / (16 * WN);
        let rep_f = fk / 32;
        let tile_bytes = BK * BN * WBITS / 8;
        let tile_fields = if planes { BK * BN * hb / 8 } else { tile_bytes };
        let thread_bytes = tile_fields / (32 * WN);
        let lbytes = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        let lwords = layout!(spatial(1, WN)
            .column_local(rep_f, rep_n)
            .local(2, 2)
            .column_spatial(4, 8));
        let (lwords7, lplane1, lbytes1) = if planes {
            let l7 = layout!(spatial(1, 1, 1, WN, 1, 1, 1)
                .column_local(rep_f, 1, 1, 1, rep_n, 1, 1)
                .local(1, 2, 1, 1, 1, 2, 1)
                .column_spatial(1, 1, 4, 1, 1, 1, 8));
            let l1 = if WBITS == 3 {
                layout!(reduce(l7, [1]))
            } else {
                layout!(reduce(l7, [1, 5]))
            };
            (
                l7,
                l1,
                layout!(local(thread_bytes / hb / VEC).spatial(32 * WN).local(VEC)),
            )
        } else {
            ((), (), ())
        };
        let lwa = layout!(spatial(WN, 1).local(rep_n, rep_f).mma_a_f8);
        // The token's codes, one row read by every lane of a k quad (the B fragment's eight
        // columns the same values; each field keeps its own column).
        let lxt = layout!(replicated(WN)
            .local(1, rep_f)
            .local(1, 2)
            .replicated(8)
            .spatial(1, 4)
            .local(1, 4));
        let lxb = layout!(replicated(WN).local(rep_f, 1).mma_b_f8);
        let lc = layout!(spatial(WN, 1).local(rep_n, 1).mma_c);
        let lct = layout!(spatial(1, WN).column_local(1, rep_n).mma_c_t);
        let lcs = layout!(reduce(lct, [0]));

        let [bj, t, bs] = block_indices();
        // This block's k tiles: `t0..t1`, slice `bs` of `SPLIT`.
        let t0 = bs * (k / BK) / SPLIT;
        let t1 = (bs + 1) * (k / BK) / SPLIT;
        let ktiles = t1 - t0;
        let gb = view_global(w_bytes, [k / BK, n / BN, tile_bytes]);
        // The token first, in a commit group of its own: every block waits for it before its
        // first mma (perf note 74: register loads let ptxas queue it behind the weight's).
        let sx = shared::<f16>([1, KC]);
        copy_async(view_global(x, [m, k]), sx, [t, 0]);
        commit_group();
        let sb = shared::<u8>([STAGES, tile_bytes]);
        #[unroll]
        for s0 in 0..STAGES - 1 {
            if s0 < ktiles {
                copy_async(
                    gb,
                    slice_shared(sb, [s0, 0], [tile_bytes]),
                    [t0 + s0, bj, 0],
                );
            }
            commit_group();
        }

        // Prologue: the token's scale (its largest magnitude, a running maximum per thread and
        // one reduction), then its codes as s8 into `st` and their sum.
        let st = shared::<u8>([1, KC + 16]);
        let threads = 32 * WN;
        let lx = layout!(spatial(1, threads).local(1, XV));
        let chunks = k / (threads * XV);
        let maxv = (1 << ABITS) - 1;
        wait_group(STAGES - 1);
        sync();
        let mut amax = register::<f32>(lx, 0.0);
        for c in 0..chunks {
            amax = max(
                amax,
                abs(cast::<f32>(load_shared(sx, lx, [0, c * threads * XV]))),
            );
        }
        let amax = reduce_max(reduce_max(amax, 1), 0);
        let scale = max(amax, 7.888609052210118e-31) / (maxv as f32);
        // The codes of the chunks that hold this slice's k (the scale above was over all of
        // k), their sum over the slice only.
        let mut codes = register::<i32>(lx, 0);
        for c in t0 * BK / (threads * XV)..cdiv(t1 * BK, threads * XV) {
            let xs = cast::<f32>(load_shared(sx, lx, [0, c * threads * XV]));
            let code = bipolar_codes(xs, scale);
            let kk = arange(lx, 1, c * threads * XV);
            let mine = (kk >= t0 * BK) & (kk < t1 * BK);
            codes = codes + select(mine, code, register::<i32>(lx, 0));
            store_shared(cast::<u8>(code), st, [0, c * threads * XV]);
        }
        let total = sum(sum(codes, 1), 0);
        let sw = load_global(view_global(w_sums, [1, n]), lcs, [0, bj * BN]);
        let fw = load_global(view_global(w_scales, [1, n]), lcs, [0, bj * BN]);
        sync();

        // Field `f`'s codes in B column `f`, zeros in the others.
        let col = arange(lxb, 1, 0);
        let mut acc = register::<i32>(lc, 0);
        for i in 0..ktiles {
            wait_group(STAGES - 2);
            sync();
            let stage = i % STAGES;
            let tt = t0 + i;
            let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lbytes, [0]);
            let next = i + (STAGES - 1);
            if next < ktiles {
                copy_async(
                    gb,
                    slice_shared(sb, [next % STAGES, 0], [tile_bytes]),
                    [t0 + next, bj, 0],
                );
            }
            commit_group();
            // `m * 0x01010101` as an i32 (the top byte wraps when its bit 7 is set).
            let bytes4 = |m: i32| m * 65793 + (m - 256 * (m >> 7)) * 16777216;
            if planes {
                let wh = view::<i32>(rw, lwords7);
                let rw1 = load_shared(
                    slice_shared(sb, [stage, tile_fields], [tile_bytes - tile_fields]),
                    lbytes1,
                    [0],
                );
                let w1 = register::<i32>(lwords7, 0) + view::<i32>(rw1, lplane1);
                let (even, odd) = if WBITS == 3 {
                    let j = arange(lwords7, 1, 0);
                    (w1 >> j, w1 << (j * 4))
                } else {
                    let j = arange(lwords7, 1, 0) * 2 + arange(lwords7, 5, 0);
                    let up = j / 2;
                    let moved = (w1 >> ((3 - 2 * j) * (1 - up))) << ((2 * j - 3) * up);
                    (moved, moved)
                };
                #[unroll]
                for f in 0..p {
                    let bit = if f == p - 1 {
                        1 << top
                    } else {
                        1 << (hb * (f + 1))
                    };
                    let src = if f % 2 == 0 { even } else { odd };
                    let field = bytes4(((1 << hb) - 1) << (hb * f));
                    let code = (wh & field) | (src & bytes4(bit));
                    let xt = view::<i8>(load_shared(st, lxt, [0, tt * BK + f * fk]), lxb);
                    let xf = select(col == f, xt, cast::<i8>(register::<i32>(lxb, 0)));
                    acc = dot(view::<u8>(code, lwa), xf, acc);
                }
            } else {
                let words = view::<i32>(rw, lwords);
                #[unroll]
                for f in 0..p {
                    let mask = bytes4(((1 << WBITS) - 1) << (WBITS * f));
                    let xt = view::<i8>(load_shared(st, lxt, [0, tt * BK + f * fk]), lxb);
                    let xf = select(col == f, xt, cast::<i8>(register::<i32>(lxb, 0)));
                    acc = dot(view::<u8>(words & mask, lwa), xf, acc);
                }
            }
        }
        wait_group(0);

        // Column `f` holds `2^pos_f Σ code_a code_w` of field `f`: shifted down and added.
        let acct = view::<i32>(acc, lct);
        let f = arange(lct, 0, 0);
        let pos = if planes {
            select(f == p - 1, register::<i32>(lct, top), f * hb)
        } else {
            f * WBITS
        };
        let xsum = sum(select(f < p, acct >> pos, register::<i32>(lct, 0)), 0);
        let ma = (1 << ABITS) - 1;
        let mw = (1 << WBITS) - 1;
        // The slice's exact share of the product (all of it when k is not split).
        let part = xsum * 4 - total * (2 * mw);
        let finish = |part| {
            let d = part - sw * (2 * ma) + k * (ma * mw);
            if STORE_ACC == 1 {
                store_global(d, view_global(acc_out, [m, n]), [t, bj * BN]);
            }
            let out = cast::<f32>(d) * scale * fw;
            store_global(cast::<f16>(out), view_global(y, [m, n]), [t, bj * BN]);
        };
        if SPLIT == 1 {
            finish(part);
        } else {
            // As `apt_gemv`'s split: the partial, a release (barrier, fence), one thread's
            // count, an acquire; the last block to count adds the partials, finishes, and
            // leaves the semaphore zero for the next launch.
            let gws = view_global(workspace, [SPLIT, m, n]);
            store_global(part, gws, [bs, t, bj * BN]);
            sync();
            fence();
            let lanes = layout!(spatial(WN * 32));
            let lane = arange(lanes, 0, 0);
            let index = select(lane == 0, arange(lanes, 0, t * (n / BN) + bj), -1);
            let gsem = view_global(semaphores, [m * (n / BN)]);
            let old = atomic_add(gsem, index, register::<i32>(lanes, 1));
            fence();
            let arrived = item(sum(old, 0));
            if arrived == SPLIT - 1 {
                let mut total = load_global(gws, lcs, [0, t, bj * BN]);
                for s in 1..SPLIT {
                    total = total + load_global(gws, lcs, [s, t, bj * BN]);
                }
                finish(total);
                store_global(
                    register::<i32>(layout!(local(1)), 0),
                    gsem,
                    [t * (n / BN) + bj],
                );
            }
        }
    }
}
