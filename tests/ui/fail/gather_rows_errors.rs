// gather_rows: the dimension is a constant, the source a view of rank 2, and `dim` a dimension
// of the index; each error points at the user's tokens.
#[tilus::kernel(grid = [1], warps = 1)]
fn run_time_dim(d: i32, a: Global<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let r = gather_rows(view_global(a, [64, 4]), ix, d);
    print(r);
}

#[tilus::kernel(grid = [1], warps = 1)]
fn parameter_source(a: Global<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let r = gather_rows(a, ix, 0);
    print(r);
}

#[tilus::kernel(grid = [1], warps = 1)]
fn flat_table_and_bad_dim(a: Global<f16>, i: Global<i32>) {
    let ix = load_global(view_global(i, [32]), layout!(spatial(32)), [0]);
    let flat = gather_rows(view_global(a, [256]), ix, 0);
    let book = shared::<f16>([64, 4]);
    let r = gather_rows(book, ix, 1);
    print(flat);
    print(r);
}

fn main() {}
