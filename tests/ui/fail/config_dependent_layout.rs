// BM / 32 is 0 when BM = 16: only that configuration fails.
#[tilus::kernel(grid = [cdiv(m, BM)], warps = 1, space(BM = [16, 32, 64], BK = [8, 16]))]
fn k<const BM: i32, const BK: i32>(m: i32, a: Global<f32>) {
    let [bi] = block_indices();
    let ga = view_global(a, [m, BK]);
    let r = load_global(ga, layout!(local(BM / 32, BK).spatial(32, 1)), [bi * BM, 0]);
    print(r);
}

fn main() {}
