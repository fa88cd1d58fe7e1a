//! The VQ-GEMV kernels, written with `#[kernel]` (`docs/vq.md`).
//!
//! Both compute `y[m, n] = scale[n] · Σ_k x[m, k] · W[n, k]` for a weight stored as
//! [`crate::vq::VqWeight`]: codes `[R, n, k / V]` (u8 when `CB = 1`; u16 little-endian when
//! `CB = 2`, read as u32 words of two since the VM has no 16-bit integers), codebooks
//! `[groups, R, entries, V]` f16 (group `g = (r / tile_rows) · (k / tile_cols) + c /
//! tile_cols`), per-channel f16 scales when `SCALE = 1`. A block computes 16 tokens x `BN`
//! channels over k (or a slice of it, below), `WN` warps side by side along n, each `BN / (8 ·
//! WN)` mma tiles of `16 x 8`; a k step is `BK` (a multiple of 16 that divides `tile_cols`).
//! With `SPLIT > 1` the grid's third dimension splits k into `SPLIT` slices whose f32 partial
//! sums are added into a workspace with `atomic_add` (the global reduction), and
//! [`vq_finalize`] writes the f16 output and zeroes the workspace again: more blocks in flight
//! for the shapes with few output channels.
//!
//! The dequantized weight tile is produced **directly in the mma B operand's layout**: every
//! register knows its `(k, n)` in the tile (`arange`), gathers its code and then its codebook
//! word, so no rearrangement of dequantized vectors is needed (the paper's hierarchical fusion
//! through shuffles is not used). [`vq_gemv`] reads the codebook as 32-bit words of two f16
//! (B's registers hold pairs of consecutive k), one gather per two elements; residual stages
//! are summed in f32 registers and rounded once to f16 for the mma (f32 accumulation, f16 out).
//!
//! **The codebook cache** ([`vq_gemv`]): entries are stored most-used first
//! ([`crate::vq::VqWeight::reorder_by_frequency`]); entries `[0, NR)` are served from uniform
//! registers, `[NR, NR + NS)` from shared memory, the rest from global memory (L1/L2):
//!
//! - `load` / `switch(codebook)`: the first k step of each codebook tile (and of the block's
//!   slice) also copies entries `[NR, NR + NS)` of every stage of that tile's codebook into one
//!   of `CBUF` shared buffers, by the same `cp.async` ring as the codes, so a switch never
//!   stalls; the register entries are read as uniform scalars (`item`) once per k step.
//! - `access(code)`: three masked reads summed, each tier reading 0 outside its range: a
//!   `gather` from global memory with the index `-1` (reads 0, no memory traffic) unless
//!   `code >= NR + NS`, a `gather` from shared memory unless `code` lies in `[NR, NR + NS)`,
//!   and for the register tier a chain of `NR · V / 2` compare-and-selects against the scalars.
//!   The VM has no register-indexed lookup (nor warp shuffles), so the register tier costs
//!   selects per word: it pays only for a very small `NR`; `NR = 0` is the default.
//!
//! The codes (rows of `BK / V` codes, coalesced) and the activations (`[16, BK]`, swizzled for
//! `ldmatrix`) of each k step are copied into shared memory by a `cp.async` ring of `STAGES`
//! steps, `STAGES - 1` ahead; codes are gathered from there.
//!
//! [`vq_gemv_gc`] is the paper's naive "GC" baseline: codes and codebook components gathered
//! from global memory for every element, nothing staged or cached.

/// The VQ-GEMV with the codebook cache (module docs). Parameters: `m, n, k`, the codebook's
/// `entries`, its tile (`tile_rows x tile_cols`; `n x k` for one codebook), `x [m, k]`, the
/// codes, the codebooks, the scales (any buffer when `SCALE = 0`), `y [m, n]` and the split-k
/// workspace `part [m, n]` f32, zero on entry (any buffer when `SPLIT = 1`). The host keeps
/// `SPLIT | k / BK` and `(CBUF - 1) · tile_cols / BK >= STAGES - 1` unless `CBUF = 1` with
/// `tile_cols = k`.
#[tilus::kernel(
    lazy,
    grid = [cdiv(m, 16), n / BN, SPLIT],
    warps = WN,
    space(
        BN = [32],
        WN = [4],
        BK = [64, 128],
        SPLIT = [1, 4],
        STAGES = [2, 4],
        V = [4],
        R = [1, 2],
        CB = [1, 2],
        NR = [0, 2],
        NS = [0, 256],
        CBUF = [1, 3],
        SCALE = [0, 1],
    ),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_gemv<
    const BN: i32,
    const WN: i32,
    const BK: i32,
    const SPLIT: i32,
    const STAGES: i32,
    const V: i32,
    const R: i32,
    const CB: i32,
    const NR: i32,
    const NS: i32,
    const CBUF: i32,
    const SCALE: i32,
>(
    m: i32,
    n: i32,
    k: i32,
    entries: i32,
    tile_rows: i32,
    tile_cols: i32,
    x: Global<f16>,
    codes: Global<u8>,
    codebooks: Global<f16>,
    scales: Global<f16>,
    y: GlobalMut<f16>,
    part: GlobalMut<f32>,
) {
    let fn_ = BN / (8 * WN);
    let rep_k = BK / 16;
    // Codes per row per k step, and the same in storage units (bytes or u32 words of two).
    let kv = BK / V;
    let kw = kv / CB;
    // 32-bit words per codebook entry (two f16 components each).
    let hv = V / 2;
    let la = layout!(spatial(1, 1).replicated(WN).local(1, rep_k).mma_a);
    let lb = layout!(spatial(1, WN).local(rep_k, fn_).mma_b);
    // B's registers as 32-bit words: each holds two consecutive k of one column, so one
    // codebook word serves two elements (mma_b = local(2, 1).column_spatial(4, 8).local(2, 1)).
    let lp = layout!(spatial(1, WN)
        .local(rep_k, fn_)
        .local(2, 1)
        .column_spatial(4, 8));
    let lc = layout!(spatial(1, WN).local(1, fn_).mma_c);
    let one = layout!(local(1));

    let [bi, bj, bs] = block_indices();
    let kvt = k / V;
    let ga = view_global(x, [m, k]);
    // 16-bit codes are read as u32 words of two (the VM has no 16-bit integer type).
    let gcodes = if CB == 1 {
        view_global::<u8>(codes, [R, n, kvt])
    } else {
        view_global::<u32>(codes, [R, n, kvt / 2])
    };
    let col_tiles = k / tile_cols;
    let books = (n / tile_rows) * col_tiles * R;
    let gbook = view_global::<i32>(codebooks, [books * entries * hv]);
    let gbook3 = view_global::<i32>(codebooks, [books / R, R, entries * hv]);
    // The activations of each k step ride the same ring, [stage, 16, BK] (XOR-swizzled so that
    // the fragment loads, ldmatrix, hit distinct banks); rows past m are zero-filled.
    let sx = shared::<f16>([STAGES, 16, BK], swizzle(3, 3, 3));
    // A ring of STAGES k steps of codes: [stage, residual stage, BN, codes].
    let sc = if CB == 1 {
        shared::<u8>([STAGES, R, BN, kv])
    } else {
        shared::<u32>([STAGES, R, BN, kw])
    };
    // The shared tier: entries [NR, NR + NS) of each residual stage's codebook, CBUF buffers
    // (one when a codebook spans k; else tile c uses buffer c % CBUF, filled by the ring's
    // copies STAGES - 1 steps ahead, so the host keeps (CBUF - 1) · steps per tile >=
    // STAGES - 1: a buffer is refilled only after every thread has left its last tile).
    let scb = if NS > 0 {
        shared::<i32>([CBUF, R, NS * hv])
    } else {
        ()
    };
    // Each word's (pair of k, n) within the tile; its code's place in a stage's [BN, kv] slab
    // and its word within the entry.
    let kp = arange(lp, 0, 0);
    let nn = arange(lp, 1, 0);
    let code_at = nn * kv + kp / hv;
    let comp = kp % hv;
    let hot = NR + NS;
    let row_tile = bj * BN / tile_rows;
    // k steps per codebook tile.
    let tile_steps = tile_cols / BK;
    // This block's k steps: `per` from `t0` (the host makes SPLIT divide k / BK).
    let per = k / BK / SPLIT;
    let t0 = bs * per;

    // The code at flat index `at` of `src` (bytes, or u32 words of two 16-bit codes).
    let code_of = |src: Tensor, at: Tensor| {
        if CB == 1 {
            cast::<i32>(gather(src, at))
        } else {
            cast::<i32>((gather(src, at / 2) >> cast::<u32>(at % 2 * 16)) & 0xFFFF)
        }
    };
    // access(code): the word `comp` of entry `code` of codebook `book` (= group · R + stage),
    // `buf` the shared buffer holding it: the three tiers summed, each reading 0 outside its
    // range (an index of -1 reads 0 without touching memory).
    let access = |code: Tensor, book: i32, buf: i32| {
        if CB == 1 && NR == 0 && NS >= 256 {
            // Byte codes with all 256 entries in shared memory: one gather, no masked tiers.
            gather(scb, (code + (buf * R + book % R) * NS) * hv + comp)
        } else {
            let flat = (code + book * entries) * hv + comp;
            let mut val = gather(gbook, select(code >= hot, flat, -1));
            if NS > 0 {
                let fs = (code - NR + (buf * R + book % R) * NS) * hv + comp;
                val = val + gather(scb, select(code >= NR, select(code < hot, fs, -1), -1));
            }
            if NR > 0 {
                // The register tier: uniform scalars, one compare-and-select each.
                let at = code * hv + comp;
                #[unroll]
                for j in 0..NR * hv {
                    let c = item(load_global(gbook, one, [book * entries * hv + j]));
                    val = select(at != j, val, c);
                }
            }
            val
        }
    };

    // The cp.async copies of k step `t` into ring stage `stage`: its codes, and at the first
    // step of a codebook tile (load / switch) that codebook's shared tier.
    let issue = |t: i32, stage: i32| {
        copy_async(
            ga,
            slice_shared(sx, [stage, 0, 0], [16, BK]),
            [bi * 16, t * BK],
        );
        copy_async(
            gcodes,
            slice_shared(sc, [stage, 0, 0, 0], [R, BN, kw]),
            [0, bj * BN, t * kw],
        );
        if NS > 0 {
            if t % tile_steps == 0 || t == t0 {
                let tile = t / tile_steps;
                copy_async(
                    gbook3,
                    slice_shared(scb, [tile % CBUF, 0, 0], [1, R, NS * hv]),
                    [row_tile * col_tiles + tile, 0, NR * hv],
                );
            }
        }
    };
    #[unroll]
    for st in 0..STAGES - 1 {
        if st < per {
            issue(t0 + st, st);
        }
        commit_group();
    }
    let mut acc = register::<f32>(lc, 0.0);
    for j in 0..per {
        let kt = t0 + j;
        // Step j has landed once at most STAGES - 2 newer groups are in flight.
        wait_group(STAGES - 2);
        sync();
        let next = j + STAGES - 1;
        if next < per {
            issue(t0 + next, next % STAGES);
        }
        commit_group();
        let stage = j % STAGES;
        let tile = kt / tile_steps;
        let g = row_tile * col_tiles + tile;
        let xa = load_shared(slice_shared(sx, [stage, 0, 0], [16, BK]), la, [0, 0]);
        let w = if R == 1 {
            let code = code_of(sc, code_at + stage * BN * kv);
            view::<f16>(access(code, g, tile % CBUF), lb)
        } else {
            let mut sum = register::<f32>(lb, 0.0);
            #[unroll]
            for s in 0..R {
                let code = code_of(sc, code_at + (stage * R + s) * BN * kv);
                sum = sum + cast::<f32>(view::<f16>(access(code, g * R + s, tile % CBUF), lb));
            }
            cast::<f16>(sum)
        };
        acc = dot(xa, w, acc);
    }
    if SCALE == 1 {
        let lcs = layout!(reduce(lc, [0]));
        let sv = load_global(view_global(scales, [1, n]), lcs, [0, bj * BN]);
        acc = acc * cast::<f32>(sv);
    }
    if SPLIT == 1 {
        store_global(cast::<f16>(acc), view_global(y, [m, n]), [bi * 16, bj * BN]);
    } else {
        // Split k: the partial sums go to the f32 workspace (zero before; `vq_finalize`
        // writes y and zeroes it again). Rows past m are skipped (index -1).
        let row = arange(lc, 0, bi * 16);
        let col = arange(lc, 1, bj * BN);
        let at = select(row < m, row * n + col, -1);
        atomic_add(view_global(part, [m * n]), at, acc);
    }
}

/// The split-k epilogue of [`vq_gemv`]: `y = f16(part)` for the `[m, n]` f32 workspace,
/// which is left zeroed for the next launch. 1024 elements per block.
#[tilus::kernel(grid = [cdiv(len, 1024)], warps = 4)]
pub fn vq_finalize(len: i32, part: GlobalMut<f32>, y: GlobalMut<f16>) {
    let [b] = block_indices();
    let l = layout!(spatial(128).local(8));
    let gp = view_global(part, [len]);
    let v = load_global(gp, l, [b * 1024]);
    store_global(cast::<f16>(v), view_global(y, [len]), [b * 1024]);
    store_global(register::<f32>(l, 0.0), gp, [b * 1024]);
}

/// The naive "GC" VQ-GEMV: the same product and tiling as [`vq_gemv`], every code and every
/// codebook component gathered from global memory per element (no shared staging, no cache).
#[tilus::kernel(
    lazy,
    grid = [cdiv(m, 16), n / BN],
    warps = WN,
    space(
        BN = [32],
        WN = [4],
        BK = [64],
        V = [4],
        R = [1, 2],
        CB = [1, 2],
        SCALE = [0, 1],
    ),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_gemv_gc<
    const BN: i32,
    const WN: i32,
    const BK: i32,
    const V: i32,
    const R: i32,
    const CB: i32,
    const SCALE: i32,
>(
    m: i32,
    n: i32,
    k: i32,
    entries: i32,
    tile_rows: i32,
    tile_cols: i32,
    x: Global<f16>,
    codes: Global<u8>,
    codebooks: Global<f16>,
    scales: Global<f16>,
    y: GlobalMut<f16>,
) {
    let fn_ = BN / (8 * WN);
    let rep_k = BK / 16;
    let la = layout!(spatial(1, 1).replicated(WN).local(1, rep_k).mma_a);
    let lb = layout!(spatial(1, WN).local(rep_k, fn_).mma_b);
    let lc = layout!(spatial(1, WN).local(1, fn_).mma_c);
    let [bi, bj] = block_indices();
    let kvt = k / V;
    let ga = view_global(x, [m, k]);
    let gcodes = if CB == 1 {
        view_global::<u8>(codes, [R * n * kvt])
    } else {
        view_global::<u32>(codes, [R * n * kvt / 2])
    };
    let col_tiles = k / tile_cols;
    let books = (n / tile_rows) * col_tiles * R;
    let gbook = view_global(codebooks, [books * entries * V]);
    let kk = arange(lb, 0, 0);
    let row = arange(lb, 1, bj * BN);
    let comp = kk % V;
    let row_tile = bj * BN / tile_rows;
    let mut acc = register::<f32>(lc, 0.0);
    for kt in 0..k / BK {
        let g = row_tile * col_tiles + kt * BK / tile_cols;
        let xa = load_global(ga, la, [bi * 16, kt * BK]);
        let mut w = register::<f32>(lb, 0.0);
        #[unroll]
        for s in 0..R {
            let at = (row + s * n) * kvt + (kk + kt * BK) / V;
            let code = if CB == 1 {
                cast::<i32>(gather(gcodes, at))
            } else {
                cast::<i32>((gather(gcodes, at / 2) >> cast::<u32>(at % 2 * 16)) & 0xFFFF)
            };
            let flat = (code + (g * R + s) * entries) * V + comp;
            w = w + cast::<f32>(gather(gbook, flat));
        }
        acc = dot(xa, cast::<f16>(w), acc);
    }
    if SCALE == 1 {
        let lcs = layout!(reduce(lc, [0]));
        let sv = load_global(view_global(scales, [1, n]), lcs, [0, bj * BN]);
        acc = acc * cast::<f32>(sv);
    }
    store_global(cast::<f16>(acc), view_global(y, [m, n]), [bi * 16, bj * BN]);
}
