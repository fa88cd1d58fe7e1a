// scatter_rows: the dimension is a constant, the destination a mutable view of rank 2, and the
// value in gather_rows's layout for the index; each error points at the user's tokens.
#[tilus::kernel(grid = [1], warps = 1)]
fn run_time_dim(d: i32, a: GlobalMut<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let v = register::<f16>(layout!(spatial(32).local(4)), 1.0);
    scatter_rows(v, view_global(a, [64, 4]), ix, d);
}

#[tilus::kernel(grid = [1], warps = 1)]
fn parameter_destination(a: GlobalMut<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let v = register::<f16>(layout!(spatial(32).local(4)), 1.0);
    scatter_rows(v, a, ix, 0);
}

#[tilus::kernel(grid = [1], warps = 1)]
fn read_only_and_wrong_layout(a: Global<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let v = register::<f16>(layout!(spatial(32).local(4)), 1.0);
    scatter_rows(v, view_global(a, [64, 4]), ix, 0);
    let book = shared::<f16>([64, 4]);
    let w = register::<f16>(layout!(local(4).spatial(32)), 1.0);
    scatter_rows(w, book, ix, 0);
}

fn main() {}
