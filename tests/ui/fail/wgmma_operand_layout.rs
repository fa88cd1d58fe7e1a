// A shared-operand `dot` (the warpgroup MMA) whose right operand is an n-major tile: the error
// names the operand, says which layout wgmma reads, and how to get it.
#[tilus::kernel(grid = [1], warps = 4)]
fn k(a: Global<f16>, b: Global<f16>, c: GlobalMut<f32>) {
    let sa = shared::<f16>([64, 64], swizzle(3, 3, 3));
    let sb = shared::<f16>([64, 64], swizzle(3, 3, 3));
    copy_async(view_global(a, [64, 64]), sa, [0, 0]);
    copy_async(view_global(b, [64, 64]), sb, [0, 0]);
    commit_group();
    wait_group(0);
    sync();
    let acc = register::<f32>(layout!(spatial(4, 1).local(1, 8).mma_c), 0.0);
    let acc = dot(sa, sb, acc);
    store_global(acc, view_global(c, [64, 64]), [0, 0]);
}

fn main() {}
