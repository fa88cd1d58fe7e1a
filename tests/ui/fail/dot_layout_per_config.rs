// With BK = 32 the A tile is [16, 32] but B is [16, 8]: only that configuration fails.
#[tilus::kernel(grid = [1], warps = 1, space(BK = [16, 32], STAGES = [2, 3]))]
fn k<const BK: i32, const STAGES: i32>(c: GlobalMut<f32>) {
    let a = register::<f16>(layout!(local(1, BK / 16).column_local(2, 2).spatial(8, 4).local(1, 2)), 1.0);
    let b = register::<f16>(layout!(local(2, 1).column_spatial(4, 8).local(2, 1)), 1.0);
    let mut acc = register::<f32>(layout!(local(2, 1).spatial(8, 4).local(1, 2)), 0.0);
    acc = dot(a, b, acc);
    store_global(acc, view_global(c, [16, 8]), [0, 0]);
}

fn main() {}
