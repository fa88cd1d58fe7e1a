//! The dense GEMM on the warpgroup MMA, written with `#[kernel]` (`docs/gemm.md`).
//!
//! `c[m, n] = a[m, k] · b[n, k]ᵀ` (the layout of a linear layer: `b` is the `[out, in]` weight),
//! f16 or bf16 in, f32 accumulation, f16/bf16 out. A block computes a `BM x BN` tile with
//! `BM / 64` warpgroups, each owning 64 rows and all `BN` columns of the accumulator
//! (`spatial(4, 1).local(1, BN / 8).mma_c` per warpgroup). `k` is walked in steps of 64 (one
//! 128-byte swizzled row of each operand): `cp.async` fills a ring of `STAGES` shared stages
//! `STAGES - 1` steps ahead, and each step is one `dot` of two shared operands, i.e.
//! `BM / 64 x 4` wgmma `m64nBNk16` instructions. Out-of-range rows, columns and `k` are masked
//! by the views (zero-filled copies, masked stores), so any `m`, `n` and `k` run.

macro_rules! gemm_kernels {
    ($t:ident, $gemm:ident) => {
        #[tilus::kernel(
                    grid = [cdiv(n, BN), cdiv(m, BM)],
                    warps = BM / 16,
                    space(BM = [128, 64], BN = [256, 128], STAGES = [4, 3]),
                )]
        pub fn $gemm<const BM: i32, const BN: i32, const STAGES: i32>(
            m: i32,
            n: i32,
            k: i32,
            a: Global<$t>,
            b: Global<$t>,
            c: GlobalMut<$t>,
        ) {
            let [bj, bi] = block_indices();
            let ga = view_global(a, [m, k]);
            let gb = view_global(b, [n, k]);
            let sa = shared::<$t>([STAGES, BM, 64], swizzle(3, 3, 3));
            let sb = shared::<$t>([STAGES, BN, 64], swizzle(3, 3, 3));
            let mut acc = register::<f32>(
                layout!(spatial(BM / 64, 1).spatial(4, 1).local(1, BN / 8).mma_c),
                0.0,
            );
            let steps = cdiv(k, 64);
            for s in 0..STAGES - 1 {
                copy_async(ga, slice_shared(sa, [s, 0, 0], [BM, 64]), [bi * BM, s * 64]);
                copy_async(gb, slice_shared(sb, [s, 0, 0], [BN, 64]), [bj * BN, s * 64]);
                commit_group();
            }
            for t in 0..steps {
                // Step t's copies are done; every warpgroup finished step t - 1, whose stage
                // the copies below refill.
                wait_group(STAGES - 2);
                sync();
                let st = t % STAGES;
                let ta = slice_shared(sa, [st, 0, 0], [BM, 64]);
                let tb = permute_shared(slice_shared(sb, [st, 0, 0], [BN, 64]), [1, 0]);
                acc = dot(ta, tb, acc);
                let next = t + STAGES - 1;
                let ns = next % STAGES;
                copy_async(
                    ga,
                    slice_shared(sa, [ns, 0, 0], [BM, 64]),
                    [bi * BM, next * 64],
                );
                copy_async(
                    gb,
                    slice_shared(sb, [ns, 0, 0], [BN, 64]),
                    [bj * BN, next * 64],
                );
                commit_group();
            }
            store_global(cast::<$t>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
        }
    };
}

gemm_kernels!(f16, gemm_f16);
gemm_kernels!(bf16, gemm_bf16);
