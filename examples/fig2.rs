//! Figure 2 of the Tilus paper: `c = a x B`, `a` in f16 and `B` a low-bit integer weight,
//! with mma-shaped register layouts and 4 warps.
//!
//! The weight arrives in the tile format that Figure 8 produces (`u8[k/BK, n/BN, BK*BN*bits/8]`):
//! each thread loads its `nb` bytes with `local(nb/v).spatial(128).local(v)` (vectors of `v`
//! bytes), *views* them as `W` elements in the mma B-fragment layout (free: the bits are already where they belong), casts them to f16
//! and feeds `dot`, which the code generator turns into `mma.sync.m16n8k16`.
//!
//! The kernel is generic over the weight type: `dtypes(W = [..])` instantiates it for each
//! listed type; the paper's figure is `W = i6`.
//!
//! Run: `cargo run --example fig2` (the CPU interpreter; no GPU needed).

use rand::Rng;
use tilus::core::interp::{run, Arg};
use tilus::prelude::f16;
use tilus::DType;

#[tilus::kernel(
    grid = [cdiv(m, BM), n / BN],
    warps = 4,
    space(BM = [16, 32, 64], BN = [64, 128], BK = [16, 32, 64]),
    dtypes(W = [i6, i4, u4, i8]),
)]
pub fn matmul_f16_w<const BM: i32, const BN: i32, const BK: i32, W: DTypeParam>(
    m: i32,
    n: i32,
    k: i32,
    a: Global<f16>,
    b: Global<u8>,
    c: GlobalMut<f16>,
) {
    // The mma.m16n8k16 fragments, and the 4 warps side by side along n.
    let mma_a = layout!(column_local(2, 2).spatial(8, 4).local(1, 2));
    let mma_b = layout!(local(2, 1).column_spatial(4, 8).local(2, 1));
    let mma_c = layout!(local(2, 1).spatial(8, 4).local(1, 2));
    let warps = layout!(spatial(1, 4));
    // Bytes of one [BK, BN] weight tile, per thread, and the widest vector (of 16, 8, 4, 2, 1
    // bytes) they split into: each thread loads them with few wide, coalesced accesses.
    let tile_bytes = BK * BN * W::BITS / 8;
    let nb = tile_bytes / 128;
    let v = gcd(nb, 16);

    let [bi, bj] = block_indices();
    let ga = view_global(a, [m, k]);
    let gb = view_global(b, [k / BK, n / BN, tile_bytes]);
    let mut acc = register::<f32>(layout!(warps.local(BM / 16, BN / 32).mma_c), 0.0);
    for kk in 0..k / BK {
        let ra = load_global(
            ga,
            layout!(local(BM / 16, BK / 16).mma_a),
            [bi * BM, kk * BK],
        );
        let rw = load_global(
            gb,
            layout!(local(nb / v).spatial(128).local(v)),
            [kk, bj, 0],
        );
        let rb = cast::<f16>(view::<W>(rw, layout!(warps.local(BK / 16, BN / 32).mma_b)));
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

/// The weight in Figure 8's tile format, made with the builder version of Figure 8
/// (`tilus::programs::relayout_int`); `codes` are row-major `[k, n]`.
pub fn tiled_weight(cfg: &matmul_f16_w::Config, k: usize, n: usize, codes: &[u32]) -> Vec<u8> {
    let packed = tilus::core::storage::pack(cfg.W, codes);
    let p = tilus::programs::relayout_int(cfg.W, cfg.BK as usize, cfg.BN as usize);
    let out = vec![0u8; k * n * cfg.W.bits() as usize / 8];
    let mut args = [
        Arg::I32(k as i32),
        Arg::I32(n as i32),
        Arg::Buffer(packed),
        Arg::Buffer(out),
    ];
    run(&p, &mut args).expect("relayout runs");
    match &args[3] {
        Arg::Buffer(b) => b.clone(),
        _ => unreachable!(),
    }
}

/// `||out - ref|| / ||ref||` of one run at `cfg` on fresh random data, against an f64
/// reference over the same f16 inputs and integer weights.
pub fn check(cfg: &matmul_f16_w::Config, m: usize, n: usize, k: usize) -> f64 {
    let mut rng = rand::rng();
    let a = random_f16(&mut rng, m * k);
    let codes: Vec<u32> = (0..k * n)
        .map(|_| rng.random_range(0..1u32 << cfg.W.bits()))
        .collect();
    let b = tiled_weight(cfg, k, n, &codes);
    let mut c = vec![f16::NAN; m * n]; // poisoned: every element must be written
    matmul_f16_w::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c).expect("runs");

    let w: Vec<f64> = codes.iter().map(|&code| cfg.W.decode(code)).collect();
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k).map(|p| a[i * k + p].to_f64() * w[p * n + j]).sum();
            let d = c[i * n + j].to_f64() - r;
            num += d * d;
            den += r * r;
        }
    }
    (num / den).sqrt()
}

#[allow(dead_code)]
fn main() {
    let (m, n, k) = (48, 128, 128);
    for w in [DType::Int(6), DType::Int(4), DType::UInt(4)] {
        let cfg = matmul_f16_w::Config {
            BM: 32,
            BN: 64,
            BK: 32,
            W: w,
        };
        let err = check(&cfg, m, n, k);
        println!("matmul_f16_w {cfg}: m={m} n={n} k={k}: relative error {err:.2e}");
        assert!(err < 1e-2);
    }
    let cfg = matmul_f16_w::Config {
        BM: 32,
        BN: 64,
        BK: 32,
        W: DType::Int(6),
    };
    let src = matmul_f16_w::source(&cfg);
    println!(
        "CUDA source for {cfg}: {}",
        src.map(|s| format!("{} bytes", s.len()))
            .unwrap_or_else(|| "not generated (code generation unavailable)".into())
    );
}
