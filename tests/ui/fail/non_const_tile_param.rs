#[tilus::kernel(grid = [1], warps = 1, space(BM = [16, 32], BN = [64]))]
fn k<BM, const BN: usize>(a: Global<f32>) {
    sync();
}

fn main() {}
