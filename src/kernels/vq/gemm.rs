//! The fused VQ-GEMM for prefill (`docs/vq.md`), written with `#[kernel]`: `y[m, n] = scale[n]
//! · Σ_k x[m, k] · W[n, k]` on the warpgroup MMA, the weight looked up from its codes straight
//! into wgmma's register operand, with no dense copy of it anywhere.
//!
//! It is the transposed product of [`crate::kernels::gemm::w4::gemm_w4t_f16`], `yᵀ = W · xᵀ`: a
//! block owns 128 weight rows (two warpgroups) and `BM` tokens; per 64 of `k` the copy engine
//! brings the activations (`[BM, 64]`, swizzled: wgmma's B operand) and the step's codes, and
//! each thread looks its 32 weights of the step up into its A fragments:
//!
//! - **Half rows.** wgmma's A fragment gives a thread the pairs of `k` at `2t` and `2t + 8` of
//!   every 16 (`t` its lane mod 4), so a vector of `V` weights is spread over `V / 2` lanes.
//!   The codebook is read as `[entries, V / 2, 2]`: `lookup(book, code, lane's pair)` reads the
//!   4 bytes of the vector that land in one A register, and the natural `k` order of the
//!   activations is kept (no permuted copy of `x`). A thread reads 16 codes a step and
//!   residual stage, which it shares with the `V / 2 - 1` other lanes of its vector: the host
//!   stores them once ([`GemmCodes`]), and those lanes load the same 16 bytes (a broadcast).
//! - **The codebook.** With one codebook for the matrix (`ONE = 1`, AQLM) it is copied into
//!   shared memory once. With a codebook per tile (`ONE = 0`, GPTVQ's 256 x 256 tiles) each
//!   step's stage of the ring carries its own copy (2 KiB for GPTVQ-2, by `cp.async`).
//! - **Residual stages** are looked up separately and added in f16 (for two stages the exact
//!   sum rounded once); per-channel scales multiply the f32 accumulator at the end.
//! - **Codes** of up to 12 bits: the low bytes, then (`HB = 4`) the high nibbles.
//!
//! The accumulator `[128, BM]` is stored transposed through shared memory. `m` is any count
//! (the copy engine and the store mask the edge), `n` a multiple of 128, `k` of 64, a tile's
//! columns of 64 and its rows of 128.

use crate::vq::{CodebookScope, VqConfig};

/// The fused VQ-GEMM (module docs). Parameters: `m, n, k`, the codebook tile (`tile_rows x
/// tile_cols`; `n x k` for one codebook), `x [m, k]`, the codes as [`GemmCodes`] lays them out,
/// the codebooks `[groups, R, E, V]` f16 (plain: no copies), the scales (`[n]`, any buffer when
/// `SCALE = 0`) and `y [m, n]`.
#[tilus::kernel(
    lazy,
    grid = [(n / 128) * cdiv(m, BM)],
    warps = 8,
    space(
        BM = [64, 128],
        STAGES = [4],
        V = [4, 8],
        R = [1, 2],
        E = [256],
        HB = [0, 4],
        ONE = [0, 1],
        SCALE = [0, 1],
        GROUP = [8],
    ),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_gemm<
    const BM: i32,
    const STAGES: i32,
    const V: i32,
    const R: i32,
    const E: i32,
    const HB: i32,
    const ONE: i32,
    const SCALE: i32,
    const GROUP: i32,
>(
    m: i32,
    n: i32,
    k: i32,
    tile_rows: i32,
    tile_cols: i32,
    x: Global<f16>,
    codes: Global<u8>,
    codebooks: Global<f16>,
    scales: Global<f16>,
    y: GlobalMut<f16>,
) {
    let [pid] = block_indices();
    let rows = cdiv(m, BM);
    let cols = n / 128;
    let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
    // Lanes that share a vector (`V / 2` of the 4 in a row of the fragment) share its codes.
    let dup = V / 2;
    let holders = 256 / dup;
    // A stage's code bytes per holder: per residual stage 16 low bytes, then 8 of high nibbles.
    let cb = cdiv(R * (16 + 2 * HB), 16) * 16;
    let ga = view_global(x, [m, k]);
    let gq = view_global(codes, [k / 64, n / 128, holders, cb]);
    let col_tiles = k / tile_cols;
    let groups = (n / tile_rows) * col_tiles;
    let gbook = view_global(codebooks, [groups * R * E, V / 2, 2]);
    let sa = shared::<f16>([STAGES, BM, 64], swizzle(3, 3, 3));
    let sq = shared::<u8>([STAGES, holders, cb]);
    let sbook = shared::<f16>([(STAGES - ONE * (STAGES - 1)) * R * E, V / 2, 2]);
    // A stage is complete when its activations and codes have landed (the codebook of a
    // stage rides cp.async's groups).
    let full = mbarriers(STAGES, 2);
    // Each thread's A fragments, and the same with `k` counted in pairs (`li.local(1, 2)` is
    // `frag`): a look-up per pair.
    let frag = layout!(spatial(2, 1).spatial(4, 1).local(1, 4).mma_a);
    let li = layout!(spatial(2, 1)
        .spatial(4, 1)
        .local(1, 4)
        .column_local(2, 2)
        .spatial(8, 4));
    let lo_layout = layout!(spatial(64, 1)
        .spatial(4 / dup, 1)
        .replicated(dup)
        .local(1, 16));
    let hi_layout = layout!(spatial(64, 1)
        .spatial(4 / dup, 1)
        .replicated(dup)
        .local(1, 8));
    // The half (V = 4) or quarter (V = 8) of its vector each pair is.
    let part = arange(li, 1, 0) & (dup - 1);
    let mut acc = register::<f32>(
        layout!(spatial(2, 1).spatial(4, 1).local(1, BM / 8).mma_c),
        0.0,
    );
    let mut wa0 = register::<f16>(frag, 0.0);
    let mut wa1 = register::<f16>(frag, 0.0);
    let steps = k / 64;
    let row_tile = bj * 128 / tile_rows;
    // The codes of residual stage `r` in ring stage `st`, in `li`.
    let codes_of = |st: i32, r: i32| {
        let lo = load_shared(
            slice_shared(sq, [st, 0, r * 16], [holders, 16]),
            lo_layout,
            [0, 0],
        );
        let c = cast::<i32>(view::<u8>(lo, li));
        if HB == 0 {
            c
        } else {
            let hi = load_shared(
                slice_shared(sq, [st, 0, R * 16 + r * 8], [holders, 8]),
                hi_layout,
                [0, 0],
            );
            c + (cast::<i32>(view::<u4>(hi, li)) << 8)
        }
    };
    // The step's weights: every residual stage looked up and added in f16.
    let weights = |st: i32| {
        let at = if ONE == 1 { 0 } else { st * R * E };
        let mut w = lookup(
            slice_shared(sbook, [at, 0, 0], [E, V / 2, 2]),
            codes_of(st, 0),
            part,
        );
        #[unroll]
        for r in 1..R {
            w = w + lookup(
                slice_shared(sbook, [at + r * E, 0, 0], [E, V / 2, 2]),
                codes_of(st, r),
                part,
            );
        }
        view::<f16>(w, frag)
    };
    let issue = |q: i32, st: i32| {
        tma_load(
            ga,
            slice_shared(sa, [st, 0, 0], [BM, 64]),
            [bi * BM, q * 64],
            full,
            st,
        );
        tma_load(
            gq,
            slice_shared(sq, [st, 0, 0], [holders, cb]),
            [q, bj, 0, 0],
            full,
            st,
        );
        if ONE == 0 {
            let g = row_tile * col_tiles + q * 64 / tile_cols;
            copy_async(
                gbook,
                slice_shared(sbook, [st * R * E, 0, 0], [R * E, V / 2, 2]),
                [g * R * E, 0, 0],
            );
        }
    };
    // After step t's wgmmas are issued: step t + 1's codebook landed (its group is STAGES - 3
    // groups back) and every warpgroup retired step t - 1, so the barrier publishes the first
    // and lets the stage of t - 1 take step t + STAGES - 1.
    let refill = |t: i32| {
        dot_wait(1);
        wait_group(STAGES - 3);
        sync();
        let q = t + STAGES - 1;
        if q < steps {
            issue(q, q % STAGES);
        }
        commit_group();
    };
    // Prologue: the one codebook (ONE = 1), then the ring's first STAGES - 1 steps, one
    // cp.async group each.
    if ONE == 1 {
        copy_async(
            gbook,
            slice_shared(sbook, [0, 0, 0], [R * E, V / 2, 2]),
            [0, 0, 0],
        );
    }
    for q in 0..STAGES - 1 {
        if q < steps {
            issue(q, q);
        }
        commit_group();
    }
    // Step 0's codebook (or the one codebook) landed, for every thread.
    wait_group(STAGES - 2);
    sync();
    // Even steps look up into wa0, odd ones into wa1: a step's fragments are written only
    // after the wgmmas of the step before the last retired. Written out twice so that no
    // dot_async is inside a branch (an odd last step is a synchronous dot).
    for t2 in 0..steps / 2 {
        {
            let t = 2 * t2;
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            wa0 = weights(st);
            acc = dot_async(
                wa0,
                permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
                acc,
            );
            refill(t);
        }
        {
            let t = 2 * t2 + 1;
            let st = t % STAGES;
            mbarrier_wait(full, st, t / STAGES % 2);
            wa1 = weights(st);
            acc = dot_async(
                wa1,
                permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
                acc,
            );
            refill(t);
        }
    }
    dot_wait(0);
    if steps % 2 == 1 {
        // The odd last step: a synchronous dot, since nothing may be in flight across a branch.
        let t = steps - 1;
        let st = t % STAGES;
        mbarrier_wait(full, st, t / STAGES % 2);
        wa0 = weights(st);
        acc = dot(
            wa0,
            permute_shared(slice_shared(sa, [st, 0, 0], [BM, 64]), [1, 0]),
            acc,
        );
    }
    if SCALE == 1 {
        let lcs = layout!(reduce(
            spatial(2, 1).spatial(4, 1).local(1, BM / 8).mma_c,
            [1]
        ));
        let sv = load_global(view_global(scales, [n, 1]), lcs, [bj * 128, 0]);
        acc = acc * cast::<f32>(sv);
    }
    // yᵀ tile -> y: through shared memory, 8 consecutive columns of y per thread.
    let ct = shared::<f16>([128, BM]);
    store_shared(cast::<f16>(acc), ct, [0, 0]);
    sync();
    let out = load_shared(
        permute_shared(ct, [1, 0]),
        layout!(local(BM / 16, 1).spatial(16, 16).local(1, 8)),
        [0, 0],
    );
    store_global(out, view_global(y, [m, n]), [bi * BM, bj * 128]);
}

/// The text of [`vq_gemm`]'s code layout `li`: per thread, the 16 pairs of `k` of its A
/// fragments of a `[128, 64]` step, counted in pairs (`[128, 32]`).
pub const GEMM_CODE_LAYOUT: &str =
    "spatial(2, 1).spatial(4, 1).local(1, 4).column_local(2, 2).spatial(8, 4)";

/// A weight's codes as [`vq_gemm`] reads them: per step of 64 `k` and block of 128 rows,
/// `[holders, cb]` bytes, `holders = 256 / (V / 2)` (the lanes that share a vector share one
/// holder: lane `l` of thread `x` reads holder `x / (V / 2)`), each holder's 16 codes of a
/// residual stage in the order of `li`'s locals, low bytes stage after stage, then (12-bit
/// codes) the high nibbles (even local low), the row padded to 16 bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmCodes {
    pub bytes: Vec<u8>,
    /// Bytes per holder and step (`cb`).
    pub row: usize,
}

impl GemmCodes {
    /// Lays out `codes` (`[residuals, n, k / v]`, below `entries`) for [`vq_gemm`]. The caller
    /// keeps `n` a multiple of 128, `k` of 64, `v` 4 or 8 and `entries` at most 4096.
    pub fn new(
        codes: &[u16],
        (n, k): (usize, usize),
        v: usize,
        residuals: usize,
        high_nibbles: bool,
    ) -> GemmCodes {
        let layout = tilus_core::layout::parse(GEMM_CODE_LAYOUT).expect("the layout parses");
        let dup = v / 2;
        let holders = 256 / dup;
        let hb = if high_nibbles { 4 } else { 0 };
        let row = (residuals * (16 + 2 * hb)).div_ceil(16) * 16;
        let (steps, blocks) = (k / 64, n / 128);
        let vecs = k / v;
        // Each holder's 16 (row, vector of the step) places, once.
        let places: Vec<(usize, usize)> = (0..holders * 16)
            .map(|x| {
                let at = layout.eval((x / 16) * dup, x % 16);
                (at[0], at[1] * 2 / v)
            })
            .collect();
        let mut bytes = vec![0u8; steps * blocks * holders * row];
        for s in 0..steps {
            for b in 0..blocks {
                let out = &mut bytes[(s * blocks + b) * holders * row..][..holders * row];
                for (x, &(r, c)) in places.iter().enumerate() {
                    let (h, l) = (x / 16, x % 16);
                    let (rr, cc) = (b * 128 + r, s * 64 / v + c);
                    for st in 0..residuals {
                        let code = codes[(st * n + rr) * vecs + cc];
                        out[h * row + st * 16 + l] = code as u8;
                        if high_nibbles {
                            out[h * row + residuals * 16 + st * 8 + l / 2] |=
                                ((code >> 8) as u8 & 15) << (4 * (l % 2));
                        }
                    }
                }
            }
        }
        GemmCodes { bytes, row }
    }
}

/// Tokens per block of [`vq_gemm`] for `m` tokens of an `n`-row weight: the tallest of 256
/// and 128 that `m` fills, whose shared memory fits, and whose grid still gives about 3 blocks
/// in 4 multiprocessors a block (measured on the H100, docs/vq.md: at 256 tokens of an
/// 8192-row layer blocks of 128 beat blocks of 256 by 1.2x, 64 blocks against 128); else 64.
pub fn gemm_bm(c: VqConfig, m: usize, n: usize) -> usize {
    let fills = |bm: usize| {
        m >= bm
            && gemm_stages(c, bm).is_some()
            && (n / 128) * m.div_ceil(bm) * 4 >= 3 * crate::kernels::REFERENCE_MULTIPROCESSORS
    };
    [256, 128].into_iter().find(|&bm| fills(bm)).unwrap_or(64)
}

/// What a block of [`vq_gemm`] may hold in shared memory (of the H100's 227 KiB).
pub const GEMM_SHARED_BYTES: usize = 220 * 1024;

/// The shared memory of a [`vq_gemm`] block of `bm` tokens and `stages` ring stages for format
/// `c` (the ring, the codebook(s), the transposed output tile, the barriers).
fn shared_bytes(c: VqConfig, bm: usize, stages: usize) -> usize {
    let book = c.residuals * c.entries() * c.vector_size * 2;
    let books = if matches!(c.scope, CodebookScope::Matrix) {
        book
    } else {
        stages * book
    };
    let holders = 256 / (c.vector_size / 2);
    let hb = if c.entries() > 256 { 4 } else { 0 };
    let cb = (c.residuals * (16 + 2 * hb)).div_ceil(16) * 16;
    stages * (bm * 128 + holders * cb) + books + 128 * bm * 2 + 1024
}

/// Stages of [`vq_gemm`]'s ring for blocks of `bm` tokens: 4, or 3 where 4 do not fit
/// [`GEMM_SHARED_BYTES`] (AQLM-3's 128-KiB codebooks at 128 tokens), `None` where neither does.
pub fn gemm_stages(c: VqConfig, bm: usize) -> Option<usize> {
    [4, 3]
        .into_iter()
        .find(|&s| shared_bytes(c, bm, s) <= GEMM_SHARED_BYTES)
}

/// Why [`vq_gemm`] cannot serve a `[n, k]` weight of format `c`, or `None` where it can:
/// vectors of 4 or 8 values, up to 4096 entries (12-bit codes), no lattice (QuIP#'s E8P), one
/// codebook for the matrix or per tile of a multiple of 128 rows and 64 columns, `n` a multiple
/// of 128 and `k` of 64, and its shared memory within [`GEMM_SHARED_BYTES`] at 64 tokens.
pub fn gemm_refusal(c: VqConfig, (n, k): (usize, usize)) -> Option<String> {
    if c.e8p {
        return Some("the E8P lattice is decoded by the GEMV kernel only".into());
    }
    if c.vector_size != 4 && c.vector_size != 8 {
        return Some(format!("vectors of {} values (4 or 8)", c.vector_size));
    }
    if c.entries() > 4096 {
        return Some(format!("{} entries (at most 4096)", c.entries()));
    }
    match c.scope {
        CodebookScope::Matrix => {}
        CodebookScope::Tile { .. } => {
            let (rows, cols) = c.tile(n, k);
            if rows % 128 != 0 || cols % 64 != 0 {
                return Some(format!(
                    "codebook tiles of {rows} x {cols} (rows a multiple of 128, columns of 64)"
                ));
            }
        }
        _ => return Some("codebooks per channel group are the KV cache's".into()),
    }
    if n % 128 != 0 || k % 64 != 0 {
        return Some(format!("{n} x {k} (n a multiple of 128, k of 64)"));
    }
    if gemm_stages(c, 64).is_none() {
        return Some(format!(
            "{} bytes of shared memory a block (at most {GEMM_SHARED_BYTES})",
            shared_bytes(c, 64, 3)
        ));
    }
    None
}

/// [`vq_gemm`]'s configuration for format `c` with blocks of `bm` tokens ([`gemm_bm`]'s by
/// default). The caller checked [`gemm_refusal`] and [`gemm_stages`].
pub fn gemm_config(c: VqConfig, bm: usize) -> vq_gemm::Config {
    vq_gemm::Config {
        BM: bm as i32,
        STAGES: gemm_stages(c, bm).unwrap_or(3) as i32,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        E: c.entries() as i32,
        HB: if c.entries() > 256 { 4 } else { 0 },
        ONE: matches!(c.scope, CodebookScope::Matrix) as i32,
        SCALE: c.channel_scale as i32,
        GROUP: 8,
    }
}
