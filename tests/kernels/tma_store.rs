// The copy engine's store (`tma_store`), shared by `tests/gemm.rs` (interpreter), `tests/gpu_gemm.rs`
// (the GPU against the interpreter) and `tests/codegen_cuda.rs` (NVRTC, ptxas, SASS). Included
// with `#[path]`.
//
// Block (bi, bj) loads the `[16, 64]` tile of `x [m, n]` at `[16 bi, 64 bj]`, stores it to a
// shared tile and copies that to `y` with `tma_store`, then writes twice the tile into the same
// shared tile and copies it to `z`: the second write is correct only if the first store had read
// its source first. Tiles past `m` or `n` are cut by the view: nothing outside it is written.
// `tma_store_plain` has an unswizzled shared tile, `tma_store_swizzled` the 128-byte swizzle.

macro_rules! tma_store_kernel {
    ($name:ident, $($swizzle:tt)*) => {
        #[tilus::kernel(grid = [cdiv(m, 16), cdiv(n, 64)], warps = 4)]
        pub fn $name(m: i32, n: i32, x: Global<f16>, y: GlobalMut<f16>, z: GlobalMut<f16>) {
            let [bi, bj] = block_indices();
            let t = load_global(
                view_global(x, [m, n]),
                layout!(spatial(16, 8).local(1, 8)),
                [bi * 16, bj * 64],
            );
            let s = shared::<f16>([16, 64] $($swizzle)*);
            store_shared(t, s, [0, 0]);
            tma_store(s, view_global(y, [m, n]), [bi * 16, bj * 64]);
            store_shared(t + t, s, [0, 0]);
            tma_store(s, view_global(z, [m, n]), [bi * 16, bj * 64]);
        }
    };
}

tma_store_kernel!(tma_store_plain,);
tma_store_kernel!(tma_store_swizzled, , swizzle(3, 3, 3));
