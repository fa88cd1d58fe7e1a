// Scalars, `let mut`, compound assignment, constant and run-time `if`, `for`, `while`,
// min/max/cdiv, layouts bound to names, string layouts, and elementwise operators.
#[tilus::kernel(grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32, 64], UNROLL = [1, 2]))]
fn saxpy<const BLOCK: i32, const UNROLL: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let lanes = layout!("spatial(32)");
    let tile = layout!(local(BLOCK / 32).lanes);
    let gx = view_global(x, [n]);
    let gy = view_global(y, [n]);
    let start = bi * BLOCK;
    let mut acc = load_global(gy, tile, [start]);
    let mut i = 0;
    while i < UNROLL {
        let rx = load_global(gx, tile, [start]);
        acc += rx * 2.0;
        i += 1;
    }
    if BLOCK > 32 {
        acc = acc - 0.5;
    } else {
        acc = sub(acc, 0.5);
    }
    let last = min(start + BLOCK, n) - 1;
    if last >= max(start, 0) && n > 0 {
        store_global(acc, gy, [start]);
    }
    for _ in 0..cdiv(BLOCK, 64) {
        sync();
    }
}

fn main() {
    let n = 100;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    for cfg in saxpy::SPACE {
        let mut y = vec![1.0f32; n];
        saxpy::interpret(cfg, n as i32, &x, &mut y).unwrap();
        for i in 0..n {
            let want = 1.0 + cfg.UNROLL as f32 * 2.0 * x[i] - 0.5;
            assert_eq!(y[i], want, "{cfg} at {i}");
        }
    }
}
