//! The VQ-GEMV kernels, written with `#[kernel]` (`docs/vq.md`).
//!
//! Both compute `y[m, n] = scale[n] · Σ_k x[m, k] · W[n, k]` (f16 in, f32 accumulation, f16
//! out) for a weight stored as [`crate::vq::VqWeight`]: codebooks `[groups, R, entries, V]`
//! f16 (group `g = (r / tile_rows) · (k / tile_cols) + c / tile_cols`), per-channel f16 scales
//! when `SCALE = 1`.
//!
//! [`vq_gemv`] is **codebook-centric**: a block owns `32 · WN` output channels that share one
//! codebook row of tiles, walks its k (or a slice of it, below) a codebook tile at a time, and
//! keeps that tile's codebook in shared memory; each look-up is one row of the codebook, one
//! vector load, straight into the mma's B operand:
//!
//! - **The operand.** The weight is B of `mma.m16n8k16` on the *run fragments*
//!   (`mma_b_k4` / `mma_b_k8`): k is permuted so that each thread holds `V` consecutive k of
//!   one column, which is exactly one codebook row. `gather_rows` of the codes (in
//!   `..column_spatial(4, 8)`, one per thread and fragment) yields the fragment, no shuffles;
//!   the activations come in the matching `mma_a_k4` / `mma_a_k8` (8 or 16 bytes per row and
//!   thread) from a shared ring padded against bank conflicts.
//! - **The codebook cache.** With `REP = 16` (`V = 4`: `LDS.64` serves 16 lanes per cycle) the
//!   codebook is stored 16 times, row `((entry · 2 + buffer) · 16 + c)` for copy `c` (an entry's
//!   copies in both buffers make one 256-byte row, which every product addresses with one
//!   `PRMT`, a rank-3 `lookup`), and lane `l` reads copy
//!   `l % 16`: the 16 lanes of a phase hit 16 distinct bank pairs whatever the codes, so a
//!   look-up never conflicts (a random one costs about 3x). The copies are written once per
//!   codebook tile from registers loaded a tile ahead (`switch`), lane `e` starting at copy
//!   `e % 16` so the writes spread over the banks too. With `REP = 1` the codebook is stored
//!   once (AQLM's 4096-entry codebooks, 64 KiB per stage, could not be copied). With `ONE = 1`
//!   (one codebook for the whole matrix) the host lays the copies out and the block takes them
//!   by `cp.async` in the prologue; `REP = 8` for vectors of 8 (`LDS.128` serves 8 lanes per
//!   cycle: AQLM's 2x256-entry codebooks, 64 KiB with 8 copies), lane `l` reading copy `l % 8`.
//!   Entries are stored most-used first ([`crate::vq::VqWeight::reorder_by_frequency`]), which
//!   changes nothing here: every entry is in shared memory.
//! - **Codes** come re-laid by the host (`linear::relayout_codes`) so that each thread's codes
//!   of a k step are contiguous: per step `[threads, words]` u32, the low byte of every code
//!   (residual stage after stage), then for `HB = 4` or 8 their high nibbles or bytes (12-bit
//!   codes cost 12 bits). They ride the activations' `cp.async` ring, `STAGES - 1` steps ahead.
//! - **The paired product** (`TR = 3`, up to 4 tokens, vectors of 4): each output row takes
//!   two mma rows, a vector's first two values in one and its last two in the other, so a
//!   look-up lands as the A registers `a0, a1` (or `a2, a3`) with no moves (`docs/vq.md`).
//! - **Residual stages** are looked up separately and added in f16 (one rounding for two
//!   stages, as the f32 sum rounded once).
//!
//! With `SPLIT > 1` the grid's third dimension splits k into `SPLIT` slices, and the partial
//! sums are added one of two ways. `ORDERED = 1`, in one launch as the quantized matmul's
//! split-k: each block stores its f32 partial in a workspace and counts itself on its output
//! tile's semaphore (between two `fence()`s), and the block that counts last adds the partials
//! in split order (the result does not depend on the order the blocks ran in), writes the f16
//! output and resets the semaphore. `ORDERED = 0`: the partials are added into one sum by
//! atomics and [`vq_finalize`], a second launch, writes the output and zeroes the sum. The
//! first saves a launch where the grid is about one wave; the second keeps no block waiting on
//! the others (`linear::ordered_for` chooses by measurement).
//!
//! [`vq_gemv_gc`] is the paper's naive "GC" baseline: codes in their original order `[R, n,
//! k / V]` (u8 when `CB = 1`; u16 little-endian when `CB = 2`, read as u32 words of two since the
//! VM has no 16-bit integers) and codebook components gathered from global memory for every
//! element, nothing staged or cached.

/// The codebook-centric VQ-GEMV (module docs). Parameters: `m, n, k`, the codebook tile
/// (`tile_rows x tile_cols`; `n x k` for one codebook), `x [m, k]`, the re-laid codes, the
/// codebooks, the scales (any buffer when `SCALE = 0`), `y [m, n]`, and for split k the f32
/// `workspace` (`[SPLIT, m, n]`, or `[m, n]` with `ORDERED = 0`) and the i32 `semaphores
/// [cdiv(m, tokens per block) · n / (32 · WN)]`, zero before the launch and left zero after it
/// (any buffers when `SPLIT = 1`: they are not viewed). The host keeps `32 · WN`
/// dividing `tile_rows`, `BK` dividing `tile_cols`, `SPLIT` dividing `k / BK`, and with
/// `ONE = 0` the slice of each block a whole number of codebook tiles.
#[tilus::kernel(
    lazy,
    grid = [
        cdiv(m, if TR == 3 { 4 } else { max(8 * TR, 16 - 8 * TR) }),
        n / (32 * WN),
        SPLIT,
    ],
    warps = WN,
    space(
        WN = [8],
        BK = [128],
        SPLIT = [1, 4],
        STAGES = [3],
        V = [4],
        R = [1, 2],
        E = [256],
        HB = [0, 4],
        REP = [1, 16],
        ONE = [0, 1],
        SCALE = [0, 1],
        TR = [0, 1, 2, 3],
        ORDERED = [0, 1],
        LAT = [0, 1],
    ),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_gemv<
    const WN: i32,
    const BK: i32,
    const SPLIT: i32,
    const STAGES: i32,
    const V: i32,
    const R: i32,
    const E: i32,
    const HB: i32,
    const REP: i32,
    const ONE: i32,
    const SCALE: i32,
    const TR: i32,
    const ORDERED: i32,
    const LAT: i32,
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
    workspace: GlobalMut<f32>,
    semaphores: GlobalMut<i32>,
) {
    let threads = WN * 32;
    let bn = WN * 32;
    // Tokens per block: 16, or 8 · TR for the transposed product (TR token tiles of 8); the
    // dimension of the vectors in the index layout.
    let paired = TR == 3;
    let bm = if paired { 4 } else { max(8 * TR, 16 - 8 * TR) };
    let vd = min(TR, 1);
    // Run fragments along k per step; 32-bit words per codebook row.
    let runs = BK / (4 * V);
    let hv = V / 2;
    // Per thread and step: 4 · runs codes per residual stage, their low bytes in `runs` words,
    // their high parts in `runs · HB / 8`.
    let lo_words = runs;
    let hi_words = runs * HB / 8;
    let wps = R * (lo_words + hi_words);
    // One code per thread and fragment, in both products the same thread and local for the same
    // (vector, channel) (so one code layout serves both): `[BK / V, bn]` with `TR = 0`,
    // `[bn, BK / V]` with `TR = 1`.
    let li = if TR == 0 {
        layout!(spatial(1, WN).local(runs, 4).column_spatial(4, 8))
    } else {
        layout!(spatial(WN, 1).local(1, runs).local(4, 1).spatial(8, 4))
    };
    // `y = x · Wᵀ` (TR = 0): the weight is B, the activations A, the accumulator `[16, bn]`.
    // `yᵀ = W · xᵀ` (TR = 1, 2): the weight is A (its rows relaid into the fragment), the
    // activations B, the accumulator `[bn, 8 · TR]`: each A fragment serves TR mma, and the
    // activations load as B pairs without register moves (TR = 1: half the mma and activation
    // loads of a 16-token tile at m <= 8).
    // The transposed product's token tiles (one for the paired product, whose accumulator
    // has its own layout below).
    let tt = if paired { 1 } else { TR };
    let (la, lw, lc) = if TR == 0 {
        if V == 4 {
            (
                layout!(spatial(1, 1).replicated(WN).local(1, runs).mma_a_k4),
                layout!(spatial(1, WN).local(runs, 4).mma_b_k4),
                layout!(spatial(1, WN).local(1, 4).mma_c),
            )
        } else {
            (
                layout!(spatial(1, 1).replicated(WN).local(1, runs).mma_a_k8),
                layout!(spatial(1, WN).local(runs, 4).mma_b_k8),
                layout!(spatial(1, WN).local(1, 4).mma_c),
            )
        }
    } else if V == 4 {
        (
            layout!(spatial(WN, 1).local(2, runs).mma_a_k4),
            layout!(li.local(1, V)),
            layout!(spatial(WN, 1).local(2, tt).mma_c),
        )
    } else {
        (
            layout!(spatial(WN, 1).local(2, runs).mma_a_k8),
            layout!(li.local(1, V)),
            layout!(spatial(WN, 1).local(2, tt).mma_c),
        )
    };
    let lx = if V == 4 {
        layout!(
            spatial(1, 1)
                .replicated(WN)
                .local(runs, max(tt, 1))
                .mma_b_k4
        )
    } else {
        layout!(
            spatial(1, 1)
                .replicated(WN)
                .local(runs, max(tt, 1))
                .mma_b_k8
        )
    };
    // The paired product (TR = 3, V = 4, up to 4 tokens a block): each mma row pair `g`,
    // `g + 8` holds one output row, its vectors' first two values in row `g` and last two in
    // row `g + 8`, so that a look-up (one `LDS.64`) is the A registers `a0, a1` (or `a2, a3`)
    // as it lands, with no moves. The B columns `2 τ` and `2 τ + 1` hold token `τ`'s matching
    // activations, and `y[τ] = C[g, 2 τ] + C[g + 8, 2 τ + 1]` (the other products are never
    // read). `li_p` holds the codes of `li` in the order of `la_p`'s fragments (rows `8 rg +
    // g`, runs `2 b + h`: fragment (rg, b), registers `a 2h, a 2h+1`); `lbw` the B words, token
    // `c / 2`'s values `2 (c % 2) ..` of each 4-value vector, as `lb_p` wants them.
    let li_p = layout!(spatial(WN, 1).local(4, runs).spatial(8, 4));
    let la_p = layout!(spatial(WN, 1).local(4, runs / 2).mma_a);
    let lc_p = layout!(spatial(WN, 1).local(4, 1).mma_c);
    let lbw = layout!(spatial(1, 1)
        .replicated(WN)
        .local(runs / 2, 2)
        .spatial(8, 4));
    let lb_p = layout!(spatial(1, 1).replicated(WN).local(runs / 2, 1).mma_b);
    let lo_layout = layout!(spatial(threads, 1).local(1, lo_words));
    // The codebook rows each thread writes at a switch: `R · E / threads` rows (`lfi`, the
    // row index layout of `scatter_rows`) of `hv` words.
    let lfi = layout!(local(R * E / threads, 1).spatial(threads, 1));
    let lf = layout!(lfi.local(1, hv));

    let [bi, bj, bs] = block_indices();
    let ksteps = k / BK;
    // The paired product reads the activations as words of two (its B fragment, below).
    let xw = if paired { 2 } else { 1 };
    let ga = if paired {
        view_global::<u32>(x, [m, k / 2])
    } else {
        view_global(x, [m, k])
    };
    let gcodes = view_global::<u32>(codes, [n / bn * ksteps * threads, wps]);
    let col_tiles = k / tile_cols;
    let groups = (n / tile_rows) * col_tiles;
    // The codebook tile(s) in shared memory: `[buffer, stage, entry, copy]` rows of `hv` words;
    // with `LAT = 1` the E8P table (`crate::vq::e8p::kernel_table`, its `REP` copies made by
    // the host): the stages' absolute rows (`E = 256`), 256 rows of sign masks, the shifts (not
    // copied: a warp reads two rows, which broadcast). One codebook (`ONE = 1`) comes from the
    // host as it lies in shared memory, its copies made (`VqLinear`'s kernel codebooks).
    let book_rows = if LAT == 1 {
        (R + 1) * E * REP + 2 * R
    } else {
        (2 - ONE) * R * E * REP
    };
    let gbook = if LAT == 1 || ONE == 1 {
        view_global::<i32>(codebooks, [book_rows, hv])
    } else {
        view_global::<i32>(codebooks, [groups * R * E, hv])
    };
    // The activations' ring, rows padded by 4·V halves (2·V banks) so that the runs' loads of a
    // phase fall on distinct banks: 16 lanes (4 rows x 4 runs) of 8 bytes for V = 4, 8 lanes
    // (2 x 4) of 16 bytes for V = 8. The codes' ring beside it.
    let sx = if paired {
        shared::<u32>([STAGES, bm, (BK + 4 * V) / 2])
    } else {
        shared::<f16>([STAGES, bm, BK + 4 * V])
    };
    let scodes = shared::<u32>([STAGES, threads, wps]);
    // Codebook buffers (two tiles' codebooks, or the one codebook). A buffer's copies of an
    // entry lie side by side: row `((r · E + entry) · nb + buf) · REP + copy`, so with two
    // buffers of 16 copies of 4 halves (or 8 of 8) an entry is one 256-byte row, which every
    // product reads as `[R · E, 2 · REP, hv]` (`fast`): a look-up's address is then one `PRMT`
    // of the code's byte and the lane's offset (`lookup`), not four instructions.
    let nb = 2 - ONE;
    let fast = ONE == 0 && HB == 0 && E == 256 && LAT == 0 && nb * REP * hv == 64;
    let sbook = if fast {
        shared::<i32>([R * E, nb * REP, hv])
    } else {
        shared::<i32>([book_rows, hv])
    };

    let row_tile = bj * bn / tile_rows;
    let tile_steps = tile_cols / BK;
    let per = ksteps / SPLIT;
    let t0 = bs * per;
    // Each lane's copy of the codebook (`lane % REP`: the column-spatial lane is `t + 4 g`),
    // the same in every local (masks, not remainders, so the compiler sees that).
    let lic = if paired { li_p } else { li };
    // The fast path's copies in the codes' own layout (`lookup` broadcasts them).
    let copy_li = if fast {
        (arange(li, vd, 0) & 3) + ((arange(li, 1 - vd, 0) & (REP / 4 - 1)) << 2)
    } else {
        register::<i32>(li, 0)
    };
    let copy = if REP == 1 {
        register::<i32>(lic, 0)
    } else {
        (arange(lic, vd, 0) & 3) + ((arange(lic, 1 - vd, 0) & (REP / 4 - 1)) << 2)
    };
    // switch(codebook): the rows in `lf` (loaded a tile ahead) into buffer `buf`, copy
    // `(c + row) % REP` at pass `c`: one 8-byte store per row, the 16 lanes of a phase on 16
    // distinct copies, so on distinct banks.
    let frow = arange(lfi, 0, 0);
    let fcol = arange(lf, 1, 0);
    let store_book = |rows: Tensor, buf: i32| {
        #[unroll]
        for c in 0..REP {
            let at = (frow * nb + buf) * REP + ((frow + c) & (REP - 1));
            if fast {
                // The rank-3 table takes its words one by one.
                scatter(rows, sbook, fcol + at * hv);
            } else {
                scatter_rows(rows, sbook, at, 1);
            }
        }
    };
    let issue = |t: i32, stage: i32| {
        copy_async(
            ga,
            slice_shared(sx, [stage, 0, 0], [bm, BK / xw]),
            // `t · (BK / xw)`: a constant step, so the chunks' alignment is proven (a
            // division of `t · BK` is not, and the copy would go element by element).
            [bi * bm, t * (BK / xw)],
        );
        copy_async(
            gcodes,
            slice_shared(scodes, [stage, 0, 0], [threads, wps]),
            [(bj * ksteps + t) * threads, 0],
        );
    };
    // The codes of residual stage `s` in ring stage `stage`, as i32 in `li`.
    let codes_of = |stage: i32, s: i32| {
        let lo = load_shared(
            slice_shared(scodes, [stage, 0, s * lo_words], [threads, lo_words]),
            lo_layout,
            [0, 0],
        );
        let c = cast::<i32>(view::<u8>(lo, li));
        if HB == 0 {
            c
        } else {
            // The high parts: a nibble (HB = 4) or a byte (HB = 8) of each code.
            let hi = load_shared(
                slice_shared(
                    scodes,
                    [stage, 0, R * lo_words + s * hi_words],
                    [threads, hi_words],
                ),
                layout!(spatial(threads, 1).local(1, hi_words)),
                [0, 0],
            );
            let high = if HB == 4 {
                cast::<i32>(view::<u4>(hi, li))
            } else {
                cast::<i32>(view::<u8>(hi, li))
            };
            c + (high << 8)
        }
    };

    // Prologue: the first codebook into registers (ONE = 0) or by cp.async with the ring's
    // first group (ONE = 1), then the ring's first STAGES - 1 steps.
    let first_tile = t0 / tile_steps;
    let mut next_book = if ONE == 1 {
        copy_async(
            gbook,
            slice_shared(sbook, [0, 0], [book_rows, hv]),
            [row_tile * R * E, 0],
        );
        ()
    } else {
        load_global(gbook, lf, [(row_tile * col_tiles + first_tile) * R * E, 0])
    };
    #[unroll]
    for st in 0..STAGES - 1 {
        if st < per {
            issue(t0 + st, st);
        }
        commit_group();
    }
    // The rows of residual stage `r` in ring stage `stage`, as f16 in `lw`: one look-up at row
    // `((buf · R + r) · E + code) · REP + copy` (`base` the part without `r` and the code), or
    // for an E8P code (`LAT = 1`, module docs of `crate::vq::e8p`) the absolute row of its high
    // byte XOR the sign masks of its low byte (rows at `row · REP + copy`), plus the shift of
    // the low byte's parity.
    let look = |stage: i32, r: i32, base: Tensor| {
        if fast {
            // The codes' bytes as they were loaded (`li`), each entry's 8 bytes at
            // `code · 256 + (buf · REP + copy) · 8`, then renamed into `la_p`'s order.
            let lo = load_shared(
                slice_shared(scodes, [stage, 0, r * lo_words], [threads, lo_words]),
                lo_layout,
                [0, 0],
            );
            let tab = slice_shared(sbook, [r * E, 0, 0], [E, nb * REP, hv]);
            let rows = lookup(tab, view::<u8>(lo, li), base);
            if paired {
                view::<f16>(cast::<i32>(rows, layout!(li_p.local(1, hv))), la_p)
            } else {
                // `li.local(1, hv)` holds a vector's words where `lw` wants them (local `l ·
                // hv + w` either way): only the logical shape changes.
                view::<f16>(rows, lw)
            }
        } else if paired {
            // The same codes in `li_p`'s order (a renaming of registers), each row landing
            // in its fragment's registers.
            let cp = cast::<i32>(codes_of(stage, r), li_p);
            view::<f16>(
                gather_rows(sbook, cp * (nb * REP) + (base + r * E * nb * REP), 1),
                la_p,
            )
        } else if LAT == 0 {
            let c = codes_of(stage, r);
            view::<f16>(
                gather_rows(sbook, c * (nb * REP) + (base + r * E * nb * REP), vd),
                lw,
            )
        } else {
            let c = codes_of(stage, r);
            let low = c & 255;
            let signed = gather_rows(sbook, ((c >> 8) + r * E) * REP + base, vd)
                ^ gather_rows(sbook, (low + R * E) * REP + base, vd);
            let parity = popc(low) & 1;
            let shift = gather_rows(sbook, parity + ((R + 1) * E * REP + 2 * r), vd);
            view::<f16>(signed, lw) + view::<f16>(shift, lw)
        }
    };
    let mut acc = register::<f32>(if paired { lc_p } else { lc }, 0.0);
    // The paired product's B words: `[token, word]` of a ring stage.
    let rw = (BK + 4 * V) / 2;
    let bwords = if paired {
        let row = arange(lbw, 0, 0);
        let col = arange(lbw, 1, 0);
        ((row & 7) >> 1) * rw + (row >> 3) * 16 + (col >> 2) * 8 + (col & 3) * 2 + (row & 1)
    } else {
        register::<i32>(lbw, 0)
    };
    let outer = if ONE == 1 { 1 } else { per / tile_steps };
    let inner = if ONE == 1 { per } else { tile_steps };
    for tt in 0..outer {
        let tile = first_tile + tt;
        // A mask, not a remainder: the value ranges see `buf` in {0, 1} whatever `tile`, so
        // the look-ups and the switch's stores need no bounds checks.
        let buf = if ONE == 1 { 0 } else { tile & 1 };
        if ONE == 0 {
            // switch: this tile's codebook into its buffer, last read two tiles ago (every
            // thread has passed a barrier since; the step's barrier below publishes it), and
            // the next tile's into registers.
            store_book(next_book, buf);
            let g = row_tile * col_tiles + tile;
            next_book = load_global(gbook, lf, [min(g + 1, groups - 1) * R * E, 0]);
        }
        for s in 0..inner {
            let j = tt * inner + s;
            // Step j has landed once at most STAGES - 2 newer groups are in flight.
            wait_group(STAGES - 2);
            sync();
            let next = j + STAGES - 1;
            if next < per {
                issue(t0 + next, next % STAGES);
            }
            commit_group();
            let stage = j % STAGES;
            // The row of code 0 of stage 0 (the fast path: the entry's column, `buf · REP +
            // copy`, in `li`).
            let base = if fast {
                copy_li + buf * REP
            } else {
                copy + buf * REP
            };
            let mut w = look(stage, 0, base);
            #[unroll]
            for r in 1..R {
                w = w + look(stage, r, base);
            }
            if paired {
                // From the stage's slice: the words' value ranges stay inside it, so the reads
                // need no bounds checks.
                let bw = gather(slice_shared(sx, [stage, 0, 0], [bm, rw]), bwords);
                acc = dot(w, view::<f16>(bw, lb_p), acc);
            } else if TR == 0 {
                let xs = slice_shared(sx, [stage, 0, 0], [bm, BK]);
                acc = dot(load_shared(xs, la, [0, 0]), w, acc);
            } else {
                let xs = slice_shared(sx, [stage, 0, 0], [bm, BK]);
                let xb = load_shared(permute_shared(xs, [1, 0]), lx, [0, 0]);
                acc = dot(cast::<f16>(w, la), xb, acc);
            }
        }
    }
    if SCALE == 1 && !paired {
        if TR == 0 {
            let lcs = layout!(reduce(lc, [0]));
            let sv = load_global(view_global(scales, [1, n]), lcs, [0, bj * bn]);
            acc = acc * cast::<f32>(sv);
        } else {
            let lcs = layout!(reduce(lc, [1]));
            let sv = load_global(view_global(scales, [n, 1]), lcs, [bj * bn, 0]);
            acc = acc * cast::<f32>(sv);
        }
    }
    // `[bm, bn]` of y: the transposed product's accumulator viewed as `[8, bn]` (the same
    // registers, `mma_c_t`); the paired product's `[4, bn]` (token `t` of rows `8 rg + g` on
    // lane `4 g + t`: the lane that holds both of its halves, `C[g, 2t]` and `C[g + 8, 2t + 1]`).
    let ly = if TR == 0 {
        lc
    } else if paired {
        layout!(spatial(1, WN).local(1, 4).column_spatial(4, 8))
    } else {
        layout!(spatial(1, WN).column_local(TR, 2).mma_c_t)
    };
    let out = if paired {
        // The two halves of each output, through shared memory once per block.
        let sacc = shared::<f32>([WN * 64, 8]);
        store_shared(acc, sacc, [0, 0]);
        sync();
        let tok = arange(ly, 0, 0);
        let row = arange(ly, 1, 0);
        let first = (((row >> 3) << 4) + (row & 7)) * 8 + tok * 2;
        let mut y2 = gather(sacc, first) + gather(sacc, first + 65);
        if SCALE == 1 {
            let lcs = layout!(reduce(ly, [0]));
            let sv = load_global(view_global(scales, [1, n]), lcs, [0, bj * bn]);
            y2 = y2 * cast::<f32>(sv);
        }
        y2
    } else {
        view::<f32>(acc, ly)
    };
    if SPLIT == 1 {
        store_global(cast::<f16>(out), view_global(y, [m, n]), [bi * bm, bj * bn]);
    } else if ORDERED == 0 {
        // The partials are added into one `[m, n]` f32 sum by atomics (rows past m are
        // skipped: index -1); `vq_finalize`, a second launch, writes y and zeroes the sum.
        let row = arange(ly, 0, bi * bm);
        let col = arange(ly, 1, bj * bn);
        let at = select(row < m, row * n + col, -1);
        atomic_add(view_global(workspace, [m * n]), at, out);
    } else {
        // In one launch: store this block's partial (rows past m are masked), count it on
        // the tile's semaphore (lane 0's atomic: every other index is out of range), and
        // let the block that counts last add the partials in split order and reset the
        // count.
        let tiles_m = cdiv(m, bm);
        let gw = view_global(workspace, [SPLIT, m, n]);
        store_global(out, gw, [bs, bi * bm, bj * bn]);
        // Release: every thread's stores, then the count.
        sync();
        fence();
        let lanes = layout!(spatial(threads));
        let lane = arange(lanes, 0, 0);
        let index = select(lane == 0, arange(lanes, 0, bj * tiles_m + bi), -1);
        let gsem = view_global(semaphores, [tiles_m * (n / bn)]);
        let old = atomic_add(gsem, index, register::<i32>(lanes, 1));
        // Acquire: after the count, before the barrier that hands it to every thread.
        fence();
        let arrived = item(sum(old, 0));
        if arrived == SPLIT - 1 {
            let mut total = load_global(gw, ly, [0, bi * bm, bj * bn]);
            for split in 1..SPLIT {
                total = total + load_global(gw, ly, [split, bi * bm, bj * bn]);
            }
            store_global(
                cast::<f16>(total),
                view_global(y, [m, n]),
                [bi * bm, bj * bn],
            );
            store_global(
                register::<i32>(layout!(local(1)), 0),
                gsem,
                [bj * tiles_m + bi],
            );
        }
    }
}

/// The second launch of [`vq_gemv`]'s split k with `ORDERED = 0`: `y = f16(sum)` for the
/// `[m, n]` f32 sum of the partials, which is left zeroed for the next launch. 1024 elements
/// per block.
#[tilus::kernel(grid = [cdiv(len, 1024)], warps = 4)]
pub fn vq_finalize(len: i32, sum: GlobalMut<f32>, y: GlobalMut<f16>) {
    let [b] = block_indices();
    let l = layout!(spatial(128).local(8));
    let gs = view_global(sum, [len]);
    let v = load_global(gs, l, [b * 1024]);
    store_global(cast::<f16>(v), view_global(y, [len]), [b * 1024]);
    store_global(register::<f32>(l, 0.0), gs, [b * 1024]);
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

/// The weight dense, `w[n, k]` (f16, row-major: a linear layer's `[out, in]`, as
/// `Cublas::gemm_nt` multiplies it): `w[r, c] = scale[r] · Σ_s book(g, s)[code(s, r, c / V)][c %
/// V]` with `g` the codebook tile of `(r, c)`, from the codes in their original order and the
/// codebooks as [`vq_gemv_gc`] reads them (`CB` as there). For prefill, where one GEMM on the
/// dense weight beats re-reading the codes for every 16 tokens. Each thread writes 16
/// consecutive values of one row: one code and one codebook row (`gather_rows`: an 8- or
/// 16-byte load) per vector and residual stage, one scale, two 16-byte stores. The host keeps
/// `BN` dividing the tile's rows and `BK` its columns.
#[tilus::kernel(
    lazy,
    grid = [n / BN, k / BK],
    warps = WN,
    space(
        BN = [32],
        BK = [64],
        WN = [4],
        V = [4, 8],
        R = [1, 2],
        CB = [1, 2],
        SCALE = [0, 1],
    ),
)]
#[allow(clippy::too_many_arguments)]
pub fn vq_dequant<
    const BN: i32,
    const BK: i32,
    const WN: i32,
    const V: i32,
    const R: i32,
    const CB: i32,
    const SCALE: i32,
>(
    n: i32,
    k: i32,
    entries: i32,
    tile_rows: i32,
    tile_cols: i32,
    codes: Global<u8>,
    codebooks: Global<f16>,
    scales: Global<f16>,
    w: GlobalMut<f16>,
) {
    // A thread's vectors (`li`, over `[BN, BK / V]`), then their values (`l`, over `[BN, BK]`).
    let li = layout!(spatial(BN, 32 * WN / BN).local(1, BK * BN / (32 * WN * V)));
    let l = layout!(spatial(BN, 32 * WN / BN)
        .local(1, BK * BN / (32 * WN * V))
        .local(1, V));
    let [bi, bj] = block_indices();
    let kvt = k / V;
    let gcodes = if CB == 1 {
        view_global::<u8>(codes, [R * n * kvt])
    } else {
        view_global::<u32>(codes, [R * n * kvt / 2])
    };
    let col_tiles = k / tile_cols;
    let books = (n / tile_rows) * col_tiles * R;
    let gbook = view_global(codebooks, [books * entries, V]);
    let row = arange(li, 0, bi * BN);
    let kv = arange(li, 1, bj * BK / V);
    let g = bi * BN / tile_rows * col_tiles + bj * BK / tile_cols;
    let mut acc = register::<f32>(l, 0.0);
    #[unroll]
    for s in 0..R {
        let at = (row + s * n) * kvt + kv;
        let code = if CB == 1 {
            cast::<i32>(gather(gcodes, at))
        } else {
            cast::<i32>((gather(gcodes, at / 2) >> cast::<u32>(at % 2 * 16)) & 0xFFFF)
        };
        acc = acc + cast::<f32>(gather_rows(gbook, code + (g * R + s) * entries, 1));
    }
    if SCALE == 1 {
        let ls = layout!(reduce(l, [1]));
        acc = acc * cast::<f32>(load_global(view_global(scales, [n, 1]), ls, [bi * BN, 0]));
    }
    store_global(cast::<f16>(acc), view_global(w, [n, k]), [bi * BN, bj * BK]);
}
