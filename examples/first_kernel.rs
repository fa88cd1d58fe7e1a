//! Your first `#[kernel]` (walked through in `docs/first-kernel.md`): an elementwise fused
//! multiply-add `out = x * y + z` on f16 matrices, computed in f32. It runs on fresh random
//! input through the CPU interpreter, is checked against an f64 reference, and then, if this
//! machine has a GPU, runs there and is checked the same way.
//!
//! Run: `cargo run --example first_kernel`

// ANCHOR: kernel
use rand::Rng;
use tilus::prelude::*;
use tilus::runtime::{Context, DeviceBuffer};

/// `out[m, n] = x[m, n] * y[m, n] + z[m, n]`, one `[BM, BN]` tile per thread block.
#[kernel(
    grid = [cdiv(m, BM), n / BN],
    warps = 4,
    space(BM = [16, 32], BN = [64, 128]),
)]
pub fn fma_f16<const BM: i32, const BN: i32>(
    m: i32,
    n: i32,
    x: Global<f16>,
    y: Global<f16>,
    z: Global<f16>,
    out: GlobalMut<f16>,
) {
    let [bi, bj] = block_indices();
    // 128 threads as a 4 x 32 grid; each holds BM/4 x BN/64 pairs of neighbouring columns.
    let tile = layout!(local(BM / 4, BN / 64).spatial(4, 32).local(1, 2));
    let offset = [bi * BM, bj * BN];
    let gx = view_global(x, [m, n]);
    let gy = view_global(y, [m, n]);
    let gz = view_global(z, [m, n]);
    let rx = cast::<f32>(load_global(gx, tile, offset));
    let ry = cast::<f32>(load_global(gy, tile, offset));
    let rz = cast::<f32>(load_global(gz, tile, offset));
    let r = mul_add(rx, ry, rz);
    store_global(cast::<f16>(r), view_global(out, [m, n]), offset);
}
// ANCHOR_END: kernel

// ANCHOR: check
/// `len` random f16 values in [-1, 1).
pub fn random_f16(len: usize) -> Vec<f16> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect()
}

/// f16 output rounds each element to 11 significant bits: a relative error of about 2e-4.
pub const TOLERANCE: f64 = 1e-3;

/// `||out - (x * y + z)|| / ||x * y + z||`, the reference computed in f64.
pub fn relative_error(x: &[f16], y: &[f16], z: &[f16], out: &[f16]) -> f64 {
    let (mut err, mut norm) = (0.0, 0.0);
    for i in 0..out.len() {
        let want = x[i].to_f64() * y[i].to_f64() + z[i].to_f64();
        err += (out[i].to_f64() - want).powi(2);
        norm += want * want;
    }
    (err / norm).sqrt()
}

/// Run `cfg` on the CPU interpreter on fresh input; the relative error. The output starts as
/// NaN, so an element the kernel does not write makes the error NaN.
pub fn check_on_cpu(cfg: &fma_f16::Config, m: usize, n: usize) -> Result<f64, KernelError> {
    let (x, y, z) = (random_f16(m * n), random_f16(m * n), random_f16(m * n));
    let mut out = vec![f16::NAN; m * n];
    fma_f16::interpret(cfg, m as i32, n as i32, &x, &y, &z, &mut out)?;
    Ok(relative_error(&x, &y, &z, &out))
}

/// The same on the GPU of `ctx`.
pub fn check_on_gpu(
    ctx: &Context,
    cfg: &fma_f16::Config,
    m: usize,
    n: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let (x, y, z) = (random_f16(m * n), random_f16(m * n), random_f16(m * n));
    let dx = DeviceBuffer::from_host(ctx, &x)?;
    let dy = DeviceBuffer::from_host(ctx, &y)?;
    let dz = DeviceBuffer::from_host(ctx, &z)?;
    let mut dout = DeviceBuffer::filled(ctx, m * n, f16::NAN)?;
    fma_f16::launch(ctx, cfg, m as i32, n as i32, &dx, &dy, &dz, &mut dout)?;
    Ok(relative_error(&x, &y, &z, &dout.to_host()?))
}
// ANCHOR_END: check

#[allow(dead_code)] // tests/first_kernel.rs includes this file as a module
                    // ANCHOR: main
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // m = 100 is not a multiple of BM: the last block's extra rows are masked.
    let (m, n) = (100, 256);
    for cfg in fma_f16::SPACE {
        let err = check_on_cpu(cfg, m, n)?;
        println!("interpreter {cfg}: relative error {err:.1e}");
        if err.is_nan() || err > TOLERANCE {
            return Err(format!("{cfg}: wrong result on the interpreter ({err})").into());
        }
    }
    match Context::new(0) {
        Ok(ctx) => {
            for cfg in fma_f16::SPACE {
                let err = check_on_gpu(&ctx, cfg, m, n)?;
                println!("GPU {cfg}: relative error {err:.1e}");
                if err.is_nan() || err > TOLERANCE {
                    return Err(format!("{cfg}: wrong result on the GPU ({err})").into());
                }
            }
        }
        Err(e) if e.is_unavailable() => println!("GPU part skipped: {e}"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
// ANCHOR_END: main
