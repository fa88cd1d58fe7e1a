// The view has rank 2, the offset rank 1.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m, 32]);
    let r = load_global(ga, layout!(spatial(1, 32)), [0]);
    print(r);
}

fn main() {}
