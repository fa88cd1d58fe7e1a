#[tilus::kernel(grid = [1], warps = 1, space(BM = [], BN = [64]))]
fn k<const BM: i32, const BN: i32>(a: Global<f32>) {
    sync();
}

fn main() {}
