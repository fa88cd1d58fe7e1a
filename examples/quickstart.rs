//! The quickstart: quantize a random weight to a low-precision type, run the quantized matmul
//! `y[m, n] = x[m, k] · dequant(W)[k, n]`, check it against an f64 reference, and (on a GPU)
//! time it against cuBLAS f16 and the memory floor.
//!
//! ```sh
//! cargo run --release --example quickstart               # i4 weights
//! cargo run --release --example quickstart -- f6e3m2 16  # weight type, m
//! ```
//!
//! With an NVIDIA GPU (driver R580+, NVRTC 13) the kernel runs there on a decode-sized layer
//! (n = 57344, k = 8192); without one it runs through the CPU interpreter on a small layer and
//! says so.

use half::f16;
use rand::Rng;
use std::time::Instant;
use tilus::kernels::qmatmul::bench::bench_cublas;
use tilus::kernels::qmatmul::tune::candidates;
use tilus::kernels::qmatmul::{
    build, config_name, prepare, DeviceWeight, GpuQMatmul, QMatmulConfig,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::runtime::{copy_bandwidth, time_runs, Context, Cublas, DeviceBuffer, L2Flush};
use tilus::DType;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let wdtype: DType = match args.next() {
        Some(name) => name.parse().map_err(|e| format!("weight type: {e}"))?,
        None => DType::Int(4),
    };
    let m: usize = match args.next() {
        Some(v) => v.parse().map_err(|_| format!("m: `{v}` is not a number"))?,
        None => 1,
    };
    match Context::new(0) {
        Ok(ctx) => on_gpu(&ctx, wdtype, m),
        Err(e) if e.is_unavailable() => {
            println!("no GPU ({e})");
            println!("running through the CPU interpreter on a small layer instead\n");
            on_cpu(wdtype, m)
        }
        Err(e) => Err(e.into()),
    }
}

/// A random `[k, n]` weight quantized to `wdtype` with group-128 f16 scales (zero points for
/// unsigned types), and the configuration that fits it.
fn quantize(wdtype: DType, n: usize, k: usize) -> Result<(QuantizedWeight, QMatmulConfig), Error> {
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let zeros = matches!(wdtype, DType::UInt(_));
    let q = QuantizedWeight::quantize(&w, k, n, wdtype, Group::Rows(128), DType::F16, zeros)?;
    let cfg = QMatmulConfig::for_shape(wdtype, DType::F16, Some(128), zeros, n, k)?;
    Ok((q, cfg))
}

/// `||y - ref|| / ||ref||` with `ref = x · dequant(W)` in f64, over the first `rows` rows and
/// `cols` columns (the reference is the slow part on a big layer).
fn relative_error(x: &[f16], q: &QuantizedWeight, y: &[f16], m: usize, cols: usize) -> f64 {
    let (n, k) = (q.n, q.k);
    let deq = q.dequantize();
    let (mut err, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..cols {
            let r: f64 = (0..k)
                .map(|kk| x[i * k + kk].to_f64() * deq[kk * n + j])
                .sum();
            err += (y[i * n + j].to_f64() - r).powi(2);
            norm += r * r;
        }
    }
    (err / norm).sqrt()
}

fn on_gpu(ctx: &Context, wdtype: DType, m: usize) -> Result<(), Error> {
    let (n, k) = (57344, 8192);
    println!("GPU: {} ({})", ctx.device().name, ctx.arch());
    println!("y[{m}, {n}] = x[{m}, {k}] · W[{k}, {n}], W in {wdtype}, group 128, f16");
    let t0 = Instant::now();
    let (q, _) = quantize(wdtype, n, k)?;
    // The configuration that measured fastest for this shape class on an H100 (the head of the
    // tuning order; `GpuQuantizedLinear` tunes per GPU and remembers the winner).
    let cfg = candidates(wdtype, DType::F16, Some(128), m, n, k)?[0];
    let prepared = prepare(&q, &cfg)?;
    println!(
        "quantized and re-laid-out on the host in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let gpu = GpuQMatmul::new(&build(&cfg)?)?;
    let weight = DeviceWeight::<f16>::upload(ctx, &prepared)?;
    let mut rng = rand::rng();
    let x: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let x_dev = DeviceBuffer::from_host(ctx, &x)?;
    // Poisoned: an element the kernel does not write stays NaN and fails the check.
    let mut y_dev = DeviceBuffer::filled(ctx, m * n, f16::NAN)?;
    let t0 = Instant::now();
    gpu.run(ctx, m, &x_dev, &weight, &mut y_dev)?;
    let y = y_dev.to_host()?;
    println!(
        "first run (NVRTC compile + launch): {:.0} ms, configuration {}",
        t0.elapsed().as_secs_f64() * 1e3,
        config_name(&cfg)
    );
    let cols = 256;
    let rel = relative_error(&x, &q, &y, m, cols);
    let unwritten = y.iter().filter(|v| v.is_nan()).count();
    println!("check against the f64 reference (first {cols} columns): relative error {rel:.2e}");
    if unwritten > 0 || rel.is_nan() || rel >= 1e-2 {
        return Err(
            format!("wrong result: {unwritten} unwritten outputs, relative error {rel}").into(),
        );
    }

    let mut flush = L2Flush::new(ctx)?;
    let t = time_runs(ctx, 3, 20, Some(&mut flush), || {
        gpu.run(ctx, m, &x_dev, &weight, &mut y_dev).map_err(|e| {
            tilus::runtime::RuntimeError::InvalidArgument {
                arg: "qmatmul".into(),
                reason: e.to_string(),
            }
        })
    })?;
    let (_, copy_gbps) = copy_bandwidth(ctx, 1 << 30)?;
    let bytes = weight.bytes() + 2 * (m * k + m * n);
    let floor_us = bytes as f64 / (copy_gbps * 1e3);
    println!(
        "tilus {wdtype}: {:.1} us, {:.0} GB/s, {:.0}% of the {:.1} us floor ({copy_gbps:.0} GB/s copy)",
        t.median_us,
        t.gb_per_s(bytes as f64),
        100.0 * floor_us / t.median_us,
        floor_us
    );
    match Cublas::new(ctx) {
        Ok(blas) => {
            let cublas = bench_cublas(ctx, &blas, &mut flush, m, n, k)?;
            println!(
                "cuBLAS f16: {cublas:.1} us; tilus is {:.2}x faster",
                cublas / t.median_us
            );
        }
        Err(e) => println!("cuBLAS f16: not measured ({e})"),
    }
    Ok(())
}

fn on_cpu(wdtype: DType, m: usize) -> Result<(), Error> {
    let (n, k) = (256, 512);
    let m = m.min(4);
    println!("y[{m}, {n}] = x[{m}, {k}] · W[{k}, {n}], W in {wdtype}, group 128, f16");
    let (q, cfg) = quantize(wdtype, n, k)?;
    let kernel = build(&cfg)?;
    let prepared = prepare(&q, &cfg)?;
    let mut rng = rand::rng();
    let x: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let a: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut c = f16::NAN.to_le_bytes().repeat(m * n);
    let t0 = Instant::now();
    kernel.run_cpu(m, &a, &prepared, &mut c)?;
    let y: Vec<f16> = c
        .chunks_exact(2)
        .map(|b| f16::from_le_bytes([b[0], b[1]]))
        .collect();
    println!("interpreted in {:.2} s", t0.elapsed().as_secs_f64());
    let rel = relative_error(&x, &q, &y, m, n);
    println!("check against the f64 reference: relative error {rel:.2e}");
    if y.iter().any(|v| v.is_nan()) || rel.is_nan() || rel >= 1e-2 {
        return Err(format!("wrong result: relative error {rel}").into());
    }
    Ok(())
}
