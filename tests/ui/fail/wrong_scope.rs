// load_global reads global memory, not a shared tile.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(a: Global<f16>) {
    let s = shared::<f16>([32, 32]);
    let r = load_global(s, layout!(local(1, 32).spatial(32, 1)), [0, 0]);
    print(r);
}

fn main() {}
