// Storing into a view of a read-only `Global` parameter.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(m: i32, a: Global<f32>) {
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(32)), [0]);
    store_global(r, ga, [0]);
}

fn main() {}
