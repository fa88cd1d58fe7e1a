//! A programmatic dependent launch's two sides, shared by the CPU (`grid_dependency`) and GPU
//! (`macro_gpu`) tests: a producer that lets its dependent start at once and then runs long,
//! and a consumer that reads an input the producer does not write before `wait_prior_grid()`
//! and the producer's output after it.

/// `y = f^iters(x)` with `f(v) = v / 2 + 1` (exact in f32 whether or not it is fused: halving
/// is exact), after `launch_dependents()`: the dependent may start while these blocks run.
#[tilus::kernel(grid = [cdiv(n, T)], warps = 4, space(T = [128]))]
pub fn pdl_produce<const T: i32>(n: i32, iters: i32, x: Global<f32>, y: GlobalMut<f32>) {
    launch_dependents();
    let [b] = block_indices();
    let lay = layout!(spatial(T));
    let mut v = load_global(view_global(x, [n]), lay, [b * T]);
    for _ in 0..iters {
        v = v * 0.5 + 1.0;
    }
    store_global(v, view_global(y, [n]), [b * T]);
}

/// `z = w + y`: `w` (which the producer does not write) is loaded before the wait, `y` (the
/// producer's output) after it.
#[tilus::kernel(grid = [cdiv(n, T)], warps = 4, space(T = [128]))]
pub fn pdl_consume<const T: i32>(n: i32, w: Global<f32>, y: Global<f32>, z: GlobalMut<f32>) {
    let [b] = block_indices();
    let lay = layout!(spatial(T));
    let a = load_global(view_global(w, [n]), lay, [b * T]);
    wait_prior_grid();
    let c = load_global(view_global(y, [n]), lay, [b * T]);
    store_global(a + c, view_global(z, [n]), [b * T]);
}

/// `z = w + y` without the wait: the launcher must refuse to launch it as a dependent.
#[tilus::kernel(grid = [cdiv(n, T)], warps = 4, space(T = [128]))]
pub fn pdl_unsynced<const T: i32>(n: i32, w: Global<f32>, y: Global<f32>, z: GlobalMut<f32>) {
    let [b] = block_indices();
    let lay = layout!(spatial(T));
    let a = load_global(view_global(w, [n]), lay, [b * T]);
    let c = load_global(view_global(y, [n]), lay, [b * T]);
    store_global(a + c, view_global(z, [n]), [b * T]);
}

/// The producer's value of one element, computed as the kernel does (f32).
pub fn produce_ref(x: f32, iters: i32) -> f32 {
    (0..iters).fold(x, |v, _| v * 0.5 + 1.0)
}
