// Nothing special: using every generated name, including `launch`, type-checks.
use tilus::prelude::*;
use tilus::runtime::{Context, DeviceBuffer};

#[tilus::kernel(grid = [1], warps = 1)]
pub fn one(x: GlobalMut<f32>) {
    let r = register::<f32>(layout!(spatial(32)), 1.0);
    store_global(r, view_global(x, [32]), [0]);
}

#[allow(dead_code)]
fn use_it(ctx: &Context, buf: &mut DeviceBuffer<f32>) -> Result<(), KernelError> {
    let cfg = one::SPACE[0];
    let _: Option<&'static str> = one::source(&cfg);
    let _: Option<tilus::core::ir::Program> = one::program(&cfg);
    let _: Option<KernelInfo> = one::kernel(&cfg);
    one::launch(ctx, &cfg, buf)
}

fn main() {
    let mut x = vec![0.0f32; 32];
    one::interpret(&one::Config {}, &mut x).unwrap();
    assert_eq!(x, vec![1.0; 32]);
    assert_eq!(one::Config {}.to_string(), "");
}
