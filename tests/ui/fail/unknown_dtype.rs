#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(32)), [0]);
    let h = cast::<f17>(r);
    print(h);
}

fn main() {}
