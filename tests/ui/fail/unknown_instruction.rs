#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m]);
    let r = lod_global(ga, layout!(spatial(32)), [0]);
    frobnicate(r);
}

fn main() {}
