//! Figure 14 of the Tilus paper (Appendix B): an f16 matmul with a `STAGES`-deep software
//! pipeline: `cp.async` copies global tiles into a ring of shared-memory stages while the
//! tensor cores work on an earlier stage.
//!
//! ```text
//! prologue: stages 0..STAGES-1 <- k-tiles 0..STAGES-1, one commit group each
//! for kk in 0..k/BK:
//!     wait_group(STAGES - 2); sync()       k-tile kk has landed and is visible to all warps
//!     ra, rb <- stage kk % STAGES            (load_shared with the mma layouts)
//!     stage (kk + STAGES - 1) % STAGES <- k-tile kk + STAGES - 1 (cp.async, masked past k)
//!     acc = dot(ra, rb, acc)
//! ```
//!
//! Run: `cargo run --example fig14` (the CPU interpreter checks the cp.async groups and
//! barriers: a missing `wait_group` or `sync` is reported as a race, not silently wrong).

use rand::Rng;
use tilus::prelude::f16;

#[tilus::kernel(
    grid = [cdiv(m, BM), n / BN],
    warps = 4,
    space(BM = [16, 32, 64], BN = [64, 128], BK = [16, 32], STAGES = [2, 3, 4]),
)]
pub fn matmul_pipelined<const BM: i32, const BN: i32, const BK: i32, const STAGES: i32>(
    m: i32,
    n: i32,
    k: i32,
    a: Global<f16>,
    b: Global<f16>,
    c: GlobalMut<f16>,
) {
    let mma_a = layout!(column_local(2, 2).spatial(8, 4).local(1, 2));
    let mma_b = layout!(local(2, 1).column_spatial(4, 8).local(2, 1));
    let mma_c = layout!(local(2, 1).spatial(8, 4).local(1, 2));
    let warps = layout!(spatial(1, 4));

    let [bi, bj] = block_indices();
    let ga = view_global(a, [m, k]);
    let gb = view_global(b, [k, n]);
    let sa = shared::<f16>([STAGES, BM, BK]);
    let sb = shared::<f16>([STAGES, BK, BN]);
    let mut acc = register::<f32>(layout!(warps.local(BM / 16, BN / 32).mma_c), 0.0);

    for s in 0..STAGES - 1 {
        copy_async(ga, slice_shared(sa, [s, 0, 0], [BM, BK]), [bi * BM, s * BK]);
        copy_async(gb, slice_shared(sb, [s, 0, 0], [BK, BN]), [s * BK, bj * BN]);
        commit_group();
    }
    for kk in 0..k / BK {
        wait_group(STAGES - 2);
        sync();
        let stage = kk % STAGES;
        let ra = load_shared(sa, layout!(local(BM / 16, BK / 16).mma_a), [stage, 0, 0]);
        let rb = load_shared(
            sb,
            layout!(warps.local(BK / 16, BN / 32).mma_b),
            [stage, 0, 0],
        );
        let next = kk + STAGES - 1;
        copy_async(
            ga,
            slice_shared(sa, [next % STAGES, 0, 0], [BM, BK]),
            [bi * BM, next * BK],
        );
        copy_async(
            gb,
            slice_shared(sb, [next % STAGES, 0, 0], [BK, BN]),
            [next * BK, bj * BN],
        );
        commit_group();
        acc = dot(ra, rb, acc);
    }
    store_global(cast::<f16>(acc), view_global(c, [m, n]), [bi * BM, bj * BN]);
}

/// Fresh random f16 values in [-1, 1).
pub fn random_f16(rng: &mut impl Rng, len: usize) -> Vec<f16> {
    (0..len)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect()
}

/// `||out - ref|| / ||ref||` of one run at `cfg` on fresh random data, against an f64
/// reference over the same f16 inputs.
pub fn check(cfg: &matmul_pipelined::Config, m: usize, n: usize, k: usize) -> f64 {
    let mut rng = rand::rng();
    let a = random_f16(&mut rng, m * k);
    let b = random_f16(&mut rng, k * n);
    let mut c = vec![f16::NAN; m * n]; // poisoned: every element must be written
    matmul_pipelined::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c).expect("runs");
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|p| a[i * k + p].to_f64() * b[p * n + j].to_f64())
                .sum();
            let d = c[i * n + j].to_f64() - r;
            num += d * d;
            den += r * r;
        }
    }
    (num / den).sqrt()
}

#[allow(dead_code)]
fn main() {
    let (m, n, k) = (40, 128, 128);
    for stages in [2, 3, 4] {
        let cfg = matmul_pipelined::Config {
            BM: 32,
            BN: 64,
            BK: 32,
            STAGES: stages,
        };
        let err = check(&cfg, m, n, k);
        println!("matmul_pipelined {cfg}: m={m} n={n} k={k}: relative error {err:.2e}");
        assert!(err < 1e-2);
    }
    println!(
        "{} configurations in the space",
        matmul_pipelined::SPACE.len()
    );
}
