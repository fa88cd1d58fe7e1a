// Arguments of the generated functions are typed: f32 data for an f16 parameter, a shared
// slice for a mutable one, and a missing argument are Rust type errors.
#[tilus::kernel(grid = [1], warps = 1)]
pub fn k(n: i32, a: Global<f16>, c: GlobalMut<f16>) {
    let r = load_global(view_global(a, [n]), layout!(spatial(32)), [0]);
    store_global(r, view_global(c, [n]), [0]);
}

fn main() {
    let cfg = k::SPACE[0];
    let a = vec![0.0f32; 32];
    let c = vec![tilus::prelude::f16::ZERO; 32];
    let _ = k::interpret(&cfg, 32, &a, &mut vec![]);
    let _ = k::interpret(&cfg, 32, &[], &c);
    let _ = k::interpret(&cfg, 32, &[]);
}
