//! Reductions written with `#[kernel]`: row maxima, a centred row sum (`x - max` broadcast in
//! registers, then `sum`), argmax and `any`, run on the CPU interpreter against an f64
//! reference. Two tile layouts: the row spread over lanes and locals (shuffles), and over two
//! warps (the shared-memory stage).

use rand::Rng;

/// Per row of `x[m, 64]`: the maximum, `sum(x - max)`, and the first column of the maximum.
#[tilus::kernel(grid = [cdiv(m, BM)], warps = 4, space(BM = [4, 8]))]
pub fn row_stats<const BM: i32>(
    m: i32,
    x: Global<f32>,
    mx: GlobalMut<f32>,
    centred: GlobalMut<f32>,
    am: GlobalMut<i32>,
) {
    let [bi] = block_indices();
    let gx = view_global(x, [m, 64]);
    let gm = view_global(mx, [m, 1]);
    let gs = view_global(centred, [m, 1]);
    let ga = view_global(am, [m, 1]);
    // BM = 4: each row over 32 lanes x 2 locals; BM = 8: over 2 warps x 32 lanes.
    let t = if BM == 4 {
        load_global(gx, layout!(spatial(4, 32).local(1, 2)), [bi * BM, 0])
    } else {
        load_global(gx, layout!(local(4, 1).spatial(2, 64)), [bi * BM, 0])
    };
    let rmax = reduce_max(t, 1);
    let c = t - rmax;
    let s = sum(c, 1);
    let a = argmax(t, 1);
    store_global(rmax, gm, [bi * BM, 0]);
    store_global(s, gs, [bi * BM, 0]);
    store_global(a, ga, [bi * BM, 0]);
}

#[test]
fn row_stats_match_the_f64_reference() {
    let mut rng = rand::rng();
    for cfg in row_stats::SPACE {
        let m = 3 * cfg.BM as usize;
        let x: Vec<f32> = (0..m * 64)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let (mut mx, mut cs, mut am) = (vec![f32::NAN; m], vec![f32::NAN; m], vec![-1i32; m]);
        row_stats::interpret(cfg, m as i32, &x, &mut mx, &mut cs, &mut am)
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        for r in 0..m {
            let row = &x[r * 64..(r + 1) * 64];
            let (mut best, mut arg) = (f32::NEG_INFINITY, 0);
            for (k, &v) in row.iter().enumerate() {
                if v > best {
                    (best, arg) = (v, k);
                }
            }
            assert_eq!(mx[r], best, "{cfg} row {r}");
            assert_eq!(am[r], arg as i32, "{cfg} row {r}");
            // The centred values are exact f32 differences; their sum is rounded once.
            let exact: f64 = row.iter().map(|&v| (v - best) as f64).sum();
            assert!(
                (cs[r] as f64 - exact).abs() <= exact.abs() * 2f64.powi(-23),
                "{cfg} row {r}: {} vs {exact}",
                cs[r]
            );
        }
    }
}

/// Inclusive prefix sums of the rows of `x[m, 32]`, each row over 8 lanes x 4 locals.
#[tilus::kernel(grid = [cdiv(m, 16)], warps = 4)]
pub fn row_cumsum(m: i32, x: Global<f32>, y: GlobalMut<f32>) {
    let [bi] = block_indices();
    let gx = view_global(x, [m, 32]);
    let gy = view_global(y, [m, 32]);
    let t = load_global(gx, layout!(spatial(16, 8).local(1, 4)), [bi * 16, 0]);
    let c = cumsum(t, 1);
    store_global(c, gy, [bi * 16, 0]);
}

#[test]
fn row_cumsum_matches_the_f64_reference() {
    let mut rng = rand::rng();
    let m = 40;
    let x: Vec<f32> = (0..m * 32)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let mut y = vec![f32::NAN; m * 32];
    row_cumsum::interpret(&row_cumsum::SPACE[0], m as i32, &x, &mut y).unwrap();
    for r in 0..m {
        let mut exact = 0f64;
        for c in 0..32 {
            exact += x[r * 32 + c] as f64;
            let got = y[r * 32 + c] as f64;
            assert!(
                (got - exact).abs() <= exact.abs() * 2f64.powi(-23),
                "[{r}, {c}]: {got} vs {exact}"
            );
        }
    }
}
