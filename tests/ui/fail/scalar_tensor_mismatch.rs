#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(32)), [0]);
    let bad = m - r;
    let cond = if r { 1 } else { 2 };
    for i in 0..r {
        sync();
    }
}

fn main() {}
