// A tile parameter far beyond the register file: rejected with the limit at once, instead of
// building a layout table of 2^30 cells inside rustc.
#[tilus::kernel(grid = [cdiv(m, BM)], warps = 4, space(BM = [16, 1073741824]))]
fn k<const BM: i32>(m: i32, a: Global<f32>) {
    let [bi] = block_indices();
    let ga = view_global(a, [m, 64]);
    let r = load_global(ga, layout!(local(BM / 16, 1).spatial(16, 8).local(1, 8)), [bi * BM, 0]);
    print(r);
}

fn main() {}
