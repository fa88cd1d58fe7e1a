// plane_dot sums the words each thread holds: words spread over the lanes are refused.
#[tilus::kernel(grid = [1], warps = 1)]
fn k(w: Global<u32>, y: GlobalMut<i32>) {
    let gw = view_global(w, [2, 32]);
    let t = load_global(gw, layout!(local(2, 1).spatial(1, 32)), [0, 0]);
    store_global(plane_dot(t, t, 1), view_global(y, [1, 1]), [0, 0]);
}

fn main() {}
