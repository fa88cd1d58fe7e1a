//! Kernels that exercise the one launch path: a hidden workspace, and 16-byte vector accesses
//! whose alignment and divisibility assumptions the launcher must check. Shared by the CPU
//! (`macro_basic`) and GPU (`macro_gpu`) tests.

/// `y = (x + w + 1)^2` where `w` is a scratch global tensor the launcher allocates and zeroes:
/// the block first reads `w` (zeros), writes `x + 1` into it, and reads it back.
#[tilus::kernel(grid = [cdiv(n, T)], warps = 4, space(T = [128]))]
pub fn scratch<const T: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [b] = block_indices();
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    let w = allocate_global::<f32>([n]);
    let lay = layout!(spatial(T));
    let zero = load_global(w, lay, [b * T]);
    let r = load_global(gx, lay, [b * T]);
    store_global(add(add(r, zero), 1.0), w, [b * T]);
    sync();
    let back = load_global(w, lay, [b * T]);
    store_global(mul(back, back), gy, [b * T]);
}

/// A row copy of an `[m, k]` f16 matrix, `K` columns per block, 8 halves (16 bytes) per
/// thread and access: the generated code assumes `k % 8 == 0` and 16-byte aligned pointers.
#[tilus::kernel(grid = [m, cdiv(k, K)], warps = 1, space(K = [256]))]
pub fn copy_rows<const K: i32>(m: i32, k: i32, a: Global<f16>, b: GlobalMut<f16>) {
    let [i, j] = block_indices();
    let ga = view_global(a, [m, k]);
    let gb = view_global(b, [m, k]);
    let r = load_global(ga, layout!(spatial(1, 32).local(1, 8)), [i, j * K]);
    store_global(r, gb, [i, j * K]);
}

/// Stores a 32-byte tile at the far end of a `[a, b, c]` u8 view (as `[65536, 1, 65536]` the
/// view has 2^32 elements: its offsets need 64 bits).
#[tilus::kernel(grid = [1], warps = 1)]
pub fn far_store(a: i32, b: i32, c: i32, src: Global<u8>, big: GlobalMut<u8>) {
    let tile = layout!(spatial(1, 1, 32));
    let t = load_global(view_global(src, [1, 1, 32]), tile, [0, 0, 0]);
    store_global(t, view_global(big, [a, b, c]), [a - 1, b - 1, c - 32]);
}

/// Loads the same far tile back.
#[tilus::kernel(grid = [1], warps = 1)]
pub fn far_load(a: i32, b: i32, c: i32, big: Global<u8>, out: GlobalMut<u8>) {
    let tile = layout!(spatial(1, 1, 32));
    let t = load_global(view_global(big, [a, b, c]), tile, [a - 1, b - 1, c - 32]);
    store_global(t, view_global(out, [1, 1, 32]), [0, 0, 0]);
}

/// Loads the 32 bytes at flat element `at` (an `i64`: past 2^31 in a 4 GiB buffer) of a
/// `[rows, cols]` u8 view, addressed with `i64` offsets `[at / cols, at % cols]`.
#[tilus::kernel(grid = [1], warps = 1)]
pub fn far_load_at(rows: i32, cols: i32, at: i64, big: Global<u8>, out: GlobalMut<u8>) {
    let tile = layout!(spatial(1, 32));
    let t = load_global(view_global(big, [rows, cols]), tile, [at / cols, at % cols]);
    store_global(t, view_global(out, [1, 32]), [0, 0]);
}
