#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(32)));
    let x = register::<f32>();
    sync(1);
}

fn main() {}
