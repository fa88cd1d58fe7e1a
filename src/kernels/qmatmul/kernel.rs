//! The VM programs of the quantized matmul, written with `#[kernel]`: the main pipeline (paper
//! Figure 2 generalized) with its in-kernel split-k reduction (the last block of each output
//! tile sums the others' partial sums), the dequantization of prefill's dequantize-then-GEMM
//! method, and the device weight re-layout (Figure 8 generalized).
//!
//! The family is open (25 weight types, f16/bf16, any group size, any tiles a user configures),
//! so the kernels are `lazy`: the declared space is checked when the crate is built, and
//! [`super::program::build`] instantiates the configuration it needs at run time.
//!
//! The three matmul kernels end alike (the tile's store, or split-k's partials, semaphore and
//! reduction): that end is one helper, `store_tile`, shared through `#[tilus::helpers]`
//! (docs/macro.md, "Helper functions").

pub use kernels::*;

#[tilus::helpers]
mod kernels {
    /// Count `amount` arrivals on the semaphore of output tile `(bi, j)` after this block's
    /// partial stores, and return the count before them (the same on every thread). Release:
    /// every thread's stores, then one thread's atomic (every other thread's index is out of
    /// range); acquire: a fence after it, before the barrier that hands the count to every
    /// thread.
    #[helper]
    fn count_arrivals(lanes: Layout, bi: i32, j: i32, amount: i32) -> i32 {
        let tiles_m = cdiv(m, BM);
        sync();
        fence();
        let lane = arange(lanes, 0, 0);
        let index = select(lane == 0, arange(lanes, 0, j * tiles_m + bi), -1);
        let gsem = view_global(semaphores, [tiles_m * (n / BN)]);
        let old = atomic_add(gsem, index, register::<i32>(lanes, 0) + amount);
        fence();
        item(sum(old, 0))
    }

    /// Reset the semaphore of output tile `(bi, j)` for the next launch (its last block).
    #[helper]
    fn reset_arrivals(bi: i32, j: i32) {
        let tiles_m = cdiv(m, BM);
        let gsem = view_global(semaphores, [tiles_m * (n / BN)]);
        store_global(
            register::<i32>(layout!(local(1)), 0),
            gsem,
            [j * tiles_m + bi],
        );
    }

    /// The end of every matmul block: its `[BM, BN]` tile of `c` from the f32 accumulator `acc`
    /// (in layout `lc`; `lanes` is one element per thread of the block). With `SPLIT > 1`
    /// (split-k in one launch): store this block's f32 partial, count it on the tile's semaphore
    /// (one thread's atomic: every other thread's index is out of range), and let the block that
    /// counts last sum the partials in split order (the result does not depend on the arrival
    /// order) and reset the semaphore for the next launch. `write_out`: the sum's loop is
    /// written out, every partial's load in flight at once (a loop waits on L2 once per few
    /// partials, perf note 37); for kernels with few accumulators per thread, since the
    /// registers it takes count for the whole kernel.
    #[helper]
    fn store_tile(
        acc: Tensor,
        lc: Layout,
        lanes: Layout,
        bi: i32,
        bj: i32,
        bs: i32,
        write_out: bool,
    ) {
        if SPLIT > 1 {
            let tiles_m = cdiv(m, BM);
            let gw = view_global(workspace, [SPLIT, m, n]);
            store_global(acc, gw, [bs, bi * BM, bj * BN]);
            let arrived = count_arrivals(lanes, bi, bj, 1);
            if arrived == SPLIT - 1 {
                let mut total = load_global(gw, lc, [0, bi * BM, bj * BN]);
                if write_out {
                    #[unroll]
                    for split in 1..SPLIT {
                        total = total + load_global(gw, lc, [split, bi * BM, bj * BN]);
                    }
                } else {
                    for split in 1..SPLIT {
                        total = total + load_global(gw, lc, [split, bi * BM, bj * BN]);
                    }
                }
                store_global(cast::<A>(total), view_global(c, [m, n]), [bi * BM, bj * BN]);
                reset_arrivals(bi, bj);
            }
        } else {
            store_global(cast::<A>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
        }
    }

    /// The end of stream-k worker `w`'s pass over column tile `j` of block row `bi`: the sum
    /// over `len` of the tile's `kt` k steps (one ring stage each) in the f32 accumulator `acc`
    /// (layout `lc`; `lanes` one element per thread), `first` when it is the worker's first
    /// pass. A whole tile is stored. A part is this worker's partial sum: it goes to the
    /// worker's slot (0 for its first pass, 1 for its last: only those can be partial) in
    /// `workspace [cdiv(m, BM), STREAM, 2, BM, BN]`, and its k steps are counted on the tile's
    /// semaphore (one thread's atomic). The block whose count completes the tile adds the
    /// partials of the tile's workers, the owners of its first to its last k step, in worker
    /// order (the result does not depend on the arrival order), and resets the semaphore for
    /// the next launch.
    #[helper]
    fn stream_store(
        acc: Tensor,
        lc: Layout,
        lanes: Layout,
        bi: i32,
        w: i32,
        j: i32,
        len: i32,
        kt: i32,
        first: bool,
    ) {
        if len == kt {
            store_global(cast::<A>(acc), view_global(c, [m, n]), [bi * BM, j * BN]);
        } else {
            let tiles_m = cdiv(m, BM);
            let gw = view_global(workspace, [tiles_m * STREAM * 2 * BM, BN]);
            let slot = |worker: i32, first: bool| {
                ((bi * STREAM + worker) * 2 + if first { 0 } else { 1 }) * BM
            };
            store_global(acc, gw, [slot(w, first), 0]);
            let arrived = count_arrivals(lanes, bi, j, len);
            if arrived + len == kt {
                // The owner of iteration `it` is the last worker starting at or before it.
                let total = (n / BN * kt) as i64;
                let lo = ((j * kt + 1) as i64 * STREAM - 1) / total;
                let hi = (((j + 1) * kt) as i64 * STREAM - 1) / total;
                let mut sum_k = register::<f32>(lc, 0.0);
                for worker in lo as i32..hi as i32 + 1 {
                    // A worker starting inside the tile has it as its first pass.
                    let starts = worker as i64 * total / STREAM >= (j * kt) as i64;
                    sum_k = sum_k + load_global(gw, lc, [slot(worker, starts), 0]);
                }
                store_global(cast::<A>(sum_k), view_global(c, [m, n]), [bi * BM, j * BN]);
                reset_arrivals(bi, j);
            }
        }
    }

    /// The one-token integer-mma gemvs' split of the activations staged as bytes in `sx`
    /// (`groups` scale groups of `G` values) into four s8 digits, the rows of `st`, a warp a
    /// group ([`qmatmul_gemv_imma`]'s docs): each value is scaled by its group's `σ` and by
    /// its field's place in the weight byte, rounded, and split into balanced base-256
    /// digits; `1 / σ` and `Σx / 2^24` of each group go to `sg`.
    #[helper]
    fn split_digits(sx: _, st: _, sg: _, groups: i32) {
        // 3- and 5-bit codes come as two planes: a field's place is `hb f`, but for the last
        // field, at `top = 8 - bits` (as in `qmatmul_gemv_imma`).
        let planes = W::BITS == 3 || W::BITS == 5;
        let hb = if planes { W::BITS - 1 } else { W::BITS };
        let p = 8 / hb;
        let top = if planes {
            8 - W::BITS
        } else {
            W::BITS * (p - 1)
        };
        let fk = BK / p;
        let ab = A::BITS / 8;
        let lxg = layout!(spatial(1, WN, 32).local(1, 1, G / 32));
        let lflat = layout!(spatial(1, WN * 32).local(1, G / 32));
        let lxb8 = layout!(spatial(1, WN * 32).local(1, G / 32 * ab));
        let lgm = layout!(reduce(lxg, [2]));
        for gi in 0..cdiv(groups, WN) {
            let x = cast::<f32>(view::<A>(load_shared(sx, lxb8, [0, gi * WN * G * ab]), lxg));
            let amax = reduce_max(abs(x), 2);
            // `σ = 2^(156 - E)` for the biased exponent `E` of `max|x|` (so `max|x| σ < 2^30`),
            // `1 / σ = 2^(E - 156)`, by their f32 bits; 1 for a group of zeros.
            let ebits = view::<i32>(amax, lgm) >> 23;
            let nz = amax > 0.0;
            let sig = select(nz, view::<f32>((283 - ebits) << 23, lgm), 1.0);
            let inv_sig = select(nz, view::<f32>((ebits - 29) << 23, lgm), 1.0);
            // `1 / γ` of each value's field (from the value's row in its tile: a group shorter
            // than a tile starts inside one), times the `2^-(bits (P - 1))` that keeps every
            // field's integer below `2^30`.
            let row = if G < BK {
                ((gi * WN + arange(lxg, 1, 0)) * G + arange(lxg, 2, 0)) % BK
            } else {
                arange(lxg, 2, 0) % BK
            };
            let field = row / fk;
            // `top - pos(f)`: with planes `top - hb f`, and 0 for the last field.
            let gap = if planes {
                top - hb * field + field / (p - 1) * (hb * (p - 1) - top)
            } else {
                (p - 1 - field) * W::BITS
            };
            let up = cast::<f32>(register::<i32>(lxg, 1) << gap);
            let v = x * (sig * (1.0 / (1 << top))) * up;
            // The integer nearest `v` (exact: `v` has f16's 11 significant bits), then its
            // balanced base-256 digits from the least significant end, each in `[-128, 127]`
            // (every step exact in f32: the spans stay under 24 bits).
            let iv = floor(v + 0.5);
            let q1 = floor((iv + 128.0) * (1.0 / 256.0));
            let d3 = iv - q1 * 256.0;
            let q2 = floor((q1 + 128.0) * (1.0 / 256.0));
            let d2 = q1 - q2 * 256.0;
            let d0 = floor((q2 + 128.0) * (1.0 / 256.0));
            let d1 = q2 - d0 * 256.0;
            let at = gi * WN * G;
            store_shared(view::<u8>(cast::<i8>(d0), lflat), st, [0, at]);
            store_shared(view::<u8>(cast::<i8>(d1), lflat), st, [1, at]);
            store_shared(view::<u8>(cast::<i8>(d2), lflat), st, [2, at]);
            store_shared(view::<u8>(cast::<i8>(d3), lflat), st, [3, at]);
            store_shared(inv_sig, sg, [0, gi * WN, 0]);
            store_shared(sum(x, 2) * (1.0 / 16777216.0), sg, [1, gi * WN, 0]);
        }
    }

    /// Scale group `grp`'s exact i32 sums `acc_g` into the f32 accumulator `acc` (layout
    /// `lct`) with its scales (row `row` of ring stage `stage` of `ss`) and the group's `1 / σ`
    /// from `sg`, and add its `s (z + offset) Σx / 2^24` per output column (layout `lcs`) to
    /// `zsum`, the zero points from `zb` (with `ZEROS = 1`): the one-token integer-mma gemvs'
    /// group finish ([`qmatmul_gemv_imma`]). Returns the new `(acc, zsum)`.
    #[helper]
    #[allow(clippy::too_many_arguments)]
    fn finish_group(
        acc: Tensor,
        zsum: Tensor,
        acc_g: Tensor,
        ss: _,
        zb: _,
        sg: _,
        lct: Layout,
        lcs: Layout,
        grp: i32,
        row: i32,
        stage: i32,
    ) -> (Tensor, Tensor) {
        let fold = ZEROS == 1;
        let offset = if SIGNED == 1 {
            0.5 * (1 << W::BITS)
        } else {
            0.0
        };
        let one = layout!(local(1, 1, 1));
        let sc = cast::<f32>(load_shared(
            slice_shared(ss, [stage, row, 0], [1, BN]),
            lcs,
            [0, 0],
        ));
        let inv_sigma = item(load_shared(sg, one, [0, grp, 0]));
        let acc_new = mul_add(view::<f32>(cast::<f32>(acc_g), lct), sc * inv_sigma, acc);
        let zsum_new = if fold || SIGNED == 1 {
            let asum = item(load_shared(sg, one, [1, grp, 0]));
            let zc = if fold {
                let z = cast::<f32>(load_shared(
                    slice_shared(zb, [stage, row, 0], [1, BN]),
                    lcs,
                    [0, 0],
                ));
                // Not `z + 0.0`: that is no identity for `-0.0`, so it would stay an add.
                if SIGNED == 1 {
                    z + offset
                } else {
                    z
                }
            } else {
                register::<f32>(lcs, offset)
            };
            mul_add(zc * sc, asum, zsum)
        } else {
            zsum
        };
        (acc_new, zsum_new)
    }

    /// `C[m, n] = A[m, k] · dequant(W)[k, n]` for one block tile `[BM, BN]` and one of `SPLIT`
    /// slices of k.
    ///
    /// Tile parameters (set by [`crate::kernels::qmatmul::program::build`] from a `QMatmulConfig`): the block tile
    /// `BM x BN x BK`; the warp grid `WM x WN`; `STAGES` of the cp.async pipeline; `SPLIT` slices of
    /// k (with `SPLIT > 1` each block stores its f32 partial sum and the last block of the output
    /// tile to finish sums them, see the end of the body); `G` rows of k per scale group (0: one scale per
    /// output channel); `ZEROS` (1: zero points); `H`, how the re-laid-out weight packs each
    /// thread's codes (`swap_inner_locals(.., 2, H)`, 1 for the natural order); `VEC`, the bytes of
    /// each thread's contiguous weight runs; `SWB`/`SWS`, the XOR swizzle of the activation tile
    /// (`SWB = 0`: none). Data types: activations (and output) `A`, weights `W`.
    ///
    /// Parameters: `a [m, k]`, the re-laid-out weight `b`, `scales [k / G, n]` (`[1, n]` per
    /// channel), `zeros` like the scales (any buffer when `ZEROS = 0`: it is viewed with no
    /// rows), `c [m, n]`; with `SPLIT > 1` the f32 `workspace [SPLIT, m, n]` and the i32
    /// `semaphores [cdiv(m, BM) * (n / BN)]`, all zero before the launch and left zero after it
    /// (any buffers when `SPLIT = 1`: they are not viewed).
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, BM), n / BN, SPLIT],
        warps = WM * WN,
        target = sm80,
        // Checked when the crate is built: per-channel, short and whole groups, zero points, both
        // packing orders, bit widths 2, 4 and 8, f16 and bf16, both output types.
        space(
            BM = [16],
            BN = [128],
            BK = [64],
            WM = [1],
            WN = [4],
            STAGES = [3],
            SPLIT = [1, 4],
            G = [0, 32, 128],
            ZEROS = [0, 1],
            H = [1, 4],
            VEC = [16],
            SWB = [3],
            SWS = [3],
        ),
        dtypes(A = [f16, bf16], W = [u2, u4, i8]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_main<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WM: i32,
        const WN: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const H: i32,
        const VEC: i32,
        const SWB: i32,
        const SWS: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
    ) {
        // mma repeats per warp and k tile.
        let rep_m = BM / (16 * WM);
        let rep_n = BN / (8 * WN);
        let rep_k = BK / 16;
        let grouped = G > 0;
        // Scale groups per k tile: several when a group is shorter than a tile.
        let gk = if grouped && G % BK != 0 { BK / G } else { 1 };
        // Groups of whole k tiles scale the f32 accumulator once per group (one FFMA per output)
        // instead of each weight; shorter groups scale each weight, per-channel scales the result.
        let whole = grouped && G % BK == 0;
        let per_weight = grouped && !whole;
        // Zero points where the scale goes on the accumulator come off it too:
        // sum a (q - z) = sum a q - z sum a, with the row sums of A from a second mma against ones.
        let fold = ZEROS == 1 && !per_weight;
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = 4 * rep_k * rep_n * W::BITS / 8;

        // Warp (wi, wj) computes the [BM / WM, BN / WN] block (wi, wj) of C; A is replicated over
        // the warps along n and B over the warps along m, so each warp holds its mma operands.
        let lc = layout!(spatial(WM, WN).local(rep_m, rep_n).mma_c);
        let la = layout!(spatial(WM, 1).replicated(WN).local(rep_m, rep_k).mma_a);
        let lb = layout!(replicated(WM).spatial(1, WN).local(rep_k, rep_n).mma_b);
        // The codes on B's threads, in the order the re-laid-out bytes pack them.
        let lq = layout!(swap_inner_locals(lb, 2, H));
        // B and the codes with k split per scale group: [gk, BK / gk, BN].
        let lb3 = layout!(split(lb, 0, BK / gk));
        let lq3 = layout!(split(lq, 0, BK / gk));
        // Scales and zero points of a k tile, [gk, 1, BN], and per output column, [1, BN].
        let ls = layout!(reduce(lb3, [1]));
        let lcs = layout!(reduce(lc, [0]));
        // The weight tile as bytes: each thread's runs of VEC bytes (one 16-byte access each).
        let lw = layout!(replicated(WM)
            .local(thread_bytes / VEC)
            .spatial(32 * WN)
            .local(VEC));

        let [bi, bj, bs] = block_indices();
        let groups = if grouped { k / G } else { 1 };
        let ga = view_global(a, [m, k]);
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        let gs = view_global(scales, [groups, 1, n]);
        let gz = view_global(zeros, [if ZEROS == 1 { groups } else { 0 }, 1, n]);

        let sa = if SWB > 0 {
            shared::<A>([STAGES, BM, BK], swizzle(SWB, 3, SWS))
        } else {
            shared::<A>([STAGES, BM, BK])
        };
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let ss = if grouped {
            shared::<A>([STAGES, gk, 1, BN])
        } else {
            ()
        };
        let sz = if grouped && ZEROS == 1 {
            shared::<A>([STAGES, gk, 1, BN])
        } else {
            ()
        };
        let mut acc = register::<f32>(lc, 0.0);
        let ones = if fold { register::<A>(lb, 1.0) } else { () };

        let ktiles = k / (BK * SPLIT);
        let kt0 = bs * ktiles;
        // The cp.async copies of k tile `tile` (of this block's slice) into pipeline stage `stage`.
        let issue = |tile: i32, stage: i32| {
            let t = kt0 + tile;
            copy_async(
                ga,
                slice_shared(sa, [stage, 0, 0], [BM, BK]),
                [bi * BM, t * BK],
            );
            copy_async(gb, slice_shared(sb, [stage, 0], [tile_bytes]), [t, bj, 0]);
            if grouped {
                let group = t * BK / G;
                copy_async(
                    gs,
                    slice_shared(ss, [stage, 0, 0, 0], [gk, 1, BN]),
                    [group, 0, bj * BN],
                );
                if ZEROS == 1 {
                    copy_async(
                        gz,
                        slice_shared(sz, [stage, 0, 0, 0], [gk, 1, BN]),
                        [group, 0, bj * BN],
                    );
                }
            }
        };
        // Prologue: the first STAGES - 1 tiles in flight, one commit group each (empty past the
        // end, so that the wait counts below stay exact).
        #[unroll]
        for st in 0..STAGES - 1 {
            if st < ktiles {
                issue(st, st);
            }
            commit_group();
        }
        // One k tile: wait for it, load it, refill the stage read before, and dequantize the
        // weight in registers (bytes -> codes -> A, minus zero points and times scales where they
        // apply per weight). Returns the activation and weight mma operands.
        let step = |kt: i32| {
            // Tile kt has landed once at most STAGES - 2 newer groups are in flight.
            wait_group(STAGES - 2);
            sync();
            let stage = kt % STAGES;
            let ra = load_shared(slice_shared(sa, [stage, 0, 0], [BM, BK]), la, [0, 0]);
            let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lw, [0]);
            let group_tile = |buf: Tensor| {
                load_shared(
                    slice_shared(buf, [stage, 0, 0, 0], [gk, 1, BN]),
                    ls,
                    [0, 0, 0],
                )
            };
            let rs = if per_weight { group_tile(ss) } else { () };
            let rz = if per_weight && ZEROS == 1 {
                group_tile(sz)
            } else {
                ()
            };
            // Refill the stage read in the previous iteration (everyone passed the barrier above).
            let next = kt + (STAGES - 1);
            if next < ktiles {
                issue(next, next % STAGES);
            }
            commit_group();
            let wf = cast::<A>(view::<W>(rw, lq3), lb3);
            let wf = if per_weight && ZEROS == 1 {
                wf - rz
            } else {
                wf
            };
            let wf = if per_weight { wf * rs } else { wf };
            (ra, view::<A>(wf, lb))
        };
        // `acc_t + asum * -z` (one FFMA each) for the zero points `zc` of the output columns.
        let subtract_zeros =
            |acc_t: Tensor, asum: Tensor, zc: Tensor| mul_add(asum, neg(cast::<f32>(zc)), acc_t);
        if whole {
            let tiles_per_group = G / BK;
            for g in 0..ktiles / tiles_per_group {
                let mut acc_g = register::<f32>(lc, 0.0);
                let mut asum = if fold { register::<f32>(lc, 0.0) } else { () };
                let accumulate = |kt: i32| {
                    let (ra, wb) = step(kt);
                    acc_g = dot(ra, wb, acc_g);
                    if fold {
                        asum = dot(ra, ones, asum);
                    }
                };
                // The group's last tile is peeled off the loop: with two tiles per group (bk 64,
                // group 128) the two copies of the body schedule better than a loop of two
                // (measured on the H100: 6- and 7-bit weights 2-5% faster).
                let first = g * tiles_per_group;
                for t in 0..tiles_per_group - 1 {
                    accumulate(first + t);
                }
                let last_tile = first + (tiles_per_group - 1);
                accumulate(last_tile);
                // The group's scales (and zero points) came with its last tile, whose stage is not
                // refilled before the next barrier.
                let last = last_tile % STAGES;
                if fold {
                    let zc = load_shared(slice_shared(sz, [last, 0, 0, 0], [1, BN]), lcs, [0, 0]);
                    acc_g = subtract_zeros(acc_g, asum, zc);
                }
                let sc = load_shared(slice_shared(ss, [last, 0, 0, 0], [1, BN]), lcs, [0, 0]);
                acc = mul_add(acc_g, cast::<f32>(sc), acc);
            }
        } else {
            let mut asum = if fold { register::<f32>(lc, 0.0) } else { () };
            for kt in 0..ktiles {
                let (ra, wb) = step(kt);
                acc = dot(ra, wb, acc);
                if fold {
                    asum = dot(ra, ones, asum);
                }
            }
            if fold {
                let zc = load_global(view_global(zeros, [1, n]), lcs, [0, bj * BN]);
                acc = subtract_zeros(acc, asum, zc);
            }
        }
        wait_group(0);

        // Per-channel scales multiply the accumulator once, in f32.
        if !grouped {
            let sc = load_global(view_global(scales, [1, n]), lcs, [0, bj * BN]);
            acc = acc * cast::<f32>(sc);
        }
        store_tile(acc, lc, layout!(spatial(WM * WN * 32)), bi, bj, bs, false);
    }

    /// [`QMatmulMethod::Gemv`](crate::kernels::qmatmul::QMatmulMethod): the transposed product
    /// `Cᵀ[n, m] = dequant(W)ᵀ · Aᵀ` for `BM` activation rows per block (`BM / 8` token tiles of
    /// the mma's 8 columns), one `[BM, BN]` tile and one of `SPLIT` slices of k.
    ///
    /// The weight tile `[BK, BN]` is dequantized in the `mma_a_t` layout, so that a free `view`
    /// makes it the A operand `[BN, BK]` of the mma: each mma then takes 256 weights (16 output
    /// columns by 16 k) against the 8 activation rows as B, twice what the weight-as-B pipeline of
    /// [`qmatmul_main`] gets from its 16-row tile of mostly padding, and the `[BN, 8]` accumulator
    /// is half the size. With `BM > 8` each dequantized weight fragment feeds `BM / 8` mmas, one
    /// per token tile, so the cast is paid once for all of them. The activations are loaded
    /// n-major (`mma_b_t` over `[BM, BK]`) and viewed as B; the accumulator is viewed as
    /// `[BM, BN]` (`mma_c_t`) for the scales and the store. The token tiles are the inner locals
    /// (`column_local`) on both sides of each view, so the views move no data.
    /// Scale groups span whole k tiles (`G % BK == 0`) or the whole of k (`G = 0`).
    ///
    /// With `BIAS = 1` the codes are converted by `cast_biased` (one `lop3` per pair of weights
    /// instead of a `lop3` and an `fma`): each weight comes out a constant of its register position
    /// above its value, and the same mma over those constants (`cast_biased` of zero codes), which
    /// does not depend on the output column, is subtracted once per group.
    ///
    /// Parameters and the other tile parameters as [`qmatmul_main`]'s (one warp row), and
    /// `dependent` as [`qmatmul_gemv_imma`]'s: 1 when launched as a programmatic dependent (its
    /// first weight tiles are then issued before `wait_prior_grid()`, their activations after).
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, BM), n / BN, SPLIT],
        warps = WN,
        target = sm80,
        // Checked when the crate is built: per-channel and grouped scales, zero points, both
        // packing orders, bit widths 2, 4 and 8, f16 and bf16, both output types.
        space(
            BM = [8, 16],
            BN = [256],
            BK = [128],
            WN = [4],
            STAGES = [3],
            SPLIT = [1, 4],
            G = [0, 128],
            ZEROS = [0, 1],
            H = [1, 4],
            VEC = [16],
            SWB = [3],
            SWS = [4],
            BIAS = [0, 1],
        ),
        dtypes(A = [f16, bf16], W = [u2, u4, i8]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const H: i32,
        const VEC: i32,
        const SWB: i32,
        const SWS: i32,
        const BIAS: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
        dependent: i32,
    ) {
        let rep_m = BM / 8;
        let rep_n = BN / (16 * WN);
        let rep_k = BK / 16;
        let grouped = G > 0;
        let fold = ZEROS == 1;
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = 8 * rep_k * rep_n * W::BITS / 8;

        // The weight tile [BK, BN] and its [BN, BK] view as the product's A operand. Each
        // thread's locals run along k first, so the codes one cast group converts belong to one
        // column block: the biases of a biased cast repeat from block to block.
        let lw = layout!(spatial(1, WN).column_local(rep_k, rep_n).mma_a_t);
        let lwa = layout!(spatial(WN, 1).local(rep_n, rep_k).mma_a);
        let lq = layout!(swap_inner_locals(lw, 2, H));
        // The activations [BM, BK], every warp a copy, and their [BK, BM] view as B.
        let lx = layout!(replicated(WN).column_local(rep_m, rep_k).mma_b_t);
        let lxb = layout!(replicated(WN).local(rep_k, rep_m).mma_b);
        // The accumulator [BN, BM], its [BM, BN] view, and one value per output column.
        let lc = layout!(spatial(WN, 1).local(rep_n, rep_m).mma_c);
        let lct = layout!(spatial(1, WN).column_local(rep_m, rep_n).mma_c_t);
        let lcs = layout!(reduce(lct, [0]));
        let lbytes = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));

        let [bi, bj, bs] = block_indices();
        let groups = if grouped { k / G } else { 1 };
        let ga = view_global(a, [m, k]);
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        let gs = view_global(scales, [groups, n]);
        let gz = view_global(zeros, [if ZEROS == 1 { groups } else { 0 }, n]);

        let sa = if SWB > 0 {
            shared::<A>([STAGES, BM, BK], swizzle(SWB, 3, SWS))
        } else {
            shared::<A>([STAGES, BM, BK])
        };
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let ss = if grouped {
            shared::<A>([STAGES, 1, BN])
        } else {
            ()
        };
        let sz = if grouped && fold {
            shared::<A>([STAGES, 1, BN])
        } else {
            ()
        };
        let ones = if fold { register::<A>(lwa, 1.0) } else { () };
        // The biases of `cast_biased`, as the product's A operand: the cast of all-zero codes.
        let biases = if BIAS == 1 {
            let zero_codes = view::<W>(register::<u8>(lbytes, 0), lq);
            view::<A>(cast_biased::<A>(zero_codes, lw), lwa)
        } else {
            ()
        };

        let ktiles = k / (BK * SPLIT);
        let kt0 = bs * ktiles;
        // A tile's activations, and its weights with their scales and zero points.
        let issue_x = |tile: i32, stage: i32| {
            copy_async(
                ga,
                slice_shared(sa, [stage, 0, 0], [BM, BK]),
                [bi * BM, (kt0 + tile) * BK],
            );
        };
        let issue_w = |tile: i32, stage: i32| {
            let t = kt0 + tile;
            copy_async(gb, slice_shared(sb, [stage, 0], [tile_bytes]), [t, bj, 0]);
            if grouped {
                let group = t * BK / G;
                copy_async(
                    gs,
                    slice_shared(ss, [stage, 0, 0], [1, BN]),
                    [group, bj * BN],
                );
                if fold {
                    copy_async(
                        gz,
                        slice_shared(sz, [stage, 0, 0], [1, BN]),
                        [group, bj * BN],
                    );
                }
            }
        };
        let issue = |tile: i32, stage: i32| {
            issue_x(tile, stage);
            issue_w(tile, stage);
        };
        // The next kernel on the stream, if launched as this one's dependent, may start once
        // every block of this one has. Launched as a dependent itself (`dependent = 1`), the
        // block issues its first weight tiles (which no kernel writes) before it waits for the
        // kernel before it, and their activations after; every write comes after the wait.
        launch_dependents();
        #[unroll]
        for st in 0..STAGES - 1 {
            if st < ktiles {
                if dependent == 0 {
                    issue_x(st, st);
                }
                issue_w(st, st);
            }
            commit_group();
        }
        wait_prior_grid();
        if dependent == 1 {
            #[unroll]
            for st in 0..STAGES - 1 {
                if st < ktiles {
                    issue_x(st, st);
                }
            }
            commit_group();
            // The prologue's stages whole before the first step (whose wait counts one group
            // a stage).
            wait_group(0);
        }
        // One k tile, as in `qmatmul_main`: returns the weight as A and the activations as B.
        let step = |kt: i32| {
            wait_group(STAGES - 2);
            sync();
            let stage = kt % STAGES;
            let rx = load_shared(slice_shared(sa, [stage, 0, 0], [BM, BK]), lx, [0, 0]);
            let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lbytes, [0]);
            let next = kt + (STAGES - 1);
            if next < ktiles {
                issue(next, next % STAGES);
            }
            commit_group();
            let wf = if BIAS == 1 {
                cast_biased::<A>(view::<W>(rw, lq), lw)
            } else {
                cast::<A>(view::<W>(rw, lq), lw)
            };
            (view::<A>(wf, lwa), view::<A>(rx, lxb))
        };
        // `acc_t - z * asum` over [BM, BN]: the zero points `zc` of the output columns times the
        // row sums of the activations (the mma against ones).
        let subtract_zeros =
            |acc_t: Tensor, asum: Tensor, zc: Tensor| mul_add(asum, neg(cast::<f32>(zc)), acc_t);
        let mut acc = register::<f32>(lct, 0.0);
        if grouped {
            let tiles_per_group = G / BK;
            for g in 0..ktiles / tiles_per_group {
                let mut acc_g = register::<f32>(lc, 0.0);
                let mut asum = if fold { register::<f32>(lc, 0.0) } else { () };
                let mut bsum = if BIAS == 1 {
                    register::<f32>(lc, 0.0)
                } else {
                    ()
                };
                let accumulate = |kt: i32| {
                    let (wa, xb) = step(kt);
                    acc_g = dot(wa, xb, acc_g);
                    if fold {
                        asum = dot(ones, xb, asum);
                    }
                    if BIAS == 1 {
                        bsum = dot(biases, xb, bsum);
                    }
                };
                // The group's last tile peeled off, as in `qmatmul_main`.
                let first = g * tiles_per_group;
                for t in 0..tiles_per_group - 1 {
                    accumulate(first + t);
                }
                let last_tile = first + (tiles_per_group - 1);
                accumulate(last_tile);
                let last = last_tile % STAGES;
                let mut acc_gt = view::<f32>(acc_g, lct);
                if BIAS == 1 {
                    acc_gt = acc_gt - view::<f32>(bsum, lct);
                }
                if fold {
                    let zc = load_shared(slice_shared(sz, [last, 0, 0], [1, BN]), lcs, [0, 0]);
                    acc_gt = subtract_zeros(acc_gt, view::<f32>(asum, lct), zc);
                }
                let sc = load_shared(slice_shared(ss, [last, 0, 0], [1, BN]), lcs, [0, 0]);
                acc = mul_add(acc_gt, cast::<f32>(sc), acc);
            }
        } else {
            let mut acc_n = register::<f32>(lc, 0.0);
            let mut asum = if fold { register::<f32>(lc, 0.0) } else { () };
            let mut bsum = if BIAS == 1 {
                register::<f32>(lc, 0.0)
            } else {
                ()
            };
            for kt in 0..ktiles {
                let (wa, xb) = step(kt);
                acc_n = dot(wa, xb, acc_n);
                if fold {
                    asum = dot(ones, xb, asum);
                }
                if BIAS == 1 {
                    bsum = dot(biases, xb, bsum);
                }
            }
            acc = view::<f32>(acc_n, lct);
            if BIAS == 1 {
                acc = acc - view::<f32>(bsum, lct);
            }
            if fold {
                let zc = load_global(view_global(zeros, [1, n]), lcs, [0, bj * BN]);
                acc = subtract_zeros(acc, view::<f32>(asum, lct), zc);
            }
            let sc = load_global(view_global(scales, [1, n]), lcs, [0, bj * BN]);
            acc = acc * cast::<f32>(sc);
        }
        wait_group(0);
        store_tile(acc, lct, layout!(spatial(WN * 32)), bi, bj, bs, false);
    }

    /// [`QMatmulMethod::GemvImma`](crate::kernels::qmatmul::QMatmulMethod): one token's
    /// `[1, BN]` tile of the transposed product on the integer tensor cores (`mma.m16n8k32
    /// .s32.u8.s8`), one of `SPLIT` slices of k (the scheme: `crate::kernels::qmatmul::imma`'s
    /// module docs).
    ///
    /// Before its k loop the block splits its slice of the token's activations (copied in by
    /// `cp.async` ahead of the ring's first tiles, into the ring's last stage or, for tiles
    /// smaller than the slice, a buffer of its own) into four s8
    /// digits in shared memory (rows of `st [4, 4096]`), a warp a scale group: `σ` the power of
    /// two that puts `max|x| σ` in `[2^29, 2^30)`, each value times `σ / γ` of its field, rounded
    /// to an integer and split into balanced base-256 digits; `1 / σ` and `Σx / 2^24` of
    /// each group go to `sg`. Each weight byte holds `P = 8 / bits` codes, field `f` of every
    /// byte a k-range of `BK / P` rows of the tile: the thread's bytes, as words, masked by
    /// field are each field's u8 A fragment, with no shift and no conversion. The digits, loaded
    /// as B (`[4, BK / P]` n-major, each row read by two lanes: columns 4..8 repeat 0..4), fill
    /// the mma's 8 columns. Per group (whole k tiles, or for one-plane codes a run of whole
    /// fields of a tile: 1-bit weights in groups of 128 are two groups a 256-row tile, fields
    /// 0..4 and 4..8; the host's tiling refuses such groups for two-plane codes, whose branch
    /// below finishes groups of whole tiles only) the i32 accumulator is converted and scaled
    /// by `s / σ`, and `s (z + offset) Σx / 2^24` is added up per output column
    /// (`offset = 2^(bits - 1)` for signed codes, stored in offset binary); the columns are
    /// weighted by `2^24, 2^16, 2^8, 1` (columns 4..8 by zero) and added, and the zero points'
    /// sum taken off, at the end.
    ///
    /// Parameters as [`qmatmul_gemv`]'s, with `BM = 1`; `SIGNED` for signed codes; `OCC` blocks
    /// a multiprocessor (registers capped to make room). `dependent` is 1 when the kernel is
    /// launched as a programmatic dependent of the kernel before it (sm_90): its first weight
    /// tiles are then issued before `wait_prior_grid()` and the activations after it (when 0,
    /// the activations go first, as above, and the wait returns at once).
    #[tilus::kernel(
        lazy,
        grid = [m, n / BN, SPLIT],
        warps = WN,
        blocks_per_sm = OCC,
        // Checked when the crate is built: zero points, signed offsets, 2 and 4 bits, one and
        // two tiles a group, split k, f16 and bf16.
        space(
            BM = [1],
            BN = [256],
            BK = [128],
            WN = [4],
            STAGES = [3],
            SPLIT = [1, 4],
            G = [128, 256],
            ZEROS = [0, 1],
            SIGNED = [0, 1],
            VEC = [16],
            OCC = [1],
        ),
        dtypes(A = [f16, bf16], W = [u2, i3, i4, u5]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv_imma<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const SIGNED: i32,
        const VEC: i32,
        const OCC: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
        dependent: i32,
    ) {
        // 3- and 5-bit codes come as two planes (`imma`'s module docs): the fields of a 2- or
        // 4-bit plane (`hb` bits) index k, a 1-bit plane adds each code's last bit.
        let planes = W::BITS == 3 || W::BITS == 5;
        let hb = if planes { W::BITS - 1 } else { W::BITS };
        let p = 8 / hb;
        // Where field `f`'s code sits in its byte: `pos(f) = bits f`; with planes `hb f` but
        // for the last field, at `top = 8 - bits` (3 bits: 0, 2, 4, 5; 5 bits: 0, 3).
        let top = if planes {
            8 - W::BITS
        } else {
            W::BITS * (p - 1)
        };
        let fk = BK / p;
        let rep_n = BN / (16 * WN);
        let rep_f = fk / 32;
        // A scale group is whole tiles (`tpg` of them), or a tile holds `gpt` groups of `fpg`
        // fields each (one-plane codes: field `f` of a byte is rows `f fk .. (f + 1) fk` of
        // the tile, so a group shorter than a tile is a run of fields).
        let tpg = max(1, G / BK);
        let gpt = max(1, BK / G);
        let fpg = p / gpt;
        // `imma::MAX_SLICE`: the longest k-slice the digits hold.
        let slice = 4096;
        let tile_bytes = BK * BN * W::BITS / 8;
        // The fields' plane (the whole tile but for 3 and 5 bits) and the 1-bit plane after it.
        let tile_fields = if planes { BK * BN * hb / 8 } else { tile_bytes };
        let thread_bytes = tile_fields / (32 * WN);
        let fold = ZEROS == 1;
        let offset = if SIGNED == 1 {
            0.5 * (1 << W::BITS)
        } else {
            0.0
        };

        let lbytes = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        // A field's codes as words of four bytes: `[BK / P / 4, BN]`, the registers of the u8
        // A fragment `[BN, BK / P]`.
        let lwords = layout!(spatial(1, WN)
            .column_local(rep_f, rep_n)
            .local(2, 2)
            .column_spatial(4, 8));
        // Two planes: the same words as `[rep_f, 2, 4, WN, rep_n, 2, 8]` (the two local digits
        // on dims 1 and 5), and the 1-bit plane's words, one for each `hb` words of the fields'
        // plane (their `j`): dim 1 reduced (3 bits: pairs), or dims 1 and 5 (5 bits: fours).
        let (lwords7, lplane1, lbytes1) = if planes {
            let l7 = layout!(spatial(1, 1, 1, WN, 1, 1, 1)
                .column_local(rep_f, 1, 1, 1, rep_n, 1, 1)
                .local(1, 2, 1, 1, 1, 2, 1)
                .column_spatial(1, 1, 4, 1, 1, 1, 8));
            let l1 = if W::BITS == 3 {
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
        // The four digit rows n-major `[4, BK / P]`, every warp a copy, read as the B fragment's
        // eight columns: lanes 16..32 (columns 4..8) hold the same digits as lanes 0..16
        // (`mma_b_f8_t` with its column bit replicated), so shared memory holds no zero rows;
        // those columns' sums are weighted by zero at the end.
        let lxt = layout!(replicated(WN)
            .local(1, rep_f)
            .local(1, 2)
            .replicated(2)
            .spatial(4, 4)
            .local(1, 4));
        let lxb = layout!(replicated(WN).local(rep_f, 1).mma_b_f8);
        // The accumulator `[BN, 8]`, its `[8, BN]` view, and one value per output column.
        let lc = layout!(spatial(WN, 1).local(rep_n, 1).mma_c);
        let lct = layout!(spatial(1, WN).column_local(1, rep_n).mma_c_t);
        let lcs = layout!(reduce(lct, [0]));
        // The activations arrive as bytes (`ab` an activation) for `split_digits`.
        let ab = A::BITS / 8;
        let one = layout!(local(1, 1, 1));

        let [bi, bj, bs] = block_indices();
        let ktiles = k / (BK * SPLIT);
        let kt0 = bs * ktiles;
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        let gs = view_global(scales, [k / G, n]);
        let gz = view_global(zeros, [if ZEROS == 1 { k / G } else { 0 }, n]);
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let ss = shared::<A>([STAGES, gpt, BN]);
        let sz = if fold {
            shared::<A>([STAGES, gpt, BN])
        } else {
            ()
        };
        // Rows padded by 16 bytes: a fragment's 16 lanes read 4 rows at 4 k offsets, which a
        // row stride of 4096 (a multiple of the 128 bytes of the banks) put on 4 banks, 4-way
        // conflicted (28% of the kernel's shared wavefronts); 4112 puts them on 16.
        let st = shared::<u8>([4, slice + 16]);
        let sg = shared::<f32>([2, slice / G, 1]);
        // The slice's activations as bytes, copied before the ring's first tiles so that they
        // arrive first: the split below reads shared memory, not a chain of global loads queued
        // behind the weights' (perf note 63). They borrow the ring's last stage, which no tile
        // fills before the k loop's first barrier, when it holds them.
        let xbytes = ab * slice;
        let sx = if tile_bytes >= xbytes {
            slice_shared(sb, [STAGES - 1, 0], [1, xbytes])
        } else {
            shared::<u8>([1, xbytes])
        };

        let issue = |tile: i32, stage: i32| {
            let t = kt0 + tile;
            copy_async(gb, slice_shared(sb, [stage, 0], [tile_bytes]), [t, bj, 0]);
            let group = t * BK / G;
            copy_async(
                gs,
                slice_shared(ss, [stage, 0, 0], [gpt, BN]),
                [group, bj * BN],
            );
            if fold {
                copy_async(
                    gz,
                    slice_shared(sz, [stage, 0, 0], [gpt, BN]),
                    [group, bj * BN],
                );
            }
        };
        // The next kernel on the stream, if launched as this one's dependent, may start once
        // every block of this one has: its weight tiles then load while these blocks drain.
        launch_dependents();
        let gxb = view_global::<u8>(a, [m, ab * k]);
        if dependent == 0 {
            copy_async(gxb, sx, [bi, ab * kt0 * BK]);
            commit_group();
        }
        #[unroll]
        for s0 in 0..STAGES - 1 {
            if s0 < ktiles {
                issue(s0, s0);
            }
            commit_group();
        }
        // Launched as a dependent, the block started while the kernel before it ran: the
        // weights, scales and zero points (which no kernel writes) are on their way, and the
        // activations, which that kernel may write, are copied once it has finished.
        // Everything below (`c`, the workspace, the semaphores) comes after the wait too.
        wait_prior_grid();
        if dependent == 1 {
            copy_async(gxb, sx, [bi, ab * kt0 * BK]);
            commit_group();
            wait_group(0);
        } else {
            wait_group(STAGES - 1);
        }

        // The slice's activations as four s8 digits, while the first tiles load.
        let groups = ktiles * gpt / tpg;
        sync();
        split_digits(sx, st, sg, groups);

        // The columns' digit weights; columns 4..8 repeat 0..4 and count for nothing.
        let col = arange(lct, 0, 0);
        let weight = select(
            col < 4,
            cast::<f32>(register::<i32>(lct, 1) << ((3 - col % 4) * 8)),
            0.0,
        );
        let mut acc = register::<f32>(lct, 0.0);
        // `Σ s (z + offset) Σx / 2^24` per output column, taken off at the end: one value per
        // column, not one per accumulator element.
        let mut zsum = register::<f32>(lcs, 0.0);
        let mut acc_g = register::<i32>(lc, 0);
        // Group `grp`'s exact sum into the f32 accumulator, with its scales, row `row` of the
        // ring's stage `stage`; `acc_g` starts again.
        // The zero points' ring (never read without zero points: the scales' stands in).
        let zb = if fold { sz } else { ss };
        let finish = |grp: i32, row: i32, stage: i32| {
            (acc, zsum) = finish_group(acc, zsum, acc_g, ss, zb, sg, lct, lcs, grp, row, stage);
            acc_g = register::<i32>(lc, 0);
        };
        for g in 0..ktiles / tpg {
            for tt in 0..tpg {
                let t = g * tpg + tt;
                wait_group(STAGES - 2);
                sync();
                let stage = t % STAGES;
                let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lbytes, [0]);
                let next = t + (STAGES - 1);
                if next < ktiles {
                    issue(next, next % STAGES);
                }
                commit_group();
                // `m * 0x01010101` as an i32: `m` in every byte (the top byte's `m` wraps to
                // `m - 256` when its bit 7 is set).
                let bytes4 = |m: i32| m * 65793 + (m - 256 * (m >> 7)) * 16777216;
                if planes {
                    // A field's code is its `hb` bits in place and the 1-bit plane's bit for
                    // it, moved next to them: above (bit `hb (f + 1)`), or for the last field,
                    // whose bits end the byte, below (bit `top`, the code's lowest bit). Word
                    // `j` of the fields' plane finds those bits of its 1-bit word
                    // (`imma::PlaneMap`) there already (3 bits, `j = 0`) or moves them there:
                    // 3 bits `>> 1` (even fields) or `<< 4` (odd), 5 bits `>> 3`, `>> 1`,
                    // `<< 1` or `<< 3`.
                    let wh = view::<i32>(rw, lwords7);
                    let rw1 = load_shared(
                        slice_shared(sb, [stage, tile_fields], [tile_bytes - tile_fields]),
                        lbytes1,
                        [0],
                    );
                    // Each 1-bit word beside all the words it serves (the add folds away).
                    let w1 = register::<i32>(lwords7, 0) + view::<i32>(rw1, lplane1);
                    let (even, odd) = if W::BITS == 3 {
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
                        let xt = load_shared(st, lxt, [0, t * BK + f * fk]);
                        acc_g = dot(view::<u8>(code, lwa), view::<i8>(xt, lxb), acc_g);
                    }
                } else {
                    let words = view::<i32>(rw, lwords);
                    // The tile's groups one after the other (one group when it spans tiles).
                    #[unroll]
                    for h in 0..gpt {
                        #[unroll]
                        for f0 in 0..fpg {
                            let f = h * fpg + f0;
                            // The field's bits in every byte.
                            let mask = bytes4(((1 << W::BITS) - 1) << (W::BITS * f));
                            let xt = load_shared(st, lxt, [0, t * BK + f * fk]);
                            acc_g = dot(view::<u8>(words & mask, lwa), view::<i8>(xt, lxb), acc_g);
                        }
                        if gpt > 1 {
                            finish(t * gpt + h, h, stage);
                        }
                    }
                }
            }
            if gpt == 1 {
                finish(g, 0, (g * tpg + tpg - 1) % STAGES);
            }
        }
        wait_group(0);
        store_tile(
            sum(acc * weight, 0) - zsum * 16777216.0,
            lcs,
            layout!(spatial(WN * 32)),
            bi,
            bj,
            bs,
            false,
        );
    }

    /// [`qmatmul_gemv_imma`] on a persistent grid (`stream_k = WORKERS` blocks, a few a
    /// multiprocessor) whose blocks claim their work as they go: a unit is one column tile and
    /// one of `SPLIT` chunks of `CH = k / (BK · SPLIT)` k tiles, numbered chunk by chunk, and
    /// a block takes the next one from a counter when it issues the first tile of it, so the
    /// ring streams on across units (perf notes 82 and 83: with the work fixed at launch the
    /// kernel lasts as long as its slowest multiprocessor). Per unit the block splits the
    /// chunk's activations into digits, runs the chunk's tiles as [`qmatmul_gemv_imma`] does,
    /// and ends as a split of [`store_tile`]: the partial goes to the chunk's slot and the
    /// unit that completes its column tile adds the `SPLIT` slots in chunk order, so the sum
    /// does not depend on which block took which unit.
    ///
    /// One-plane codes only (1, 2 and 4 bits); `CH >= STAGES`, so the ring's issue runs at
    /// most one unit ahead of its use and the activations' buffer is free when the next unit's
    /// are copied in. `semaphores` holds `n / BN` column counts, then the claim counter and the
    /// count of blocks that have finished claiming; the last of those resets both for the next
    /// launch. Parameters otherwise as [`qmatmul_gemv_imma`]'s (no `dependent`).
    #[tilus::kernel(
        lazy,
        grid = [1, WORKERS, 1],
        warps = WN,
        blocks_per_sm = OCC,
        // Checked when the crate is built: zero points, signed offsets, 2 and 4 bits, one and
        // two tiles a group, one and two chunks, f16 and bf16.
        space(
            BM = [1],
            BN = [256],
            BK = [128],
            WN = [4],
            STAGES = [3],
            SPLIT = [1, 2],
            G = [128, 256],
            ZEROS = [0, 1],
            SIGNED = [0, 1],
            VEC = [16],
            OCC = [2],
            WORKERS = [264],
        ),
        dtypes(A = [f16, bf16], W = [u2, i4]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv_imma_persistent<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const SIGNED: i32,
        const VEC: i32,
        const OCC: i32,
        const WORKERS: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
    ) {
        let p = 8 / W::BITS;
        let fk = BK / p;
        let rep_n = BN / (16 * WN);
        let rep_f = fk / 32;
        let tpg = max(1, G / BK);
        let gpt = max(1, BK / G);
        let fpg = p / gpt;
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = tile_bytes / (32 * WN);
        let fold = ZEROS == 1;
        let offset = if SIGNED == 1 {
            0.5 * (1 << W::BITS)
        } else {
            0.0
        };
        let cols = n / BN;
        let ch = k / (BK * SPLIT);
        let units = cols * SPLIT;
        // A chunk's rows; the buffers hold `imma::MAX_CHUNK` of them.
        let rows = ch * BK;
        let slice = 2048;

        let lbytes = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        let lwords = layout!(spatial(1, WN)
            .column_local(rep_f, rep_n)
            .local(2, 2)
            .column_spatial(4, 8));
        let lwa = layout!(spatial(WN, 1).local(rep_n, rep_f).mma_a_f8);
        let lxt = layout!(replicated(WN)
            .local(1, rep_f)
            .local(1, 2)
            .replicated(2)
            .spatial(4, 4)
            .local(1, 4));
        let lxb = layout!(replicated(WN).local(rep_f, 1).mma_b_f8);
        let lc = layout!(spatial(WN, 1).local(rep_n, 1).mma_c);
        let lct = layout!(spatial(1, WN).column_local(1, rep_n).mma_c_t);
        let lcs = layout!(reduce(lct, [0]));
        let ab = A::BITS / 8;
        let one = layout!(local(1, 1, 1));
        let lanes = layout!(spatial(WN * 32));

        let gb = view_global(b, [k / BK, cols, tile_bytes]);
        let gs = view_global(scales, [k / G, n]);
        let gz = view_global(zeros, [if ZEROS == 1 { k / G } else { 0 }, n]);
        let gxb = view_global::<u8>(a, [m, ab * k]);
        // The column counts, then the claim counter and the finished blocks' count.
        let gclaim = view_global(semaphores, [cols + 2]);
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let ss = shared::<A>([STAGES, gpt, BN]);
        let sz = if fold {
            shared::<A>([STAGES, gpt, BN])
        } else {
            ()
        };
        let st = shared::<u8>([4, slice + 16]);
        let sg = shared::<f32>([2, slice / G, 1]);
        let sx = shared::<u8>([1, ab * slice]);

        let lane = arange(lanes, 0, 0);
        // One thread's atomic add of 1 to counter `at` (every other thread's index is out of
        // range): its old value in lane 0, 0 elsewhere, until `item(sum(.., 0))` hands it to
        // every thread.
        let bump = |at: i32| {
            let index = select(lane == 0, arange(lanes, 0, at), -1);
            let old = atomic_add(gclaim, index, register::<i32>(lanes, 1));
            old
        };
        // The ring's issue side: unit `ui`, its next tile `ti`, ring stage `si`. The unit after
        // `ui` is claimed as `ui`'s first tile is issued (`ahead`), and read only when its own
        // first tile is: the atomic's latency passes while `ui` streams.
        let mut ui = item(sum(bump(cols), 0));
        let mut ahead = bump(cols);
        // `ui`'s column tile and first k tile, computed once a unit (a division by the
        // run-time column count in every tile cost about 90 instructions a warp and tile).
        let mut uj = ui % cols;
        let mut ut = ui / cols * ch;
        let mut ti = 0;
        let mut si = 0;
        let issue_next = || {
            if ti == ch && ui < units {
                ui = item(sum(ahead, 0));
                uj = ui % cols;
                ut = ui / cols * ch;
                ti = 0;
                if ui < units {
                    ahead = bump(cols);
                }
            }
            if ui < units {
                let j = uj;
                let t = ut + ti;
                if ti == 0 {
                    // The whole buffer (rows past the chunk, or masked past k, feed digits
                    // no tile reads), so that the split reads no uninitialized memory.
                    copy_async(gxb, sx, [0, ab * t * BK]);
                }
                copy_async(gb, slice_shared(sb, [si, 0], [tile_bytes]), [t, j, 0]);
                let group = t * BK / G;
                copy_async(gs, slice_shared(ss, [si, 0, 0], [gpt, BN]), [group, j * BN]);
                if fold {
                    copy_async(gz, slice_shared(sz, [si, 0, 0], [gpt, BN]), [group, j * BN]);
                }
            }
            commit_group();
            ti = ti + 1;
            si = (si + 1) % STAGES;
        };
        #[unroll]
        for s0 in 0..STAGES - 1 {
            issue_next();
        }

        let col = arange(lct, 0, 0);
        let weight = select(
            col < 4,
            cast::<f32>(register::<i32>(lct, 1) << ((3 - col % 4) * 8)),
            0.0,
        );
        let mut acc = register::<f32>(lct, 0.0);
        let mut zsum = register::<f32>(lcs, 0.0);
        let mut acc_g = register::<i32>(lc, 0);
        // The zero points' ring (never read without zero points: the scales' stands in).
        let zb = if fold { sz } else { ss };
        let finish = |grp: i32, row: i32, stage: i32| {
            (acc, zsum) = finish_group(acc, zsum, acc_g, ss, zb, sg, lct, lcs, grp, row, stage);
            acc_g = register::<i32>(lc, 0);
        };

        // The units whose partials this worker has stored but not counted (at most `MAXU`).
        let MAXU = 32;
        let one1 = layout!(local(1));
        let su = shared::<i32>([MAXU]);
        let mut nu = 0;
        let gw = view_global(workspace, [SPLIT, m, n]);
        let gc = view_global(c, [m, n]);
        // Count the stored partials on their columns, behind one fence (`count_arrivals`'
        // first; the ring is idle or nearly so here), and let the unit that completes a column
        // add its chunks in chunk order.
        let publish = || {
            // Every thread's record of the units stored (they all wrote the same values).
            sync();
            for i in 0..nu {
                let u = item(load_shared(su, one1, [i]));
                let j = u % cols;
                let arrived = count_arrivals(lanes, 0, j, 1);
                if arrived == SPLIT - 1 {
                    let mut total = load_global(gw, lcs, [0, 0, j * BN]);
                    for split in 1..SPLIT {
                        total = total + load_global(gw, lcs, [split, 0, j * BN]);
                    }
                    store_global(cast::<A>(total), gc, [0, j * BN]);
                    reset_arrivals(0, j);
                }
            }
            nu = 0;
        };
        // The compute side: unit `uc`, its tile `tc`, ring stage `sc0`.
        let mut uc = ui;
        let mut tc = 0;
        let mut sc0 = 0;
        while uc < units {
            wait_group(STAGES - 2);
            sync();
            let stage = sc0;
            let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lbytes, [0]);
            // The ring topped up before the split below (`CH >= STAGES`: this is not the
            // next unit's first tile, whose activations overwrite `sx`).
            issue_next();
            if tc == 0 {
                // The chunk's activations as four s8 digits.
                split_digits(sx, st, sg, rows / G);
                // The digits for every warp, and the activations' buffer free for the next
                // unit's copy.
                sync();
            }
            let bytes4 = |m: i32| m * 65793 + (m - 256 * (m >> 7)) * 16777216;
            let words = view::<i32>(rw, lwords);
            #[unroll]
            for h in 0..gpt {
                #[unroll]
                for f0 in 0..fpg {
                    let f = h * fpg + f0;
                    let mask = bytes4(((1 << W::BITS) - 1) << (W::BITS * f));
                    let xt = load_shared(st, lxt, [0, tc * BK + f * fk]);
                    acc_g = dot(view::<u8>(words & mask, lwa), view::<i8>(xt, lxb), acc_g);
                }
                if gpt > 1 {
                    finish(tc * gpt + h, h, stage);
                }
            }
            if gpt == 1 && (tc + 1) % tpg == 0 {
                finish(tc / tpg, 0, stage);
            }
            tc = tc + 1;
            sc0 = (sc0 + 1) % STAGES;
            if tc == ch {
                let part = sum(acc * weight, 0) - zsum * 16777216.0;
                if SPLIT > 1 {
                    // The chunk's partial, counted later (`publish`): a fence a unit would
                    // wait for the ring's copies in flight.
                    store_global(part, gw, [uc / cols, 0, (uc % cols) * BN]);
                    store_shared(register::<i32>(one1, 0) + uc, su, [nu]);
                    nu = nu + 1;
                    if nu == MAXU {
                        publish();
                    }
                } else {
                    store_global(cast::<A>(part), gc, [0, uc * BN]);
                }
                acc = register::<f32>(lct, 0.0);
                zsum = register::<f32>(lcs, 0.0);
                // The issue side is in the next unit already (`CH >= STAGES`), or done.
                uc = ui;
                tc = 0;
            }
        }
        wait_group(0);
        if SPLIT > 1 {
            publish();
        }
        // The last block to finish claiming resets the counters for the next launch: every
        // claim of this launch has been made (each block's last claim is ordered before its
        // count by the fence).
        sync();
        fence();
        let done = item(sum(bump(cols + 1), 0));
        if done == WORKERS - 1 {
            store_global(register::<i32>(layout!(local(2)), 0), gclaim, [cols]);
        }
    }

    /// The activations of [`qmatmul_gemv_imma_tokens`] as two s8 digits a value, computed once
    /// for every column tile of the weight: per token and scale group of `G` values (a warp
    /// each), `σ` the power of two that puts `max|x| σ` in `[2^13, 2^14)`, `V` the integer
    /// nearest `x σ` and `V = 256 hi + lo` with `lo` in `[-128, 127]` (so `hi` in `[-64, 64]`).
    /// Outputs, with `mp = cdiv(m, 32) · 32` rows (the rows past `m` zero): `digits [2 mp, k]`
    /// (row `2 t` the high digits of token `t`, `2 t + 1` the low ones) and `side [k / G, mp,
    /// 2]` (`1 / σ` and `Σ x` of each group and token).
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, 32) * 32, cdiv(k, G * WD)],
        warps = WD,
        space(G = [128, 256], WD = [4]),
        dtypes(A = [f16, bf16]),
    )]
    pub fn qmatmul_imma_digits<const G: i32, const WD: i32, A: DTypeParam>(
        m: i32,
        k: i32,
        a: Global<A>,
        digits: GlobalMut<u8>,
        side: GlobalMut<f32>,
    ) {
        let mp = cdiv(m, 32) * 32;
        let lxg = layout!(spatial(1, WD, 32).local(1, 1, G / 32));
        let lgm = layout!(reduce(lxg, [2]));
        // The same per-warp values with the group first, as `side` holds them.
        let lxgt = layout!(spatial(WD, 1, 32).local(1, 1, G / 32));
        let lgt = layout!(reduce(lxgt, [2]));
        let [row, gc] = block_indices();
        let g0 = gc * WD;
        let x = cast::<f32>(load_global(
            view_global(a, [m, k / G, G]),
            lxg,
            [row, g0, 0],
        ));
        let amax = reduce_max(abs(x), 2);
        // `σ = 2^(140 - E)` and `1 / σ = 2^(E - 140)` for the biased exponent `E` of `max|x|`,
        // by their f32 bits; 1 for a group of zeros.
        let ebits = view::<i32>(amax, lgm) >> 23;
        let nz = amax > 0.0;
        let sig = select(nz, view::<f32>((267 - ebits) << 23, lgm), 1.0);
        let inv_sig = select(nz, view::<f32>((ebits - 13) << 23, lgm), 1.0);
        // Exact in f32: `x σ` has the activation's significant bits, `|V| <= 2^14`.
        let iv = floor(x * sig + 0.5);
        let hi = floor((iv + 128.0) * (1.0 / 256.0));
        let lo = iv - hi * 256.0;
        let gd = view_global(digits, [2 * mp, k / G, G]);
        store_global(view::<u8>(cast::<i8>(hi), lxg), gd, [2 * row, g0, 0]);
        store_global(view::<u8>(cast::<i8>(lo), lxg), gd, [2 * row + 1, g0, 0]);
        let gs = view_global(side, [k / G, mp, 2]);
        store_global(view::<f32>(inv_sig, lgt), gs, [g0, row, 0]);
        store_global(view::<f32>(sum(x, 2), lgt), gs, [g0, row, 1]);
    }

    /// [`QMatmulMethod::GemvImma`](crate::kernels::qmatmul::QMatmulMethod) for `BM` tokens a
    /// block (a multiple of 4, up to 32): the `[BM, BN]` tile of the transposed product on the
    /// integer tensor cores (`mma.m16n8k32 .s32.u8.s8`) from the activations' two s8 digits of
    /// [`qmatmul_imma_digits`] (the B operand's `2 BM` columns: token `t`'s high and low digit
    /// side by side), one of `SPLIT` slices of k. The weight is [`qmatmul_gemv_imma`]'s: each
    /// byte's field `f` a k-range `BK / P` rows of the tile; here each field is shifted down
    /// to its byte's low bits (`(word >> bits f) & mask`, a shift and a `lop3` for four
    /// weights), so that one set of digits serves every field. The ring carries the weight
    /// tile, its scales (and zero points), the tile's digits (rows padded by 16 bytes: the
    /// fragment's 8 rows on distinct banks) and the group's `1 / σ` and `Σ x`. Per group (whole
    /// tiles, or a run of a tile's fields as in [`qmatmul_gemv_imma`]) the i32
    /// accumulator's digit columns are combined (`256 hi + lo`, exact), converted and scaled by
    /// `s / σ`; the zero points' (or the signed offset's) `s z Σ x` is taken off per token.
    ///
    /// Parameters as [`qmatmul_gemv_imma`]'s, with `digits` and `side` as
    /// [`qmatmul_imma_digits`] writes them.
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, BM), n / BN, SPLIT],
        warps = WN,
        blocks_per_sm = OCC,
        // Checked when the crate is built: zero points, signed offsets, 2 and 4 bits, one and
        // two tiles a group, split k, f16 and bf16, 4 and 16 tokens.
        space(
            BM = [4, 16],
            BN = [256],
            BK = [128],
            WN = [4],
            STAGES = [3],
            SPLIT = [1, 4],
            G = [128, 256],
            ZEROS = [0, 1],
            SIGNED = [0, 1],
            VEC = [16],
            OCC = [1],
        ),
        dtypes(A = [f16, bf16], W = [u2, i4]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv_imma_tokens<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const SIGNED: i32,
        const VEC: i32,
        const OCC: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
        digits: Global<u8>,
        side: Global<f32>,
    ) {
        let p = 8 / W::BITS;
        let fk = BK / p;
        let rep_n = BN / (16 * WN);
        let rep_f = fk / 32;
        let nt = BM / 4;
        // A group is whole tiles (`tpg`), or a tile holds `gpt` groups of `fpg` fields each.
        let tpg = max(1, G / BK);
        let gpt = max(1, BK / G);
        let fpg = p / gpt;
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = tile_bytes / (32 * WN);
        let fold = ZEROS == 1;
        let offset = if SIGNED == 1 {
            0.5 * (1 << W::BITS)
        } else {
            0.0
        };
        let mp = cdiv(m, 32) * 32;

        let lbytes = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        let lwords = layout!(spatial(1, WN)
            .column_local(rep_f, rep_n)
            .local(2, 2)
            .column_spatial(4, 8));
        let lwa = layout!(spatial(WN, 1).local(rep_n, rep_f).mma_a_f8);
        // The digits `[2 BM, BK / P]` n-major (a row a token's digit), every warp a copy, read
        // as the B fragments `[BK / P, 2 BM]`.
        let lxt = layout!(replicated(WN).column_local(nt, rep_f).mma_b_f8_t);
        let lxb = layout!(replicated(WN).local(rep_f, nt).mma_b_f8);
        // The accumulator `[BN, 2 BM]`; its transpose as `[BM, 2, BN]` (token, digit, column),
        // whose digits one thread holds side by side; `[BM, BN]` once they are combined.
        let lc = layout!(spatial(WN, 1).local(rep_n, nt).mma_c);
        let lct3 = layout!(spatial(1, 1, WN)
            .column_local(nt, 1, rep_n)
            .local(1, 1, 2)
            .column_spatial(4, 1, 8)
            .local(1, 2, 1));
        let lt3 = layout!(reduce(lct3, [1]));
        let lts = layout!(reduce(lt3, [0]));
        let ltt = layout!(reduce(lt3, [2]));
        let lt = layout!(spatial(1, WN)
            .column_local(nt, rep_n)
            .local(1, 2)
            .column_spatial(4, 8));

        let [bi, bj, bs] = block_indices();
        let ktiles = k / (BK * SPLIT);
        let kt0 = bs * ktiles;
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        let gs = view_global(scales, [k / G, 1, n]);
        let gz = view_global(zeros, [if ZEROS == 1 { k / G } else { 0 }, 1, n]);
        let gd = view_global(digits, [2 * mp, k]);
        let gsd = view_global(side, [k / G * mp, 1, 2]);
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let ss = shared::<A>([STAGES, gpt, 1, BN]);
        let sz = if fold {
            shared::<A>([STAGES, gpt, 1, BN])
        } else {
            ()
        };
        let sd = shared::<u8>([STAGES, 2 * BM, BK + 16]);
        // The `1 / σ` and `Σ x` of the stage's groups, `BM` tokens each.
        let ssd = shared::<f32>([STAGES, gpt * BM, 1, 2]);

        let issue = |tile: i32, stage: i32| {
            let t = kt0 + tile;
            copy_async(gb, slice_shared(sb, [stage, 0], [tile_bytes]), [t, bj, 0]);
            copy_async(
                gd,
                slice_shared(sd, [stage, 0, 0], [2 * BM, BK]),
                [2 * BM * bi, t * BK],
            );
            let group = t * BK / G;
            copy_async(
                gs,
                slice_shared(ss, [stage, 0, 0, 0], [gpt, 1, BN]),
                [group, 0, bj * BN],
            );
            if fold {
                copy_async(
                    gz,
                    slice_shared(sz, [stage, 0, 0, 0], [gpt, 1, BN]),
                    [group, 0, bj * BN],
                );
            }
            #[unroll]
            for h in 0..gpt {
                copy_async(
                    gsd,
                    slice_shared(ssd, [stage, h * BM, 0, 0], [BM, 1, 2]),
                    [(group + h) * mp + bi * BM, 0, 0],
                );
            }
        };
        #[unroll]
        for s0 in 0..STAGES - 1 {
            if s0 < ktiles {
                issue(s0, s0);
            }
            commit_group();
        }

        // The low `bits` of every byte.
        let low = (1 << W::BITS) - 1;
        let mask = low * 16843009;
        let hi_digit = arange(lct3, 1, 0) == 0;
        let mut acc = register::<f32>(lt3, 0.0);
        let mut acc_g = register::<i32>(lc, 0);
        // The group's exact digit sums combined, converted and scaled into `acc`, with its
        // scales (row `row` of the ring's stage `stage`) and zero points; `acc_g` starts again.
        let finish = |row: i32, stage: i32| {
            let a3 = view::<i32>(acc_g, lct3);
            let comb = sum(select(hi_digit, a3 * 256, a3), 1);
            let sc = cast::<f32>(load_shared(
                slice_shared(ss, [stage, row, 0, 0], [1, 1, BN]),
                lts,
                [0, 0, 0],
            ));
            let gside = slice_shared(ssd, [stage, row * BM, 0, 0], [BM, 1, 2]);
            let inv_sigma = load_shared(gside, ltt, [0, 0, 0]);
            // Broadcasts go right: `[BM, 1, 1]` and `[1, 1, BN]` meet in a `[BM, 1, BN]` tile.
            let zero = register::<f32>(lt3, 0.0);
            acc = mul_add(cast::<f32>(comb), (zero + inv_sigma) * sc, acc);
            if fold || SIGNED == 1 {
                let asum = load_shared(gside, ltt, [0, 0, 1]);
                let zc = if fold {
                    let z = cast::<f32>(load_shared(
                        slice_shared(sz, [stage, row, 0, 0], [1, 1, BN]),
                        lts,
                        [0, 0, 0],
                    ));
                    if SIGNED == 1 {
                        z + offset
                    } else {
                        z
                    }
                } else {
                    register::<f32>(lts, offset)
                };
                acc = mul_add(zero - asum, zc * sc, acc);
            }
            acc_g = register::<i32>(lc, 0);
        };
        for g in 0..ktiles / tpg {
            for tt in 0..tpg {
                let t = g * tpg + tt;
                wait_group(STAGES - 2);
                sync();
                let stage = t % STAGES;
                let rw = load_shared(slice_shared(sb, [stage, 0], [tile_bytes]), lbytes, [0]);
                let sdt = slice_shared(sd, [stage, 0, 0], [2 * BM, BK + 16]);
                let next = t + (STAGES - 1);
                if next < ktiles {
                    issue(next, next % STAGES);
                }
                commit_group();
                let words = view::<i32>(rw, lwords);
                // The tile's groups one after the other (one group when it spans tiles).
                #[unroll]
                for h in 0..gpt {
                    #[unroll]
                    for f0 in 0..fpg {
                        let f = h * fpg + f0;
                        let xt = load_shared(sdt, lxt, [0, f * fk]);
                        let fw = (words >> (W::BITS * f)) & mask;
                        acc_g = dot(view::<u8>(fw, lwa), view::<i8>(xt, lxb), acc_g);
                    }
                    if gpt > 1 {
                        finish(h, stage);
                    }
                }
            }
            if gpt == 1 {
                finish(0, (g * tpg + tpg - 1) % STAGES);
            }
        }
        wait_group(0);
        store_tile(
            view::<f32>(acc, lt),
            lt,
            layout!(spatial(WN * 32)),
            bi,
            bj,
            bs,
            false,
        );
    }

    /// [`QMatmulMethod::GemvIgmma`](crate::kernels::qmatmul::QMatmulMethod): the tokens of
    /// [`qmatmul_gemv_imma_tokens`] on Hopper's integer warpgroup MMA (`wgmma.m64nNk32
    /// .s32.u8.s8`, N = `2 BM` digit columns), for 8 to 64 tokens a block. Each warpgroup holds
    /// its `[64 rep, BK]` slice of the weight tile as wgmma's register A: field `f` of every
    /// byte (the k-range `[f BK / P, (f + 1) BK / P)` of the tile) shifted to the byte's low
    /// bits is one u8 A operand, four weights a shift and a `lop3`; the digits of
    /// [`qmatmul_imma_digits`] are B, read by the tensor cores straight from the ring
    /// (`[2 BM, 128]` rows, k-major, 128-byte swizzle). A tile lies inside one scale group, so
    /// after its wgmmas its i32 sums are combined (`256 hi + lo`, exact), converted and scaled
    /// by `s / σ`; the zero points' (or the signed offset's) `s z Σ x` is taken off per token
    /// with the group's first tile. Even and odd tiles accumulate into two i32 tiles from two sets of operands: a
    /// tile's wgmmas stay in flight while the tile before it is combined. A ring stage is
    /// refilled two tiles after it was read (`STAGES >= 3`), when both are done with it.
    ///
    /// Parameters as [`qmatmul_gemv_imma_tokens`]'s; `WG` warpgroups a block, `BN = 64 WG rep`.
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, BM), n / BN, SPLIT],
        warps = 4 * WG,
        blocks_per_sm = OCC,
        target = sm90,
        // Checked when the crate is built: zero points, signed offsets, 2 and 4 bits, a tile
        // a group and two, split k, f16 and bf16, 8 and 64 tokens.
        space(
            BM = [8, 64],
            BN = [128],
            BK = [128],
            WG = [2],
            STAGES = [4],
            SPLIT = [1, 4],
            G = [128, 256],
            ZEROS = [0, 1],
            SIGNED = [0, 1],
            VEC = [16],
            OCC = [1],
        ),
        dtypes(A = [f16, bf16], W = [u2, i4]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv_igmma<
        const BM: i32,
        const BN: i32,
        const BK: i32,
        const WG: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const SIGNED: i32,
        const VEC: i32,
        const OCC: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
        digits: Global<u8>,
        side: Global<f32>,
    ) {
        let p = 8 / W::BITS;
        let fk = BK / p;
        let steps = fk / 32;
        let rep = BN / (64 * WG);
        let nt = BM / 4;
        let chunks = BK / 128;
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = tile_bytes / (128 * WG);
        let fold = ZEROS == 1;
        let offset = if SIGNED == 1 {
            0.5 * (1 << W::BITS)
        } else {
            0.0
        };
        let mp = cdiv(m, 32) * 32;

        let lbytes = layout!(local(thread_bytes / VEC).spatial(128 * WG).local(VEC));
        let lwords = layout!(local(thread_bytes / 4).spatial(128 * WG));
        // One field's weights `[BN, fk]` as wgmma's A: warpgroup tiles of 64 rows, the k steps
        // of 32 innermost.
        let lwa = layout!(
            spatial(WG, 1)
                .local(rep, 1)
                .spatial(4, 1)
                .local(1, steps)
                .mma_a_f8
        );
        // The accumulator `[BN, 2 BM]` (wgmma C tiles); as `[BN, BM, 2]` (column, token, digit),
        // whose two digits one thread holds side by side; `[BN, BM, 1]` once combined, and its
        // `[BM, BN]` view for the store.
        let lc = layout!(
            spatial(WG, 1)
                .local(rep, 1)
                .spatial(4, 1)
                .local(1, nt)
                .mma_c
        );
        let lc3 = layout!(spatial(WG, 1, 1)
            .local(rep, 1, 1)
            .spatial(4, 1, 1)
            .local(1, nt, 1)
            .local(2, 1, 1)
            .spatial(8, 4, 1)
            .local(1, 1, 2));
        let lt3 = layout!(reduce(lc3, [2]));
        let lts = layout!(reduce(lt3, [1]));
        let ltt = layout!(reduce(lt3, [0]));
        let lt = layout!(spatial(1, WG)
            .local(1, rep)
            .spatial(1, 4)
            .local(nt, 1)
            .local(1, 2)
            .column_spatial(4, 8));

        let [bi, bj, bs] = block_indices();
        let tiles = k / (BK * SPLIT);
        let kt0 = bs * tiles;
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        // Scales and zero points `[1, 1, BN]` a stage, contiguous for `cp.async` (a `[BN, 1, 1]`
        // box would be copied an element at a time, synchronously), read as `[BN, 1, 1]`.
        let gs = view_global(scales, [k / G, 1, n]);
        let gz = view_global(zeros, [if fold { k / G } else { 0 }, 1, n]);
        let gd = view_global::<i8>(digits, [2 * mp, k]);
        let gsd = view_global(side, [k / G, mp, 2]);
        let sb = shared::<u8>([STAGES, tile_bytes]);
        let sd = shared::<i8>([STAGES, chunks, 2 * BM, 128], swizzle(3, 4, 3));
        let ss = shared::<A>([STAGES, 1, 1, BN]);
        let sz = if fold {
            shared::<A>([STAGES, 1, 1, BN])
        } else {
            ()
        };
        let ssd = shared::<f32>([STAGES, 1, BM, 2]);

        let issue = |tile: i32, stage: i32| {
            let t = kt0 + tile;
            copy_async(gb, slice_shared(sb, [stage, 0], [tile_bytes]), [t, bj, 0]);
            #[unroll]
            for ch in 0..chunks {
                copy_async(
                    gd,
                    slice_shared(sd, [stage, ch, 0, 0], [2 * BM, 128]),
                    [2 * BM * bi, t * BK + 128 * ch],
                );
            }
            let group = t * BK / G;
            copy_async(
                gs,
                slice_shared(ss, [stage, 0, 0, 0], [1, 1, BN]),
                [group, 0, bj * BN],
            );
            if fold {
                copy_async(
                    gz,
                    slice_shared(sz, [stage, 0, 0, 0], [1, 1, BN]),
                    [group, 0, bj * BN],
                );
            }
            copy_async(
                gsd,
                slice_shared(ssd, [stage, 0, 0, 0], [1, BM, 2]),
                [group, bi * BM, 0],
            );
            commit_group();
        };
        #[unroll]
        for s0 in 0..STAGES - 2 {
            if s0 < tiles {
                issue(s0, s0);
            } else {
                commit_group();
            }
        }
        // The top of tile t: every thread has combined tile t - 2 and retired its wgmmas, so
        // its stage takes tile t + STAGES - 2; tile t's stage has landed and is visible.
        let top = |t: i32| {
            wait_group(STAGES - 3);
            sync();
            let q = t + (STAGES - 2);
            if q < tiles {
                issue(q, q % STAGES);
            } else {
                commit_group();
            }
        };
        // The low `bits` of every byte.
        let mask = ((1 << W::BITS) - 1) * 16843009;
        let words = |t: i32| {
            view::<i32>(
                load_shared(slice_shared(sb, [t % STAGES, 0], [tile_bytes]), lbytes, [0]),
                lwords,
            )
        };
        // Field f of tile t's digits as wgmma's B: `[fk, 2 BM]`, k-major.
        let xd = |t: i32, f: i32| {
            permute_shared(
                slice_shared(
                    sd,
                    [t % STAGES, f * fk / 128, 0, f * fk % 128],
                    [2 * BM, fk],
                ),
                [1, 0],
            )
        };
        let hi_digit = arange(lc3, 2, 0) == 0;
        // `acc` plus tile t's i32 sums `ai`, scaled.
        let combine = |t: i32, ai: Tensor, acc: Tensor| {
            let r = t % STAGES;
            let comb = sum(
                select(hi_digit, view::<i32>(ai, lc3) * 256, view::<i32>(ai, lc3)),
                2,
            );
            let sc = cast::<f32>(load_shared(
                permute_shared(slice_shared(ss, [r, 0, 0, 0], [1, 1, BN]), [2, 0, 1]),
                lts,
                [0, 0, 0],
            ));
            let gside = slice_shared(ssd, [r, 0, 0, 0], [1, BM, 2]);
            let inv_sigma = load_shared(gside, ltt, [0, 0, 0]);
            // `[BN, 1, 1]` and `[1, BM, 1]` meet in the `[BN, BM, 1]` tile.
            let zero = register::<f32>(lt3, 0.0);
            let scaled = mul_add(cast::<f32>(comb), (zero + inv_sigma) * sc, acc);
            if fold || SIGNED == 1 {
                // `Σ x` is the group's: taken off once, with the group's first tile.
                let once = (1 - min(t * BK % G, 1)) as f32;
                let asum = load_shared(gside, ltt, [0, 0, 1]) * once;
                let zc = if fold {
                    let z = cast::<f32>(load_shared(
                        permute_shared(slice_shared(sz, [r, 0, 0, 0], [1, 1, BN]), [2, 0, 1]),
                        lts,
                        [0, 0, 0],
                    ));
                    if SIGNED == 1 {
                        z + offset
                    } else {
                        z
                    }
                } else {
                    register::<f32>(lts, offset)
                };
                mul_add(zero - asum, zc * sc, scaled)
            } else {
                scaled
            }
        };
        let mut acc = register::<f32>(lt3, 0.0);
        // Each tile's first wgmma starts from `zero` (no moves into an accumulator among
        // in-flight wgmmas: `dot`'s code ignores the input of a fresh zero tile).
        let zero = register::<i32>(lc, 0);
        let mut a0 = register::<i32>(lc, 0);
        let mut a1 = register::<i32>(lc, 0);
        // Tiles in pairs: both tiles' wgmmas are issued, then `dot_wait(P)` retires the
        // first, which is combined while the second runs. (Combining a tile while the next
        // pair's wgmmas run would overlap more, but ptxas cannot follow the wait across the
        // loop's back edge and serializes every wgmma: C7514.)
        for t2 in 0..tiles / 2 {
            let t = 2 * t2;
            top(t);
            top(t + 1);
            let w0 = words(t);
            #[unroll]
            for f in 0..p {
                let fw = (w0 >> (W::BITS * f)) & mask;
                let c0 = if f == 0 { zero } else { a0 };
                a0 = dot_async(view::<u8>(fw, lwa), xd(t, f), c0);
            }
            let w1 = words(t + 1);
            #[unroll]
            for f in 0..p {
                let fw = (w1 >> (W::BITS * f)) & mask;
                let c1 = if f == 0 { zero } else { a1 };
                a1 = dot_async(view::<u8>(fw, lwa), xd(t + 1, f), c1);
            }
            dot_wait(p);
            acc = combine(t, a0, acc);
            dot_wait(0);
            acc = combine(t + 1, a1, acc);
        }
        if tiles % 2 == 1 {
            let t = tiles - 1;
            top(t);
            let w0 = words(t);
            #[unroll]
            for f in 0..p {
                let fw = (w0 >> (W::BITS * f)) & mask;
                let c0 = if f == 0 { zero } else { a0 };
                a0 = dot(view::<u8>(fw, lwa), xd(t, f), c0);
            }
            acc = combine(t, a0, acc);
        }
        wait_group(0);
        store_tile(
            view::<f32>(acc, lt),
            lt,
            layout!(spatial(WG * 128)),
            bi,
            bj,
            bs,
            false,
        );
    }

    /// [`QMatmulMethod::GemvWgmma`](crate::kernels::qmatmul::QMatmulMethod): the transposed product of
    /// [`qmatmul_gemv`] on Hopper's warpgroup MMA. Each warpgroup dequantizes its `[64, BN / WG]`
    /// slice of the `[64, BN]` weight tile into wgmma's A registers (`rep = BN / (64 WG)` tiles of
    /// 64 output columns), and one `wgmma.m64nBMk16` per tile and 16 of k multiplies it by the
    /// activation tile `[BM, 64]` straight from shared memory (k-major, 128-byte swizzle, the
    /// cp.async ring's own stage).
    ///
    /// The wgmmas stay in flight across the k loop: the scale and zero point of each column are
    /// applied to the weight while it is dequantized (`q · s - z · s` in the activation type, one
    /// fma per pair of weights), so
    /// one accumulator chains every `dot_async` over all of k with nothing to rescale per group;
    /// even and odd k tiles dequantize into two register sets, so a tile's operand is rewritten
    /// only after `dot_wait(1)` retired the wgmma that read it. A ring stage holds `KT` k tiles
    /// (a k step of `64 KT`; one scale row, so `G` is a multiple of it): one barrier per stage,
    /// after which every warpgroup has retired stage `t - 2`, which is refilled (`STAGES - 2`
    /// stages in flight). With `KT = 2` the barrier, the stage's bookkeeping (ring position,
    /// phase, copy issue) and the scale loads are paid once per two tiles (perf note 58).
    /// Split-k as in [`qmatmul_gemv`].
    ///
    /// With `TMA = 1` the copy engine fills the ring: one thread issues a `tma_load` per tile
    /// (activations swizzled by the engine, the weight tile as `[tile_bytes / 128, 128]` bytes,
    /// the group's scales and zero points), each completing on its stage's `mbarrier`, so the
    /// warps that dequantize and issue the wgmmas compute no copy addresses and wait on the
    /// barrier instead of `cp.async` groups (`BN <= 256`: a box row is at most 256 elements).
    ///
    /// With `WS = 1` (copy engine, one pass, no split) the warps are specialized
    /// (`specialize!`): one more warpgroup, the producer, fills the ring as soon as a stage is
    /// handed back, and the `WG` consumer warpgroups only wait for full stages, dequantize and
    /// multiply; they hand a stage back once the wgmma that read it has retired. No block
    /// barrier is left in the k loop, and all `STAGES` stages can be in flight. `OCC` blocks a
    /// multiprocessor: the producer gives up registers (40) to the consumers.
    ///
    /// Parameters as [`qmatmul_main`]'s; `WG` warpgroups per block; `STAGES >= 3`; `KT` 1 or 2
    /// (`WS = 1`: 1; the configuration takes 2 on stream-k only, since ptxas serializes the
    /// wgmmas of the one-pass loop with two tiles a stage, perf note 58).
    #[tilus::kernel(
        lazy,
        grid = [cdiv(m, BM), if STREAM > 0 { STREAM } else { n / BN }, SPLIT],
        warps = 4 * WG + 4 * WS,
        blocks_per_sm = OCC,
        target = sm90,
        // Checked when the crate is built: per-channel and grouped scales, zero points, both
        // packing orders, bit widths 2, 4 and 8, f16 and bf16, both output types.
        space(
            BM = [8, 32],
            BN = [128],
            WG = [1],
            STAGES = [4],
            SPLIT = [1, 4],
            G = [0, 128],
            ZEROS = [0, 1],
            H = [1, 4],
            VEC = [16],
            TMA = [0, 1],
            STREAM = [0, 3],
            WS = [0],
            OCC = [1],
            KT = [1, 2],
        ),
        dtypes(A = [f16, bf16], W = [u2, u4, i8]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_gemv_wgmma<
        const BM: i32,
        const BN: i32,
        const WG: i32,
        const STAGES: i32,
        const SPLIT: i32,
        const G: i32,
        const ZEROS: i32,
        const H: i32,
        const VEC: i32,
        const TMA: i32,
        const STREAM: i32,
        const WS: i32,
        const OCC: i32,
        const KT: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
    ) {
        let rep = BN / (64 * WG);
        let nt = BM / 8;
        let grouped = G > 0;
        let fold = ZEROS == 1;
        let tile_bytes = 64 * BN * W::BITS / 8;
        let thread_bytes = tile_bytes / (128 * WG);

        // The weight tile [64, BN] and its [BN, 64] view as wgmma's A operand: warpgroup tiles of
        // 64 rows, the four k steps of 16 innermost; one scale (and zero point) per column.
        let lw = layout!(
            spatial(1, WG)
                .local(1, rep)
                .spatial(1, 4)
                .local(4, 1)
                .mma_a_t
        );
        let lwa = layout!(spatial(WG, 1).local(rep, 1).spatial(4, 1).local(1, 4).mma_a);
        let lq = layout!(swap_inner_locals(lw, 2, H));
        let lws = layout!(reduce(lw, [0]));
        // The accumulator [BN, BM] (wgmma C tiles) and its [BM, BN] view.
        let lc = layout!(
            spatial(WG, 1)
                .local(rep, 1)
                .spatial(4, 1)
                .local(1, nt)
                .mma_c
        );
        let lct = layout!(
            spatial(1, WG)
                .local(1, rep)
                .spatial(1, 4)
                .local(nt, 1)
                .mma_c_t
        );
        // Each thread's weight bytes: runs of VEC, as rows of 128 bytes (a copy-engine box).
        let lbytes = layout!(split(
            local(thread_bytes / VEC).spatial(128 * WG).local(VEC),
            0,
            128
        ));

        let [gi, gj, bs] = block_indices();
        // Blocks in bands of row blocks, each band sweeping the columns, so that the
        // activations a wave reads stay in L2 (about 16 MB of them) while the weight streams:
        // in launch order (rows fastest, over all of m) a 4096-token prefill read its 64 MB of
        // activations from memory again in every wave. One row block (decode) is launch order.
        // With stream-k, block (gi, gj) is worker gj of row block gi.
        let rows = cdiv(m, BM);
        let cols = n / BN;
        let band = max(1, 8388608 / (BM * k));
        let (bi, bj) = if STREAM > 0 {
            (gi, gj)
        } else {
            grouped_tile(gi + gj * rows, rows, cols, band)
        };
        // Extents of the kernel's parameters alone (not `let` scalars): the launcher encodes
        // the tensor maps from them.
        let ga = view_global(a, [m, k]);
        let gb = view_global(b, [k / 64, n / BN, tile_bytes / 128, 128]);
        let gs = view_global(scales, [if grouped { k / G } else { 1 }, n]);
        let gz = view_global(
            zeros,
            [
                if ZEROS == 0 {
                    0
                } else if grouped {
                    k / G
                } else {
                    1
                },
                n,
            ],
        );

        // The activations as wgmma reads them: rows of 64 k (128 bytes), 128-byte swizzle.
        // Stage s holds k tiles s KT .. s KT + KT - 1 of the ring's slots.
        let sa = shared::<A>([STAGES * KT, BM, 64], swizzle(3, 3, 3));
        let sb = shared::<u8>([STAGES * KT, tile_bytes / 128, 128]);
        let ss = if grouped {
            shared::<A>([STAGES, 1, BN])
        } else {
            ()
        };
        let sz = if grouped && fold {
            shared::<A>([STAGES, 1, BN])
        } else {
            ()
        };
        // Per-channel scales and zero points: loaded once.
        let sc0 = if grouped {
            ()
        } else {
            load_global(gs, lws, [0, bj * BN])
        };
        let zc0 = if !grouped && fold {
            load_global(gz, lws, [0, bj * BN])
        } else {
            ()
        };

        // With the copy engine: a stage is complete when each of its copies has landed.
        let full = if TMA == 0 {
            ()
        } else if !grouped {
            mbarriers(STAGES, 2 * KT)
        } else if fold {
            mbarriers(STAGES, 2 * KT + 2)
        } else {
            mbarriers(STAGES, 2 * KT + 1)
        };

        // k steps (ring stages) of a split.
        let ktiles = k / (64 * KT * SPLIT);
        let kt0 = bs * ktiles;
        // The copies of k step `t` of column tile `j` into `stage`.
        let issue = |t: i32, j: i32, stage: i32| {
            #[unroll]
            for u in 0..KT {
                let xa = slice_shared(sa, [stage * KT + u, 0, 0], [BM, 64]);
                let xb = slice_shared(sb, [stage * KT + u, 0, 0], [tile_bytes / 128, 128]);
                if TMA == 1 {
                    tma_load(ga, xa, [bi * BM, (t * KT + u) * 64], full, stage);
                    tma_load(gb, xb, [t * KT + u, j, 0, 0], full, stage);
                } else {
                    copy_async(ga, xa, [bi * BM, (t * KT + u) * 64]);
                    copy_async(gb, xb, [t * KT + u, j, 0, 0]);
                }
            }
            if grouped {
                let group = t * KT * 64 / G;
                let xs = slice_shared(ss, [stage, 0, 0], [1, BN]);
                if TMA == 1 {
                    tma_load(gs, xs, [group, j * BN], full, stage);
                } else {
                    copy_async(gs, xs, [group, j * BN]);
                }
                if fold {
                    let xz = slice_shared(sz, [stage, 0, 0], [1, BN]);
                    if TMA == 1 {
                        tma_load(gz, xz, [group, j * BN], full, stage);
                    } else {
                        copy_async(gz, xz, [group, j * BN]);
                    }
                }
            }
            if TMA == 0 {
                commit_group();
            }
        };
        // The top of step t of a pass over `len` k steps of column tile `j` from k step `t0`,
        // its steps at ring positions `r0 + t`: every warpgroup retired step t - 2 (its
        // `dot_wait(1)` ran in step t - 1, before this barrier), so step t + STAGES - 2 refills
        // that stage; step t's stage has landed and is visible.
        let top = |t: i32, len: i32, t0: i32, j: i32, r0: i32| {
            let q = t + (STAGES - 2);
            if TMA == 1 {
                sync();
                if q < len {
                    issue(t0 + q, j, (r0 + q) % STAGES);
                }
                mbarrier_wait(full, (r0 + t) % STAGES, (r0 + t) / STAGES % 2);
            } else {
                wait_group(STAGES - 3);
                sync();
                if q < len {
                    issue(t0 + q, j, (r0 + q) % STAGES);
                } else {
                    commit_group();
                }
            }
        };
        // The scales of the columns for the stage at ring position r (one row for its KT tiles).
        let col_scale = |r: i32| {
            if grouped {
                load_shared(slice_shared(ss, [r % STAGES, 0, 0], [1, BN]), lws, [0, 0])
            } else {
                sc0
            }
        };
        // With zero points, `-z · s` of those columns (`(q - z) · s` is then `q · s - z · s`:
        // one fma per pair of weights); without, `sc` itself, unused.
        let col_bias = |r: i32, sc: Tensor| {
            if fold {
                let zc = if grouped {
                    load_shared(slice_shared(sz, [r % STAGES, 0, 0], [1, BN]), lws, [0, 0])
                } else {
                    zc0
                };
                neg(zc * sc)
            } else {
                sc
            }
        };
        // Tile u of the weight at ring position r, dequantized with its columns' scales `sc`
        // and `bias`, as wgmma's A.
        let dequant = |r: i32, u: i32, sc: Tensor, bias: Tensor| {
            let rw = load_shared(
                slice_shared(sb, [r % STAGES * KT + u, 0, 0], [tile_bytes / 128, 128]),
                lbytes,
                [0, 0],
            );
            let wf = cast::<A>(view::<W>(rw, lq), lw);
            let w = if fold { mul_add(wf, sc, bias) } else { wf * sc };
            view::<A>(w, lwa)
        };
        // The one tile of the stage at ring position r (KT = 1).
        let dequant1 = |r: i32| {
            let sc = col_scale(r);
            dequant(r, 0, sc, col_bias(r, sc))
        };
        let xs = |r: i32, u: i32| {
            permute_shared(
                slice_shared(sa, [r % STAGES * KT + u, 0, 0], [BM, 64]),
                [1, 0],
            )
        };
        let lanes = layout!(spatial(WG * 128));
        // A pass over `len` k steps of column tile `j` from k step `t0`, its stages at ring
        // positions `r0 + t` (the copies of the first `STAGES - 2` already issued): the f32
        // accumulator over them. Written out for even and odd tiles so that no dot_async is
        // inside a branch; an odd last tile (one tile a stage) is a synchronous dot after the
        // wait. With two tiles a stage, the stage's two tiles go to the two register sets.
        let k_pass = |len: i32, t0: i32, j: i32, r0: i32| {
            let mut acc = register::<f32>(lc, 0.0);
            let mut wa0 = register::<A>(lwa, 0.0);
            let mut wa1 = register::<A>(lwa, 0.0);
            if KT == 1 {
                for t2 in 0..len / 2 {
                    let t = 2 * t2;
                    top(t, len, t0, j, r0);
                    wa0 = dequant1(r0 + t);
                    acc = dot_async(wa0, xs(r0 + t, 0), acc);
                    dot_wait(1);
                    top(t + 1, len, t0, j, r0);
                    wa1 = dequant1(r0 + t + 1);
                    acc = dot_async(wa1, xs(r0 + t + 1, 0), acc);
                    dot_wait(1);
                }
                dot_wait(0);
                if len % 2 == 1 {
                    let t = len - 1;
                    top(t, len, t0, j, r0);
                    wa0 = dequant1(r0 + t);
                    acc = dot(wa0, xs(r0 + t, 0), acc);
                }
            } else {
                for t in 0..len {
                    top(t, len, t0, j, r0);
                    let sc = col_scale(r0 + t);
                    let bias = col_bias(r0 + t, sc);
                    wa0 = dequant(r0 + t, 0, sc, bias);
                    acc = dot_async(wa0, xs(r0 + t, 0), acc);
                    dot_wait(1);
                    wa1 = dequant(r0 + t, 1, sc, bias);
                    acc = dot_async(wa1, xs(r0 + t, 1), acc);
                    dot_wait(1);
                }
                dot_wait(0);
            }
            view::<f32>(acc, lct)
        };
        if WS == 1 {
            // A stage is empty again when every consumer warp has retired the wgmma that read
            // it.
            let empty = mbarriers(STAGES, 4 * WG);
            specialize! {
                role(warps = 4, registers = 40) => {
                    for t in 0..ktiles {
                        let s = t % STAGES;
                        if t >= STAGES {
                            // The consumers' (t / STAGES)-th hand-back of stage s.
                            mbarrier_wait(empty, s, (t / STAGES - 1) % 2);
                        }
                        issue(kt0 + t, bj, s);
                    }
                }
                // The block's registers less the producer's 40 per thread, a multiple of 8.
                role(
                    warps = 4 * WG,
                    registers = min(
                        256,
                        ((WG + 1) * (65536 / (OCC * 128 * (WG + 1)) / 8 * 8) - 40) / WG / 8 * 8
                    ),
                ) => {
                    let mut acc = register::<f32>(lc, 0.0);
                    let mut wa0 = register::<A>(lwa, 0.0);
                    let mut wa1 = register::<A>(lwa, 0.0);
                    // Even and odd tiles written out (no dot_async in a branch); a tile's
                    // stage goes back after the next tile's dot_wait(1) retired its wgmma.
                    for t2 in 0..ktiles / 2 {
                        let t = 2 * t2;
                        mbarrier_wait(full, t % STAGES, t / STAGES % 2);
                        wa0 = dequant1(t);
                        acc = dot_async(wa0, xs(t, 0), acc);
                        dot_wait(1);
                        if t > 0 {
                            mbarrier_arrive(empty, (t - 1) % STAGES);
                        }
                        mbarrier_wait(full, (t + 1) % STAGES, (t + 1) / STAGES % 2);
                        wa1 = dequant1(t + 1);
                        acc = dot_async(wa1, xs(t + 1, 0), acc);
                        dot_wait(1);
                        mbarrier_arrive(empty, t % STAGES);
                    }
                    dot_wait(0);
                    if ktiles % 2 == 1 {
                        let t = ktiles - 1;
                        mbarrier_wait(full, t % STAGES, t / STAGES % 2);
                        wa0 = dequant1(t);
                        acc = dot(wa0, xs(t, 0), acc);
                    }
                    let acc = view::<f32>(acc, lct);
                    store_tile(acc, lct, lanes, bi, bj, bs, false);
                }
            }
        } else if STREAM == 0 {
            // One pass: the block's tile, k steps `kt0..kt0 + ktiles`.
            #[unroll]
            for st in 0..STAGES - 2 {
                if st < ktiles {
                    issue(kt0 + st, bj, st);
                } else if TMA == 0 {
                    commit_group();
                }
            }
            let acc = k_pass(ktiles, kt0, bj, 0);
            if TMA == 0 {
                wait_group(0);
            }
            store_tile(acc, lct, lanes, bi, bj, bs, false);
        } else {
            // Stream-k: worker bj takes iterations `it0..it1` of the (column tile, k step)
            // space of its block row, numbered `j * kt + t`, as one pass per column tile it
            // touches: the same straight k loop as a whole tile, its ring positions counted
            // over the worker's iterations (each stage's barrier phases run on). Passes that
            // start or end inside a tile are partial sums (`stream_store`).
            let kt = k / (64 * KT);
            let total = (n / BN * kt) as i64;
            let it0 = (bj as i64 * total / STREAM) as i32;
            let it1 = ((bj + 1) as i64 * total / STREAM) as i32;
            let j0 = it0 / kt;
            let passes = if it1 > it0 {
                (it1 - 1) / kt - j0 + 1
            } else {
                0
            };
            for p in 0..passes {
                let j = j0 + p;
                let begin = max(it0, j * kt);
                let len = min(it1, (j + 1) * kt) - begin;
                let t0 = begin - j * kt;
                let r0 = begin - it0;
                // Every warpgroup retired the last pass's wgmmas and read its stages.
                sync();
                #[unroll]
                for st in 0..STAGES - 2 {
                    if st < len {
                        issue(t0 + st, j, (r0 + st) % STAGES);
                    }
                }
                let acc = k_pass(len, t0, j, r0);
                stream_store(acc, lct, lanes, bi, bj, j, len, kt, begin == it0);
            }
        }
    }

    /// [`QMatmulMethod::Lut`](crate::kernels::qmatmul::QMatmulMethod): one token's product by
    /// look-up tables of partial sums of its activations (LUT-GEMM style), for integer weights
    /// of `P` bits split offline into `P` bit planes.
    ///
    /// For each k tile of 256 the block builds 32 tables in shared memory, one per 8
    /// activations: entry `b` of table `T` is `Σ_j bit_j(b) · x[8T + j]` (f32). A byte of a bit
    /// plane (8 weights of one output column) is then one look-up (`lookup`: one `PRMT` and the
    /// `LDS`): its partial dot product with those 8 activations, instead of 4 conversions and 8
    /// multiply-adds. Plane `p` counts
    /// `2^p` (`-2^(P-1)` for the top plane of a signed type); each scale group gets its zero
    /// point (`z · Σ x` over the group) and scale once per k tile.
    ///
    /// - **The tables** are stored `[256 entries, 64 slots]` (slot = stage · 32 + table), so an
    ///   entry's bank is its table's: the 32 lanes of a warp read 32 different tables at every
    ///   step and never conflict. Lanes come in `32 / TG` sets of `TG` (a scale group is `TG`
    ///   tables: `G = 8 · TG`); set `σ` owns group `σ` of the tile for its `TG` rows, and lane
    ///   `lr` of a set reads table `(lr + s) % TG` of its group at step `s`: the weight bytes
    ///   come re-laid in that order (`super::lut::relayout_lut`).
    /// - **Rows.** Each thread holds `R` rows of its set (`BN = WARPS · R · TG` per block); the
    ///   sets' sums of one row are added by shuffles at the end.
    /// - **Building** a tile's tables is split over the block: thread `(lane T, warp h)` writes
    ///   table `T`'s entries whose high bits are `h`; the low bits' sums are a tree of additions
    ///   (each taken under a constant condition per entry, so the untaken ones are never
    ///   computed and the taken ones share their prefixes). Two stages:
    ///   tile `t + 1`'s tables are built while tile `t`'s are read, one barrier per tile.
    /// - **Weights** go straight to registers (16-byte loads, a tile ahead), never through
    ///   shared memory: shared bandwidth is the look-ups'.
    /// - **As a programmatic dependent** (sm_90) the block starts while the kernel before it
    ///   ends and waits for it (`wait_prior_grid()`) before it reads the activations or writes
    ///   anything. The first weight tile is requested before the wait in the program, but its
    ///   loads are invariant (read-only, non-coherent), and NVVM sinks them past the wait to
    ///   their use: what overlaps is the launch and the prologue. An ordinary launch has the
    ///   same order, so `dependent` (the flag every waiting gemv takes, [`qmatmul_gemv_imma`])
    ///   changes nothing here.
    ///
    /// Parameters as [`qmatmul_main`]'s, `BM = 1` (a block per token); `k` a multiple of
    /// `2 · 256 · SPLIT`.
    #[tilus::kernel(
        lazy,
        grid = [m, n / BN, SPLIT],
        warps = WARPS,
        blocks_per_sm = OCC,
        space(
            BM = [1],
            BN = [256, 512],
            WARPS = [8],
            R = [2, 4],
            TG = [16],
            P = [1, 3],
            SIGNED = [0, 1],
            ZEROS = [0, 1],
            SPLIT = [1, 4],
            OCC = [1],
        ),
        dtypes(A = [f16, bf16]),
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn qmatmul_lut<
        const BM: i32,
        const BN: i32,
        const WARPS: i32,
        const R: i32,
        const TG: i32,
        const P: i32,
        const SIGNED: i32,
        const ZEROS: i32,
        const SPLIT: i32,
        const OCC: i32,
        A: DTypeParam,
    >(
        m: i32,
        n: i32,
        k: i32,
        a: Global<A>,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        c: GlobalMut<A>,
        workspace: GlobalMut<f32>,
        semaphores: GlobalMut<i32>,
        dependent: i32,
    ) {
        let ns = 32 / TG;
        let wr = WARPS * R;
        let threads = WARPS * 32;
        let chunks = R * TG * P / 16;
        // Entries of a table each build thread writes: `lo_bits` low bits of the byte.
        let lo = 256 / WARPS;
        let lo_bits = if lo == 64 {
            6
        } else if lo == 32 {
            5
        } else {
            4
        };
        // The weight bytes of a tile, [set, warp row, lane row, step, plane], and the raw words
        // they are loaded as ([chunk, thread, word]: each load instruction is 512 contiguous
        // bytes per warp).
        let lb = layout!(spatial(1, WARPS, 1, 1, 1)
            .local(1, R, 1, 1, 1)
            .spatial(ns, 1, TG, 1, 1)
            .local(1, 1, 1, TG, P));
        let lw = layout!(local(1, 1, chunks, 1, 1)
            .spatial(1, 1, 1, threads, 1)
            .local(1, 1, 1, 1, 4));
        let lslot = layout!(reduce(lb, [1, 4]));
        let lacc = layout!(reduce(lb, [3, 4]));
        let lcoef = layout!(reduce(lb, [0, 1, 2, 3]));
        let lsum = layout!(reduce(lb, [1, 2, 3, 4]));
        // The build: [table, warp, low bits] per tile, entry b = warp · lo + low.
        let le = layout!(spatial(1, WARPS, 1).spatial(32, 1, 1).local(1, 1, lo));
        let le2 = layout!(spatial(1, WARPS).spatial(32, 1).local(1, lo));
        let lx = layout!(reduce(le, [1, 2]));
        let lhi = layout!(reduce(le, [2]));
        let llo = layout!(reduce(le, [1]));
        let lgroup = layout!(replicated(WARPS).spatial(ns, 1, TG, 1, 1));

        let [bi, bj, bs] = block_indices();
        let tiles = k / 256;
        let per = tiles / SPLIT;
        let t0 = bs * per;
        let groups = k / (8 * TG);
        let gx = view_global(a, [m * k / 8, 8, 1]);
        let gw = view_global::<u32>(b, [n / BN, tiles, chunks, threads, 4]);
        let gs = view_global(scales, [groups, n / TG, TG, 1, 1]);
        let gz = view_global(
            zeros,
            [if ZEROS == 1 { groups } else { 0 }, n / TG, TG, 1, 1],
        );
        let lut = shared::<f32>([256, 64]);
        let slut = permute_shared(lut, [1, 0]);
        let sgroup = shared::<f32>([2, ns, 1, 1, 1, 1]);

        // Slot of each look-up (table and stage), the same for every row.
        let slot0 =
            arange(lslot, 0, 0) * TG + ((arange(lslot, 2, 0) + arange(lslot, 3, 0)) & (TG - 1));
        let slot1 = slot0 + 32;
        // Plane weights: 2^p, the top plane of a signed type negative.
        let pw = register::<i32>(lcoef, 1) << arange(lcoef, 4, 0);
        let coef = if SIGNED == 1 {
            cast::<f32>(select(arange(lcoef, 4, 0) == P - 1, neg(pw), pw))
        } else {
            cast::<f32>(pw)
        };

        // Tile `t`'s tables into `stage`, and its groups' activation sums.
        let build = |t: i32, stage: i32| {
            let row = (bi * k + t * 256) / 8;
            let mut hi = register::<f32>(lhi, -0.0);
            let mut low = register::<f32>(llo, -0.0);
            let mut total = register::<f32>(lx, -0.0);
            #[unroll]
            for j in 0..8 {
                let xj = cast::<f32>(load_global(gx, lx, [row, j, 0]));
                total = total + xj;
                // A constant condition per local: the untaken sum is never computed, and the
                // taken ones share their prefixes (31 additions for 32 entries, say).
                if j < lo_bits {
                    let bit = (arange(llo, 2, 0) >> j) & 1;
                    low = select(bit != 0, low + xj, low);
                } else {
                    let bit = (arange(lhi, 1, 0) >> (j - lo_bits)) & 1;
                    hi = select(bit != 0, hi + xj, hi);
                }
            }
            // `low` is the same on every warp: its registers are the entries' layout too.
            let entries = view::<f32>(low, le) + hi;
            store_shared(
                view::<f32>(entries, le2),
                slice_shared(slut, [stage * 32, 0], [32, 256]),
                [0, 0],
            );
            let group_sums = sum(view::<f32>(total, lgroup), 2);
            store_shared(
                group_sums,
                slice_shared(sgroup, [stage, 0, 0, 0, 0, 0], [ns, 1, 1, 1, 1]),
                [0, 0, 0, 0, 0],
            );
        };
        let load_w = |t: i32| load_global(gw, lw, [bj, t, 0, 0, 0]);

        let mut acc = register::<f32>(lacc, 0.0);
        // Tile `t` from `stage`, its weights `w`.
        let step = |t: i32, stage: i32, w: Tensor, slot: Tensor| {
            let sc = cast::<f32>(load_global(gs, lacc, [t * ns, bj * wr, 0, 0, 0]));
            // Entry (byte, slot): one `PRMT` of the weight byte and the slot's offset each.
            let part = sum(lookup(lut, view::<u8>(w, lb), slot), 3);
            let mut v = sum(part * coef, 4);
            if ZEROS == 1 {
                let zc = cast::<f32>(load_global(gz, lacc, [t * ns, bj * wr, 0, 0, 0]));
                let xs = load_shared(
                    slice_shared(sgroup, [stage, 0, 0, 0, 0, 0], [ns, 1, 1, 1, 1]),
                    lsum,
                    [0, 0, 0, 0, 0],
                );
                v = mul_add(zc, neg(xs), v);
            }
            acc = mul_add(sc, v, acc);
        };

        // Launched as a dependent, the next kernel may start once every block of this one has.
        launch_dependents();
        // The first weight tile is requested before the first tables are built: the build
        // waits on the token's round trip, and behind it the weight's stream started late
        // (ptxas keeps this order where the tile's registers allow, e.g. u1 at 896 columns).
        let mut w = load_w(t0);
        // The kernel before, if this one is its dependent, has written the activations after
        // this (the weights, which no kernel writes, could load before it; NVVM sinks them).
        wait_prior_grid();
        build(t0, 0);
        sync();
        for i in 0..per / 2 - 1 {
            let t = t0 + 2 * i;
            let w1 = load_w(t + 1);
            build(t + 1, 1);
            step(t, 0, w, slot0);
            sync();
            let w2 = load_w(t + 2);
            build(t + 2, 0);
            step(t + 1, 1, w1, slot1);
            sync();
            w = w2;
        }
        // The last pair, peeled: nothing to load or build after it (a block of one or two
        // pairs would otherwise build a third or a fifth more tables; a branch in the loop
        // would expose the build's activation loads, perf note 37).
        let t = t0 + per - 2;
        let w1 = load_w(t + 1);
        build(t + 1, 1);
        step(t, 0, w, slot0);
        sync();
        step(t + 1, 1, w1, slot1);
        let total = sum(acc, 0);
        let lc = layout!(spatial(1, WARPS).local(1, R).replicated(ns).spatial(1, TG));
        store_tile(
            view::<f32>(total, lc),
            lc,
            layout!(spatial(threads)),
            bi,
            bj,
            bs,
            true,
        );
    }

    /// [`QMatmulMethod::DequantizeThenGemm`](crate::kernels::qmatmul::QMatmulMethod): the re-laid-out weight
    /// becomes a dense row-major `w [k, n]` of the activation type, which a GEMM then multiplies.
    ///
    /// One block per `[BK, BN]` weight tile, on the `WN` warps of one warp row of the fused
    /// kernel (its replicas along m hold the same weights): the tile's bytes are loaded straight
    /// into registers in the fused kernel's thread layout, reinterpreted as codes, cast, shifted by
    /// the zero points and scaled (per element: every weight is written out anyway), then staged
    /// through shared memory so that global stores are 16-byte rows (`ROWS` rows per pass) instead
    /// of the mma fragment's scattered pairs. Parameters as [`qmatmul_main`]'s.
    #[tilus::kernel(
        lazy,
        grid = [k / BK, n / BN],
        warps = WN,
        target = sm80,
        space(BN = [128], BK = [64], WN = [4], G = [0, 32, 128], ZEROS = [0, 1], H = [1, 4], VEC = [16], ROWS = [8]),
        dtypes(A = [f16, bf16], W = [u4, i8]),
    )]
    pub fn qmatmul_dequant<
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const G: i32,
        const ZEROS: i32,
        const H: i32,
        const VEC: i32,
        const ROWS: i32,
        A: DTypeParam,
        W: DTypeParam,
    >(
        n: i32,
        k: i32,
        b: Global<u8>,
        scales: Global<A>,
        zeros: Global<A>,
        w: GlobalMut<A>,
    ) {
        let rep_n = BN / (8 * WN);
        let rep_k = BK / 16;
        let grouped = G > 0;
        let gk = if grouped && G % BK != 0 { BK / G } else { 1 };
        let tile_bytes = BK * BN * W::BITS / 8;
        let thread_bytes = 4 * rep_k * rep_n * W::BITS / 8;
        let lb = layout!(spatial(1, WN).local(rep_k, rep_n).mma_b);
        let lq = layout!(swap_inner_locals(lb, 2, H));
        let lb3 = layout!(split(lb, 0, BK / gk));
        let lq3 = layout!(split(lq, 0, BK / gk));
        let ls = layout!(reduce(lb3, [1]));
        let lw = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        let rows = layout!(local(BK / ROWS, 1).spatial(ROWS, BN / 8).local(1, 8));

        let [bi, bj] = block_indices();
        let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
        let rw = load_global(gb, lw, [bi, bj, 0]);
        let mut wf = cast::<A>(view::<W>(rw, lq3), lb3);
        // Scales and zero points of the tile's groups, [gk, 1, BN] (per channel: one group).
        let groups = if grouped { k / G } else { 1 };
        let group_row = if grouped { bi * BK / G } else { 0 };
        if ZEROS == 1 {
            wf = wf
                - load_global(
                    view_global(zeros, [groups, 1, n]),
                    ls,
                    [group_row, 0, bj * BN],
                );
        }
        let ws = wf
            * load_global(
                view_global(scales, [groups, 1, n]),
                ls,
                [group_row, 0, bj * BN],
            );
        let tile = shared::<A>([BK, BN]);
        store_shared(view::<A>(ws, lb), tile, [0, 0]);
        sync();
        store_global(
            load_shared(tile, rows, [0, 0]),
            view_global(w, [k, n]),
            [bi * BK, bj * BN],
        );
    }

    /// The offline weight re-layout (paper Figure 8, generalized): one block per `[BK, BN]` tile of
    /// the row-major `W` codes `w [k, n]` (packed bytes, viewed as `W`) loads the tile in the codes
    /// layout of one warp row of [`qmatmul_main`] (or of [`qmatmul_gemv`]) and stores each thread's bits, unchanged, as the
    /// bytes that the matmul's `W` layout gives it: `out [k / BK, n / BN, tile bytes]`. `C` is
    /// the type the matmul's kernels read (`config::kernel_codes`): `W` itself, or for f3e1m1
    /// i3, each code converted by value.
    #[tilus::kernel(
        lazy,
        grid = [k / BK, n / BN],
        warps = WN,
        target = sm80,
        space(BN = [128], BK = [64], WN = [4], H = [1, 4], VEC = [16], GEMV = [0, 1, 2]),
        dtypes(W = [u2, u4, i8], C = [u2, u4, i8]),
    )]
    pub fn qmatmul_relayout<
        const BN: i32,
        const BK: i32,
        const WN: i32,
        const H: i32,
        const VEC: i32,
        const GEMV: i32,
        W: DTypeParam,
        C: DTypeParam,
    >(
        k: i32,
        n: i32,
        w: Global<u8>,
        out: GlobalMut<u8>,
    ) {
        let rep_k = BK / 16;
        // The re-laid tile holds `C` codes (`W`'s width wherever the host builds it).
        let tile_bytes = BK * BN * C::BITS / 8;
        let thread_bytes = tile_bytes / (32 * WN);
        // The weight tile of the matmul's warps: mma B fragments, with GEMV = 1 the A fragments
        // of `qmatmul_gemv`'s transposed product, with GEMV = 2 `qmatmul_gemv_wgmma`'s warpgroup
        // tiles of them.
        let lb = if GEMV == 1 {
            layout!(spatial(1, WN).column_local(rep_k, BN / (16 * WN)).mma_a_t)
        } else if GEMV == 2 {
            layout!(
                spatial(1, WN / 4)
                    .local(1, BN / (16 * WN))
                    .spatial(1, 4)
                    .local(rep_k, 1)
                    .mma_a_t
            )
        } else {
            layout!(spatial(1, WN).local(rep_k, BN / (8 * WN)).mma_b)
        };
        let lq = layout!(swap_inner_locals(lb, 2, H));
        let lw = layout!(local(thread_bytes / VEC).spatial(32 * WN).local(VEC));
        let [kt, nb] = block_indices();
        let tile = cast::<C>(load_global(
            view_global::<W>(w, [k, n]),
            lq,
            [kt * BK, nb * BN],
        ));
        let go = view_global(out, [k / BK, n / BN, tile_bytes]);
        store_global(view::<u8>(tile, lw), go, [kt, nb, 0]);
    }
}
