//! The dense GEMM on the warpgroup MMA, written with `#[kernel]` (`docs/gemm.md`).
//!
//! `c[m, n] = a[m, k] · b[n, k]ᵀ` (the layout of a linear layer: `b` is the `[out, in]` weight),
//! f16 or bf16 in, f32 accumulation, f16/bf16 out. A block computes a `BM x BN` tile with
//! `BM / 64` warpgroups, each owning 64 rows and all `BN` columns of the accumulator
//! (`spatial(4, 1).local(1, BN / 8).mma_c` per warpgroup). `k` is walked in steps of 64 (one
//! 128-byte swizzled row of each operand): `cp.async` fills a ring of `STAGES` shared stages
//! ahead, and each step is one `dot` of two shared operands, i.e. `BM / 64 x 4` wgmma
//! `m64nBNk16` instructions per block. With `ASYNC = 1` the step's `dot_async` is left in flight
//! while the next step's copies and barrier go on (one step of wgmmas queued behind the other),
//! which costs one stage of look-ahead; with `ASYNC = 0` each `dot` completes before the copies. Out-of-range rows, columns and `k` are masked
//! by the views (zero-filled copies, masked stores), so any `m`, `n` and `k` run. Blocks are
//! ordered in groups of `GROUP` block rows (see the kernel) for L2 reuse.

macro_rules! gemm_kernels {
    ($t:ident, $gemm:ident) => {
        #[tilus::kernel(
                    grid = [cdiv(n, BN) * cdiv(m, BM)],
                    warps = BM / 16,
                    space(BM = [128, 64], BN = [256, 128], STAGES = [4, 3], GROUP = [8], ASYNC = [1, 0]),
                )]
        pub fn $gemm<const BM: i32, const BN: i32, const STAGES: i32, const GROUP: i32, const ASYNC: i32>(
            m: i32,
            n: i32,
            k: i32,
            a: Global<$t>,
            b: Global<$t>,
            c: GlobalMut<$t>,
        ) {
            // Tiles in groups of GROUP block rows (the prelude's `grouped_tile`): the blocks
            // resident at once share their rows of `a` and columns of `b` in L2.
            let [pid] = block_indices();
            let rows = cdiv(m, BM);
            let cols = cdiv(n, BN);
            let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
            let ga = view_global(a, [m, k]);
            let gb = view_global(b, [n, k]);
            let sa = shared::<$t>([STAGES, BM, 64], swizzle(3, 3, 3));
            let sb = shared::<$t>([STAGES, BN, 64], swizzle(3, 3, 3));
            let mut acc = register::<f32>(
                layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 8).mma_c),
                0.0,
            );
            let steps = cdiv(k, 64);
            // Steps loaded ahead: with ASYNC one stage more is still read by the wgmmas in
            // flight.
            let ahead = STAGES - 1 - ASYNC;
            for s in 0..ahead {
                copy_async(ga, slice_shared(sa, [s, 0, 0], [BM, 64]), [bi * BM, s * 64]);
                copy_async(gb, slice_shared(sb, [s, 0, 0], [BN, 64]), [bj * BN, s * 64]);
                commit_group();
            }
            for t in 0..steps {
                // Step t's copies are done, and every warpgroup retired the wgmmas of step
                // t - 1 - ASYNC, whose stage the copies below refill.
                wait_group(ahead - 1);
                sync();
                let st = t % STAGES;
                let ta = slice_shared(sa, [st, 0, 0], [BM, 64]);
                let tb = permute_shared(slice_shared(sb, [st, 0, 0], [BN, 64]), [1, 0]);
                if ASYNC == 1 {
                    // Step t queues behind step t - 1 on the tensor cores; waiting for t - 1
                    // only keeps them busy through the copies and the barrier.
                    acc = dot_async(ta, tb, acc);
                    dot_wait(1);
                } else {
                    acc = dot(ta, tb, acc);
                }
                let next = t + ahead;
                let ns = next % STAGES;
                copy_async(ga, slice_shared(sa, [ns, 0, 0], [BM, 64]), [bi * BM, next * 64]);
                copy_async(gb, slice_shared(sb, [ns, 0, 0], [BN, 64]), [bj * BN, next * 64]);
                commit_group();
            }
            if ASYNC == 1 {
                dot_wait(0);
            }
            store_global(cast::<$t>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
        }
    };
}

gemm_kernels!(f16, gemm_f16);
gemm_kernels!(bf16, gemm_bf16);

/// The dense GEMM fed by the copy engine: the same block tile, block order and wgmma steps as
/// the `cp.async` kernel above, with each stage's two tiles copied by one `tma_load` each
/// (issued by one thread, swizzled by the copy engine) and completing on the stage's
/// `mbarrier`, so no thread computes addresses or waits on copy groups; every thread waits on
/// the barrier of the stage it reads. A step queues its wgmmas behind the previous step's, then
/// the block synchronizes once (every warpgroup retired step t - 1) and refills that step's
/// stage, `STAGES - 1` steps ahead. Out-of-range rows, columns and `k` read as zero (the tensor
/// map's bounds), stores are masked, so any `m`, `n` and `k` whose rows are whole 16-byte
/// units run (tensor-map rows are multiples of 16 bytes: `k % 8 == 0` for 16-bit operands,
/// `k % 16 == 0` for 8-bit ones; the launcher refuses other `k`, naming the argument).
///
/// A stage is one 128-byte swizzled row of `k` per operand row: `BK` = 64 16-bit or 128 8-bit
/// elements, the swizzle's 16-byte chunks `2^SW` elements (`swizzle(3, SW, 3)`).
///
/// The arguments: the kernel's name, the parameters' element type, the operands' type (the
/// bytes reinterpreted: fp8 travels as `u8`), the accumulator's type and zero, the output's
/// type, `BK` and `SW`.
macro_rules! gemm_tma_kernels {
    ($gemm:ident, $pt:ident, $t:ident, $acc:ident, $zero:tt, $out:ident, $bk:tt, $sw:tt) => {
        #[tilus::kernel(
                            grid = [cdiv(n, BN) * cdiv(m, BM)],
                            warps = BM / 16,
                            space(BM = [128, 64], BN = [256, 128], STAGES = [4, 3], GROUP = [8]),
                        )]
        pub fn $gemm<const BM: i32, const BN: i32, const STAGES: i32, const GROUP: i32>(
            m: i32,
            n: i32,
            k: i32,
            a: Global<$pt>,
            b: Global<$pt>,
            c: GlobalMut<$out>,
        ) {
            let [pid] = block_indices();
            let rows = cdiv(m, BM);
            let cols = cdiv(n, BN);
            let (bi, bj) = grouped_tile(pid, rows, cols, GROUP);
            let ga = view_global::<$t>(a, [m, k]);
            let gb = view_global::<$t>(b, [n, k]);
            let sa = shared::<$t>([STAGES, BM, $bk], swizzle(3, $sw, 3));
            let sb = shared::<$t>([STAGES, BN, $bk], swizzle(3, $sw, 3));
            // One barrier per stage, whose phase completes when both tiles have landed.
            let full = mbarriers(STAGES, 2);
            let mut acc = register::<$acc>(
                layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 8).mma_c),
                $zero,
            );
            let steps = cdiv(k, $bk);
            for s in 0..STAGES - 1 {
                if s < steps {
                    tma_load(
                        ga,
                        slice_shared(sa, [s, 0, 0], [BM, $bk]),
                        [bi * BM, s * $bk],
                        full,
                        s,
                    );
                    tma_load(
                        gb,
                        slice_shared(sb, [s, 0, 0], [BN, $bk]),
                        [bj * BN, s * $bk],
                        full,
                        s,
                    );
                }
            }
            for t in 0..steps {
                let st = t % STAGES;
                // Stage st completes its (t / STAGES)-th phase with step t's tiles.
                mbarrier_wait(full, st, t / STAGES % 2);
                let ta = slice_shared(sa, [st, 0, 0], [BM, $bk]);
                let tb = permute_shared(slice_shared(sb, [st, 0, 0], [BN, $bk]), [1, 0]);
                acc = dot_async(ta, tb, acc);
                dot_wait(1);
                // Every warpgroup retired step t - 1: its stage can be refilled.
                sync();
                let next = t + STAGES - 1;
                if next < steps {
                    let ns = next % STAGES;
                    tma_load(
                        ga,
                        slice_shared(sa, [ns, 0, 0], [BM, $bk]),
                        [bi * BM, next * $bk],
                        full,
                        ns,
                    );
                    tma_load(
                        gb,
                        slice_shared(sb, [ns, 0, 0], [BN, $bk]),
                        [bj * BN, next * $bk],
                        full,
                        ns,
                    );
                }
            }
            dot_wait(0);
            store_global(cast::<$out>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
        }
    };
}

/// The copy-engine GEMM on `workers` persistent blocks, its epilogue stored by the copy engine.
///
/// The tiles, block order (`GROUP`) and ring of [`gemm_tma_f16`], with block
/// `w` taking tiles `w, w + workers, ...` (the blocks resident at once still hold consecutive
/// tiles, so the group order's L2 reuse is kept). A block walks its tiles' steps as one
/// sequence: the ring is refilled `STAGES - 1` steps ahead across tile boundaries, so the next
/// tile's first stages are in flight while a tile ends. A tile ends by waiting for its wgmmas,
/// writing the f16 (bf16) accumulator to a swizzled shared tile in boxes of 64 columns, and one
/// `tma_store` per box; the copy engine writes them to `c` while the tensor cores run the next
/// tile. Before writing the shared tile again the block waits for the copy engine to have read
/// what it held (`tma_store_wait`). With one block per tile, as in
/// [`gemm_tma_f16`], every block of a wave ends at once: its stores and the next wave's first
/// loads meet in memory while the tensor cores idle.
///
/// The accumulator is two column halves (two `m64n(BN/2)` wgmmas per 16 of `k`), so that half a
/// tile is staged at a time: `BM · BN / 2` halves beside a 4-stage ring (192 + 32 KB at 128 x
/// 256); the second half waits for the copy engine to have read the first.
///
/// `workers` blocks run (fewer than one: one); `ctx.device().multiprocessors` (one block a
/// multiprocessor fits) is the intended count, and any other is correct. Besides `k % 8 == 0` (the operands' tensor maps),
/// `n % 8 == 0`: the output's tensor-map rows are whole 16-byte units too (the launcher names
/// `c`).
macro_rules! gemm_persistent_kernels {
    ($gemm:ident, $t:ident) => {
        #[tilus::kernel(
                            grid = [max(workers, 1)],
                            warps = BM / 16,
                            space(BM = [128], BN = [256, 128], STAGES = [4, 3], GROUP = [8, 16]),
                        )]
        #[allow(clippy::too_many_arguments)]
        pub fn $gemm<const BM: i32, const BN: i32, const STAGES: i32, const GROUP: i32>(
            m: i32,
            n: i32,
            k: i32,
            workers: i32,
            a: Global<$t>,
            b: Global<$t>,
            c: GlobalMut<$t>,
        ) {
            let [pid] = block_indices();
            // Fewer than one worker runs as one (the grid's extent too): no count leaves `c`
            // unwritten.
            let workers = max(workers, 1);
            let rows = cdiv(m, BM);
            let cols = cdiv(n, BN);
            let steps = cdiv(k, 64);
            // This block's tiles: pid, pid + workers, ...
            let mine = cdiv(max(rows * cols - pid, 0), workers);
            let total = mine * steps;
            let ga = view_global::<$t>(a, [m, k]);
            let gb = view_global::<$t>(b, [n, k]);
            let gc = view_global(c, [m, n]);
            let sa = shared::<$t>([STAGES, BM, 64], swizzle(3, 3, 3));
            let sb = shared::<$t>([STAGES, BN, 64], swizzle(3, 3, 3));
            // Half a finished tile, box by box (128-byte rows, swizzled as the copy engine
            // reads them).
            let so = shared::<$t>([BN / 128, BM, 64], swizzle(3, 3, 3));
            let full = mbarriers(STAGES, 2);
            // The accumulator in two column halves, so that half a tile is staged at a time.
            let lh = layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 16).mma_c);
            // A half's registers as [box, row, column]: fragment column group j goes to box
            // j / 8.
            let lb = layout!(
                spatial(1, BM / 64, 1)
                    .local(BN / 128, 1, 1)
                    .spatial(1, 4, 1)
                    .local(1, 1, 8)
                    .mma_c
            );
            // The next fill's tile (bi, bj) and step of k: advanced step by step, the tile's
            // coordinates recomputed once per tile (a division chain per step would sit
            // between a step's wgmma and the next one's issue).
            let tiles = rows * cols;
            // A block past the last tile (more workers than tiles) has no steps; the tile
            // order's divisions need a tile, and an empty `c` has none.
            let mut i0 = 0;
            let mut j0 = 0;
            if pid < tiles {
                let (first_bi, first_bj) = grouped_tile(pid, rows, cols, GROUP);
                i0 = first_bi;
                j0 = first_bj;
            }
            let mut fill_tile = pid;
            let mut fill_bi = i0;
            let mut fill_bj = j0;
            let mut fill_k = 0;
            let fill = |s: i32| {
                let kk = fill_k * 64;
                tma_load(
                    ga,
                    slice_shared(sa, [s, 0, 0], [BM, 64]),
                    [fill_bi * BM, kk],
                    full,
                    s,
                );
                tma_load(
                    gb,
                    slice_shared(sb, [s, 0, 0], [BN, 64]),
                    [fill_bj * BN, kk],
                    full,
                    s,
                );
                fill_k += 1;
                if fill_k == steps {
                    fill_k = 0;
                    fill_tile += workers;
                    if fill_tile < tiles {
                        let (bi, bj) = grouped_tile(fill_tile, rows, cols, GROUP);
                        fill_bi = bi;
                        fill_bj = bj;
                    }
                }
            };
            // Stage a half of the tile at column `col` of `c` and store it box by box; the
            // previous half's boxes must have been read first.
            let store_half = |half: Tensor, row: i32, col: i32| {
                tma_store_wait();
                store_shared(view::<$t>(cast::<$t>(half), lb), so, [0, 0, 0]);
                #[unroll]
                for b in 0..BN / 128 {
                    tma_store(
                        slice_shared(so, [b, 0, 0], [BM, 64]),
                        gc,
                        [row, col + b * 64],
                    );
                }
            };
            for s in 0..STAGES - 1 {
                if s < total {
                    fill(s);
                }
            }
            // The tile the steps accumulate, and its step of k.
            let mut tile = pid;
            let mut bi = i0;
            let mut bj = j0;
            let mut kt = 0;
            let mut lo = register::<f32>(lh, 0.0);
            let mut hi = register::<f32>(lh, 0.0);
            for it in 0..total {
                let st = it % STAGES;
                mbarrier_wait(full, st, it / STAGES % 2);
                let ta = slice_shared(sa, [st, 0, 0], [BM, 64]);
                let tlo = permute_shared(slice_shared(sb, [st, 0, 0], [BN / 2, 64]), [1, 0]);
                let thi = permute_shared(slice_shared(sb, [st, BN / 2, 0], [BN / 2, 64]), [1, 0]);
                lo = dot_async(ta, tlo, lo);
                hi = dot_async(ta, thi, hi);
                dot_wait(2);
                // Every warpgroup retired step it - 1: its stage can be refilled.
                sync();
                let next = it + STAGES - 1;
                if next < total {
                    fill(next % STAGES);
                }
                kt += 1;
                if kt == steps {
                    dot_wait(0);
                    store_half(lo, bi * BM, bj * BN);
                    store_half(hi, bi * BM, bj * BN + BN / 2);
                    lo = register::<f32>(lh, 0.0);
                    hi = register::<f32>(lh, 0.0);
                    kt = 0;
                    tile += workers;
                    if tile < tiles {
                        let (ni, nj) = grouped_tile(tile, rows, cols, GROUP);
                        bi = ni;
                        bj = nj;
                    }
                }
            }
        }
    };
}

/// The persistent copy-engine GEMM with its warps specialized (`specialize!`): one warpgroup
/// fills the ring, the others multiply.
///
/// The tiles, tile order, ring and epilogue of [`gemm_persistent_f16`], split between two
/// roles that meet only at two barriers per stage. The *producer* (one warpgroup, its register
/// file shrunk to 40 per thread) waits until a stage is empty and has the copy engine fill it;
/// the *consumers* (`BM / 64` warpgroups, 232 registers each) wait until a stage is full, queue
/// its wgmmas, and hand back the stage of the step before once those have retired. No block
/// barrier sits between one step's wgmmas and the next: the consumers never wait for the
/// producer's refill, only for bytes, and the producer runs up to `STAGES` steps ahead,
/// across tile boundaries, while the consumers store a finished tile.
macro_rules! gemm_ws_kernels {
    ($gemm:ident, $t:ident) => {
        #[tilus::kernel(
                            grid = [max(workers, 1)],
                            warps = 4 + BM / 16,
                            space(BM = [128], BN = [256, 128], STAGES = [4, 3], GROUP = [8, 16]),
                        )]
        #[allow(clippy::too_many_arguments)]
        pub fn $gemm<const BM: i32, const BN: i32, const STAGES: i32, const GROUP: i32>(
            m: i32,
            n: i32,
            k: i32,
            workers: i32,
            a: Global<$t>,
            b: Global<$t>,
            c: GlobalMut<$t>,
        ) {
            let [pid] = block_indices();
            let workers = max(workers, 1);
            let rows = cdiv(m, BM);
            let cols = cdiv(n, BN);
            let tiles = rows * cols;
            let steps = cdiv(k, 64);
            // This block's tiles: pid, pid + workers, ...; their steps as one sequence.
            let total = cdiv(max(tiles - pid, 0), workers) * steps;
            let ga = view_global::<$t>(a, [m, k]);
            let gb = view_global::<$t>(b, [n, k]);
            let gc = view_global(c, [m, n]);
            let sa = shared::<$t>([STAGES, BM, 64], swizzle(3, 3, 3));
            let sb = shared::<$t>([STAGES, BN, 64], swizzle(3, 3, 3));
            let so = shared::<$t>([BN / 128, BM, 64], swizzle(3, 3, 3));
            // A stage is full when both copies have landed, empty when every consumer warp
            // has retired the wgmmas that read it.
            let full = mbarriers(STAGES, 2);
            let empty = mbarriers(STAGES, BM / 16);
            let mut i0 = 0;
            let mut j0 = 0;
            if pid < tiles {
                let (first_bi, first_bj) = grouped_tile(pid, rows, cols, GROUP);
                i0 = first_bi;
                j0 = first_bj;
            }
            specialize! {
                role(warps = 4, registers = 40) => {
                    let mut tile = pid;
                    let mut bi = i0;
                    let mut bj = j0;
                    let mut kt = 0;
                    for it in 0..total {
                        let s = it % STAGES;
                        if it >= STAGES {
                            // The consumers' (it / STAGES)-th hand-back of stage s.
                            mbarrier_wait(empty, s, (it / STAGES - 1) % 2);
                        }
                        tma_load(ga, slice_shared(sa, [s, 0, 0], [BM, 64]), [bi * BM, kt * 64], full, s);
                        tma_load(gb, slice_shared(sb, [s, 0, 0], [BN, 64]), [bj * BN, kt * 64], full, s);
                        kt += 1;
                        if kt == steps {
                            kt = 0;
                            tile += workers;
                            if tile < tiles {
                                let (ni, nj) = grouped_tile(tile, rows, cols, GROUP);
                                bi = ni;
                                bj = nj;
                            }
                        }
                    }
                }
                role(warps = BM / 16, registers = 232) => {
                    let lh = layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 16).mma_c);
                    let lb = layout!(
                        spatial(1, BM / 64, 1)
                            .local(BN / 128, 1, 1)
                            .spatial(1, 4, 1)
                            .local(1, 1, 8)
                            .mma_c
                    );
                    let store_half = |half: Tensor, row: i32, col: i32| {
                        tma_store_wait();
                        store_shared(view::<$t>(cast::<$t>(half), lb), so, [0, 0, 0]);
                        #[unroll]
                        for b in 0..BN / 128 {
                            tma_store(slice_shared(so, [b, 0, 0], [BM, 64]), gc, [row, col + b * 64]);
                        }
                    };
                    let mut tile = pid;
                    let mut bi = i0;
                    let mut bj = j0;
                    let mut kt = 0;
                    let mut lo = register::<f32>(lh, 0.0);
                    let mut hi = register::<f32>(lh, 0.0);
                    for it in 0..total {
                        let st = it % STAGES;
                        mbarrier_wait(full, st, it / STAGES % 2);
                        let ta = slice_shared(sa, [st, 0, 0], [BM, 64]);
                        let tlo = permute_shared(slice_shared(sb, [st, 0, 0], [BN / 2, 64]), [1, 0]);
                        let thi = permute_shared(slice_shared(sb, [st, BN / 2, 0], [BN / 2, 64]), [1, 0]);
                        lo = dot_async(ta, tlo, lo);
                        hi = dot_async(ta, thi, hi);
                        dot_wait(2);
                        // Step it - 1's wgmmas have retired: its stage goes back.
                        if it > 0 {
                            mbarrier_arrive(empty, (it - 1) % STAGES);
                        }
                        kt += 1;
                        if kt == steps {
                            dot_wait(0);
                            store_half(lo, bi * BM, bj * BN);
                            store_half(hi, bi * BM, bj * BN + BN / 2);
                            lo = register::<f32>(lh, 0.0);
                            hi = register::<f32>(lh, 0.0);
                            kt = 0;
                            tile += workers;
                            if tile < tiles {
                                let (ni, nj) = grouped_tile(tile, rows, cols, GROUP);
                                bi = ni;
                                bj = nj;
                            }
                        }
                    }
                }
            }
        }
    };
}

gemm_persistent_kernels!(gemm_persistent_f16, f16);
gemm_ws_kernels!(gemm_ws_f16, f16);
gemm_ws_kernels!(gemm_ws_bf16, bf16);
gemm_persistent_kernels!(gemm_persistent_bf16, bf16);

gemm_tma_kernels!(gemm_tma_f16, f16, f16, f32, 0.0, f16, 64, 3);
gemm_tma_kernels!(gemm_tma_bf16, bf16, bf16, f32, 0.0, bf16, 64, 3);
// `c = a · bᵀ` exactly in i32 (torch's `_int_mm`).
gemm_tma_kernels!(gemm_tma_i8, i8, i8, i32, 0, i32, 128, 4);
// OCP fp8 operands (as bytes), f32 accumulation, f16 out.
gemm_tma_kernels!(gemm_tma_e4m3, u8, f8e4m3, f32, 0.0, f16, 128, 4);
gemm_tma_kernels!(gemm_tma_e5m2, u8, f8e5m2, f32, 0.0, f16, 128, 4);
