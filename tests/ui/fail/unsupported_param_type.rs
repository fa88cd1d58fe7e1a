#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: u64, a: &[f32], b: Global<i6>, c: GlobalMut<f64>, d: Global) {
    sync();
}

fn main() {}
