// The RS form of the warpgroup MMA (`a` in registers, `b` in shared memory), shared by
// `tests/gemm.rs` (interpreter against f64), `tests/gpu_gemm.rs` (the GPU against both) and
// `tests/codegen_cuda.rs` (NVRTC, ptxas, SASS). Included with `#[path]`.
//
// `c = c0 + 2 w · xᵀ` for one `[128, 64]` tile `w` (the weight of the transposed product,
// Machete-style) and one `[128, 64]` tile `x`: `w` is loaded from global memory straight into
// the wgmma A layout, `x` is copied into a swizzled shared tile and passed k-major through
// `permute_shared`, and the same `w` feeds two wgmma groups in a row. `WG` warpgroups split the
// 128 rows (with `WG = 1` one warpgroup owns both 64-row blocks); `ASYNC = 1` issues the two
// groups with `dot_async` and retires them with one `dot_wait(0)`, `ASYNC = 0` uses two `dot`s.

macro_rules! wgmma_rs_kernel {
    ($t:ident, $name:ident) => {
        #[tilus::kernel(grid = [1], warps = WG * 4, space(WG = [2, 1], ASYNC = [1, 0]))]
        pub fn $name<const WG: i32, const ASYNC: i32>(
            w: Global<$t>,
            x: Global<$t>,
            c0: Global<f32>,
            c: GlobalMut<f32>,
        ) {
            let ra = load_global(
                view_global(w, [128, 64]),
                layout!(
                    spatial(WG, 1)
                        .local(2 / WG, 1)
                        .spatial(4, 1)
                        .local(1, 4)
                        .mma_a
                ),
                [0, 0],
            );
            let sx = shared::<$t>([128, 64], swizzle(3, 3, 3));
            copy_async(view_global(x, [128, 64]), sx, [0, 0]);
            commit_group();
            wait_group(0);
            sync();
            let mut acc = load_global(
                view_global(c0, [128, 128]),
                layout!(
                    spatial(WG, 1)
                        .local(2 / WG, 1)
                        .spatial(4, 1)
                        .local(1, 16)
                        .mma_c
                ),
                [0, 0],
            );
            if ASYNC == 1 {
                acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
                acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
                dot_wait(0);
            } else {
                acc = dot(ra, permute_shared(sx, [1, 0]), acc);
                acc = dot(ra, permute_shared(sx, [1, 0]), acc);
            }
            store_global(acc, view_global(c, [128, 128]), [0, 0]);
        }
    };
}

wgmma_rs_kernel!(f16, wgmma_rs_f16);
wgmma_rs_kernel!(bf16, wgmma_rs_bf16);

// Four warpgroups in 2 x 2 over `c` (each `[64, 64]`): the two of a row block hold replicas of
// its `w` rows, and the wgmma of each reads its own half of `x`.
#[tilus::kernel(grid = [1], warps = 16, space(ASYNC = [1, 0]))]
pub fn wgmma_rs_split_n<const ASYNC: i32>(
    w: Global<f16>,
    x: Global<f16>,
    c0: Global<f32>,
    c: GlobalMut<f32>,
) {
    let ra = load_global(
        view_global(w, [128, 64]),
        layout!(spatial(2, 1).replicated(2).spatial(4, 1).local(1, 4).mma_a),
        [0, 0],
    );
    let sx = shared::<f16>([128, 64], swizzle(3, 3, 3));
    copy_async(view_global(x, [128, 64]), sx, [0, 0]);
    commit_group();
    wait_group(0);
    sync();
    let mut acc = load_global(
        view_global(c0, [128, 128]),
        layout!(spatial(2, 2).spatial(4, 1).local(1, 8).mma_c),
        [0, 0],
    );
    if ASYNC == 1 {
        acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
        acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
        dot_wait(0);
    } else {
        acc = dot(ra, permute_shared(sx, [1, 0]), acc);
        acc = dot(ra, permute_shared(sx, [1, 0]), acc);
    }
    store_global(acc, view_global(c, [128, 128]), [0, 0]);
}

/// `c0 + 2 w · xᵀ` in f64 (`w`, `x` row-major `[128, 64]`, `c0` `[128, 128]`).
pub fn wgmma_rs_reference(w: &[f64], x: &[f64], c0: &[f64]) -> Vec<f64> {
    let mut c = c0.to_vec();
    for i in 0..128 {
        for j in 0..128 {
            let dot: f64 = (0..64).map(|kk| w[i * 64 + kk] * x[j * 64 + kk]).sum();
            c[i * 128 + j] += 2.0 * dot;
        }
    }
    c
}

// 8-bit integers of both signednesses on the RS form: `c = c0 + 2 w · xᵀ` for `w` u8 (a weight
// code, in the 8-bit A fragment `mma_a_f8`, `k / 32` steps) and `x` i8 (k-major, the 8-bit
// 128-byte swizzle), both `[128, 128]`, exact in i32. `ZERO = 1` starts the second sum from a
// fresh zero tile (the code generator's `scale-d = 0` form) and adds `c0` after it.
#[tilus::kernel(grid = [1], warps = WG * 4, space(WG = [2, 1], ZERO = [0, 1]))]
pub fn wgmma_rs_u8s8<const WG: i32, const ZERO: i32>(
    w: Global<u8>,
    x: Global<i8>,
    c0: Global<i32>,
    c: GlobalMut<i32>,
) {
    let ra = load_global(
        view_global(w, [128, 128]),
        layout!(
            spatial(WG, 1)
                .local(2 / WG, 1)
                .spatial(4, 1)
                .local(1, 4)
                .mma_a_f8
        ),
        [0, 0],
    );
    let sx = shared::<i8>([128, 128], swizzle(3, 4, 3));
    copy_async(view_global(x, [128, 128]), sx, [0, 0]);
    commit_group();
    wait_group(0);
    sync();
    let lc = layout!(
        spatial(WG, 1)
            .local(2 / WG, 1)
            .spatial(4, 1)
            .local(1, 16)
            .mma_c
    );
    let mut acc = load_global(view_global(c0, [128, 128]), lc, [0, 0]);
    if ZERO == 1 {
        let zero = register::<i32>(lc, 0);
        let mut sum = dot_async(ra, permute_shared(sx, [1, 0]), zero);
        sum = dot_async(ra, permute_shared(sx, [1, 0]), sum);
        dot_wait(0);
        acc = acc + sum;
    } else {
        acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
        acc = dot_async(ra, permute_shared(sx, [1, 0]), acc);
        dot_wait(0);
    }
    store_global(acc, view_global(c, [128, 128]), [0, 0]);
}

/// `c0 + 2 w · xᵀ` in i64 (`w`, `x` row-major `[128, 128]`, `c0` `[128, 128]`).
pub fn wgmma_rs_u8s8_reference(w: &[u8], x: &[i8], c0: &[i32]) -> Vec<i32> {
    let mut c = c0.to_vec();
    for i in 0..128 {
        for j in 0..128 {
            let dot: i64 = (0..128)
                .map(|kk| w[i * 128 + kk] as i64 * x[j * 128 + kk] as i64)
                .sum();
            c[i * 128 + j] = (c0[i * 128 + j] as i64 + 2 * dot) as i32;
        }
    }
    c
}
