// The kernel has an error; code using its generated API still type-checks, so this is the
// only error reported.
#[tilus::kernel(grid = [1], warps = 1, space(BM = [16, 32]))]
pub fn k<const BM: i32>(n: i32, a: Global<f16>, c: GlobalMut<f16>) {
    let r = load_global(view_global(a, [n]), layout!(spatial(BM)), [0]);
    store_global(r, view_global(c, [n]), [undefined]);
}

fn main() {
    let cfg = k::Config { BM: 16 };
    assert!(k::SPACE.is_empty());
    assert!(k::source(&cfg).is_none());
    let mut c = vec![tilus::prelude::f16::ZERO; 32];
    assert!(k::interpret(&cfg, 32, &[], &mut c).is_err());
}
