// Shared memory, cp.async groups, slices and a swizzled tile.
#[tilus::kernel(grid = [m / 16], warps = 4, space(STAGES = [2, 3]))]
fn copy_rows<const STAGES: i32>(m: i32, a: Global<f16>, b: GlobalMut<f16>) {
    let [bi] = block_indices();
    let ga = view_global(a, [m, 64]);
    let gb = view_global(b, [m, 64]);
    let s = shared::<f16>([STAGES, 16, 64], swizzle(3, 3, 3));
    let stage = bi % STAGES;
    copy_async(ga, slice_shared(s, [stage, 0, 0], [16, 64]), [bi * 16, 0]);
    commit_group();
    wait_group(0);
    sync();
    let r = load_shared(s, layout!(local(2, 4).spatial(8, 16)), [stage, 0, 0]);
    store_global(r, gb, [bi * 16, 0]);
}

fn main() {
    use tilus::prelude::f16;
    let m = 48;
    let a: Vec<f16> = (0..m * 64).map(|i| f16::from_f32((i % 1000) as f32)).collect();
    for cfg in copy_rows::SPACE {
        let mut b = vec![f16::NAN; m * 64];
        copy_rows::interpret(cfg, m as i32, &a, &mut b).unwrap();
        assert_eq!(a, b);
    }
}
