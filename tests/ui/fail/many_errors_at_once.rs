// Every problem is reported in one build: attribute, signature and body.
#[tilus::kernel(grid = [m / 32], warps = 1, target = sm75, space(BM = [32]))]
fn k<const BM: i32>(m: i32, a: Global<f32>, b: Vec<f32>) {
    let ga = view_global(a, [m]);
    let r = load_global(ga, layout!(spatial(BM)), [0]);
    let s = cast::<i33>(r);
    let t = r + missing;
    store_global(r, ga);
}

fn main() {}
