#[tilus::kernel(grid = [1], warps = 1, space(BM = [16]))]
fn k<const BM: i32>(n: i32, c: GlobalMut<f32>) {
    let i = n * 2;
    i = i + 1;
    BM = 3;
    let acc = register::<f32>(layout!(spatial(32)), 0.0);
    acc = acc + 1.0;
    store_global(acc, view_global(c, [n]), [0]);
}

fn main() {}
