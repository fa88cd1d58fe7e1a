#[tilus::kernel(grid = [cdiv(m, 32), block_indices()], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let [bi, bj] = block_indices();
    sync();
}

fn main() {}
