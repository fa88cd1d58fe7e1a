// a is [16, 16], b is [32, 8]: the inner dimensions differ.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(c: GlobalMut<f32>) {
    let a = register::<f16>(layout!(column_local(2, 2).spatial(8, 4).local(1, 2)), 1.0);
    let b = register::<f16>(layout!(local(4, 1).column_spatial(4, 8).local(2, 1)), 1.0);
    let mut acc = register::<f32>(layout!(local(2, 1).spatial(8, 4).local(1, 2)), 0.0);
    acc = dot(a, b, acc);
    store_global(acc, view_global(c, [16, 8]), [0, 0]);
}

fn main() {}
