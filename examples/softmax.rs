//! Softmax written from scratch with `#[kernel]` (walked through in `docs/macro.md`, "Writing
//! softmax from scratch"): `y = exp(x - max(x)) / sum(exp(x - max(x)))` along each row of an
//! f16 matrix, computed in f32, one row per thread block, rows of any length up to `BN`.
//! It runs on fresh random input through the CPU interpreter, is checked against an f64
//! reference, and then, if this machine has a GPU, runs there and is checked the same way.
//! (The library's tuned version, for any row length, is `tilus::kernels::rowwise::softmax`.)
//!
//! Run: `cargo run --example softmax`

use rand::Rng;
use tilus::prelude::*;
use tilus::runtime::{Context, DeviceBuffer};

// ANCHOR: kernel
/// One row of `x: [rows, n]` per block, `n <= BN`.
#[kernel(grid = [rows], warps = 4, space(BN = [512, 1024, 2048]))]
pub fn softmax<const BN: i32>(rows: i32, n: i32, x: Global<f16>, y: GlobalMut<f16>) {
    // 128 threads along the row, each holding BN / 128 elements in runs of 4.
    let row = layout!(local(1, BN / 512).spatial(1, 128).local(1, 4));
    let [r] = block_indices();
    // Past the row's end the load reads -inf: it cannot win the maximum, and exp(-inf) = 0.
    let xs = load_global(view_global(x, [rows, n]), row, [r, 0], f32::NEG_INFINITY);
    let xs = cast::<f32>(xs);
    // A reduction keeps the rank: m is [1, 1], held by every thread of the row.
    let m = reduce_max(xs, 1);
    let e = exp(xs - m);
    let s = sum(e, 1);
    // One division per row, then a multiplication per element.
    let out = e * (1.0 / s);
    store_global(cast::<f16>(out), view_global(y, [rows, n]), [r, 0]);
}
// ANCHOR_END: kernel

/// `rows x n` random f16 values in [-8, 8).
pub fn random_input(rows: usize, n: usize) -> Vec<f16> {
    let mut rng = rand::rng();
    (0..rows * n)
        .map(|_| f16::from_f32(rng.random_range(-8.0f32..8.0)))
        .collect()
}

/// The largest error of `y` against softmax computed in f64, relative to each element (f16
/// keeps 11 significant bits: about 5e-4, plus the f32 steps), or to f16's smallest normal
/// number for the tiny ones (which f16 holds with a fixed absolute step).
pub fn max_error(x: &[f16], y: &[f16], n: usize) -> f64 {
    let mut worst: f64 = 0.0;
    for (xr, yr) in x.chunks(n).zip(y.chunks(n)) {
        let m = xr
            .iter()
            .map(|v| v.to_f64())
            .fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = xr.iter().map(|v| (v.to_f64() - m).exp()).sum();
        for (xv, yv) in xr.iter().zip(yr) {
            let want = (xv.to_f64() - m).exp() / s;
            let err = (yv.to_f64() - want).abs() / want.max(6.1e-5);
            worst = if err.is_nan() {
                f64::NAN
            } else {
                worst.max(err)
            };
        }
    }
    worst
}

pub const TOLERANCE: f64 = 2e-3;

/// The smallest configuration that holds rows of `n`.
pub fn config_for(n: usize) -> Option<&'static softmax::Config> {
    softmax::SPACE.iter().find(|c| c.BN as usize >= n)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run_example()
}

/// What `main` does: the interpreter run, then the GPU run when there is a GPU.
pub fn run_example() -> Result<(), Box<dyn std::error::Error>> {
    // 1000 is shorter than the block's 1024 columns: the tail of each row is masked.
    let (rows, n) = (6, 1000);
    let cfg = config_for(n).ok_or("rows too long")?;
    let x = random_input(rows, n);
    let mut y = vec![f16::NAN; rows * n];
    softmax::interpret(cfg, rows as i32, n as i32, &x, &mut y)?;
    let err = max_error(&x, &y, n);
    println!("interpreter {cfg}: max relative error {err:.1e}");
    if err.is_nan() || err > TOLERANCE {
        return Err(format!("wrong result on the interpreter ({err})").into());
    }
    match Context::new(0) {
        Ok(ctx) => {
            let dx = DeviceBuffer::from_host(&ctx, &x)?;
            let mut dy = DeviceBuffer::filled(&ctx, rows * n, f16::NAN)?;
            softmax::launch(&ctx, cfg, rows as i32, n as i32, &dx, &mut dy)?;
            let err = max_error(&x, &dy.to_host()?, n);
            println!("GPU {cfg}: max relative error {err:.1e}");
            if err.is_nan() || err > TOLERANCE {
                return Err(format!("wrong result on the GPU ({err})").into());
            }
        }
        Err(e) if e.is_unavailable() => println!("GPU part skipped: {e}"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
