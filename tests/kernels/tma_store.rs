// The copy engine's store (`tma_store`), shared by `tests/gemm.rs` (interpreter), `tests/gpu_gemm.rs`
// (the GPU against the interpreter) and `tests/codegen_cuda.rs` (NVRTC, ptxas, SASS). Included
// with `#[path]`.
//
// Block (bi, bj) loads the `[16, 64]` tile of `x [m, n]` at `[16 bi, 64 bj]`, stores it to a
// shared tile and copies that to `y` with `tma_store`, waits for the copy engine to have read it
// (`tma_store_wait`), then writes twice the tile into the same shared tile and copies it to `z`,
// and ends without waiting (the generated code drains before the block exits). Tiles past `m`
// or `n` are cut by the view: nothing outside it is written. `tma_store_plain` has an
// unswizzled shared tile, `tma_store_swizzled` the 128-byte swizzle; `tma_store_unwaited`
// leaves out the wait, which the interpreter reports.

macro_rules! tma_store_kernel {
    ($name:ident, $wait:literal, $load:expr, $($swizzle:tt)*) => {
        #[tilus::kernel(grid = [cdiv(m, 16), cdiv(n, 64)], warps = 4, space(WAIT = [$wait]))]
        pub fn $name<const WAIT: i32>(
            m: i32,
            n: i32,
            x: Global<f16>,
            y: GlobalMut<f16>,
            z: GlobalMut<f16>,
        ) {
            let [bi, bj] = block_indices();
            let t = load_global(
                view_global(x, [m, n]),
                $load,
                [bi * 16, bj * 64],
            );
            let s = shared::<f16>([16, 64] $($swizzle)*);
            store_shared(t, s, [0, 0]);
            tma_store(s, view_global(y, [m, n]), [bi * 16, bj * 64]);
            if WAIT == 1 {
                tma_store_wait();
            }
            store_shared(t + t, s, [0, 0]);
            tma_store(s, view_global(z, [m, n]), [bi * 16, bj * 64]);
        }
    };
}

// The plain kernel loads columns 8 apart (no vector loads, so no assumption on `n`: the
// tensor map's rule is the one a bad `n` meets), the others 16-byte vectors.
tma_store_kernel!(tma_store_plain, 1, layout!(local(1, 8).spatial(16, 8)),);
tma_store_kernel!(tma_store_swizzled, 1, layout!(spatial(16, 8).local(1, 8)), , swizzle(3, 3, 3));
tma_store_kernel!(tma_store_unwaited, 0, layout!(spatial(16, 8).local(1, 8)),);
