#[tilus::kernel(grid = [1], wraps = 4, blocks = 2)]
fn k(a: Global<f32>) {
    sync();
}

fn main() {}
