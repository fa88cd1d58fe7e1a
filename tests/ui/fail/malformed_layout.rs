#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m, 32]);
    let r = load_global(ga, layout!(local(2, 1).spatail(8, 4)), [0, 0]);
    let s = load_global(ga, layout!("local(2, 1).spatial(8, 4"), [0, 0]);
    let t = load_global(ga, layout!(local(2, 0).spatial(8, 4)), [0, 0]);
    print(r);
}

fn main() {}
