#[tilus::kernel(warps = 1)]
fn k(a: Global<f32>) {
    sync();
}

fn main() {}
