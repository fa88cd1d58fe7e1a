// A register layout spread over more threads than the block has.
#[tilus::kernel(grid = [m / 16], warps = 1, space(BM = [16]))]
fn k<const BM: i32>(m: i32, a: Global<f32>) {
    let [bi] = block_indices();
    let ga = view_global(a, [m, 16]);
    let r = load_global(ga, layout!(spatial(BM, 16)), [bi * BM, 0]);
    print(r);
}

fn main() {}
