#[tilus::kernel(grid = [cdiv(m, 32)], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let [bi] = block_indices();
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(32)), [bj * 32]);
    store_global(r, gaa, [0]);
}

fn main() {}
