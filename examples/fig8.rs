//! Figure 8 of the Tilus paper: re-lay out a row-major, compactly stored low-bit weight
//! `w[k, n]` into the tile format the matmul of Figure 2 reads (`u8[k/BK, n/BN, BK*BN*bits/8]`).
//!
//! Each block loads its `[BK, BN]` tile with the mma B-operand layout, *views* each thread's
//! bits as bytes (no data moves), and stores the bytes with `local(nb/v).spatial(128).local(v)`
//! (vectors of `v` bytes). Figure 2 loads those bytes with that same layout and views them
//! back: every thread finds its mma fragment in its own registers.
//!
//! Run: `cargo run --example fig8` (the CPU interpreter; no GPU needed).

use rand::Rng;
use tilus::core::interp::{run, Arg};
use tilus::DType;

#[tilus::kernel(
    grid = [k / BK, n / BN],
    warps = 4,
    space(BK = [16, 32, 64], BN = [64, 128]),
    dtypes(W = [i6, i4, u4, i8]),
)]
pub fn relayout<const BK: i32, const BN: i32, W: DTypeParam>(
    k: i32,
    n: i32,
    w: Global<u8>,
    out: GlobalMut<u8>,
) {
    let [bk, bn] = block_indices();
    let mma_b = layout!(local(2, 1).column_spatial(4, 8).local(2, 1));
    // Bytes per thread, in vectors of the widest of 16, 8, 4, 2, 1 bytes that divides them.
    let nb = BK * BN * W::BITS / 8 / 128;
    let v = gcd(nb, 16);
    let gw = view_global::<W>(w, [k, n]);
    let tile = load_global(
        gw,
        layout!(spatial(1, 4).local(BK / 16, BN / 32).mma_b),
        [bk * BK, bn * BN],
    );
    let bytes = view::<u8>(tile, layout!(local(nb / v).spatial(128).local(v)));
    let go = view_global(out, [k / BK, n / BN, BK * BN * W::BITS / 8]);
    store_global(bytes, go, [bk, bn, 0]);
}

/// Random codes of `dtype` (an integer type), packed row-major.
pub fn random_weight(rng: &mut impl Rng, dtype: DType, len: usize) -> Vec<u8> {
    let codes: Vec<u32> = (0..len)
        .map(|_| rng.random_range(0..1u32 << dtype.bits()))
        .collect();
    tilus::core::storage::pack(dtype, &codes)
}

/// Re-lay out on the interpreter; returns the tiled bytes.
pub fn run_relayout(cfg: &relayout::Config, k: usize, n: usize, w: &[u8]) -> Vec<u8> {
    let mut out = vec![0xA5u8; k * n * cfg.W.bits() as usize / 8];
    relayout::interpret(cfg, k as i32, n as i32, w, &mut out).expect("relayout runs");
    out
}

/// The builder version in `tilus::programs` (a second implementation to compare with).
pub fn reference_relayout(cfg: &relayout::Config, k: usize, n: usize, w: &[u8]) -> Vec<u8> {
    let p = tilus::programs::relayout_int(cfg.W, cfg.BK as usize, cfg.BN as usize);
    let out = vec![0u8; k * n * cfg.W.bits() as usize / 8];
    let mut args = [
        Arg::I32(k as i32),
        Arg::I32(n as i32),
        Arg::Buffer(w.to_vec()),
        Arg::Buffer(out),
    ];
    run(&p, &mut args).expect("reference relayout runs");
    match &args[3] {
        Arg::Buffer(b) => b.clone(),
        _ => unreachable!(),
    }
}

/// Check one configuration on fresh random data: the bytes must match exactly, and every
/// weight must be found where the layout says. Returns the number of differing bytes.
pub fn check(cfg: &relayout::Config, k: usize, n: usize) -> usize {
    let mut rng = rand::rng();
    let w = random_weight(&mut rng, cfg.W, k * n);
    let ours = run_relayout(cfg, k, n, &w);
    let theirs = reference_relayout(cfg, k, n, &w);
    ours.iter().zip(&theirs).filter(|(a, b)| a != b).count() + ours.len().abs_diff(theirs.len())
}

#[allow(dead_code)]
fn main() {
    let (k, n) = (128, 256);
    for cfg in relayout::SPACE.iter().step_by(5) {
        let bad = check(cfg, k, n);
        println!("relayout {cfg}: k={k} n={n}: {bad} bytes differ from the builder version");
        assert_eq!(bad, 0);
    }
}
