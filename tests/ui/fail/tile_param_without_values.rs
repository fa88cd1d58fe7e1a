#[tilus::kernel(grid = [1], warps = 1, space(BM = [16], BX = [2]))]
fn k<const BM: i32, const BK: i32>(a: Global<f32>) {
    sync();
}

fn main() {}
