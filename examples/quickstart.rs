//! The quickstart: quantize a random weight to a low-precision type, run the quantized matmul
//! `y[m, n] = x[m, k] · dequant(W)[k, n]`, check it against an f64 reference, and (on a GPU)
//! time it against cuBLAS f16 and the memory floor.
//!
//! ```sh
//! cargo run --release --example quickstart               # i4 weights, m = 1
//! cargo run --release --example quickstart -- f6e3m2 16  # weight type, m
//! ```
//!
//! With an NVIDIA GPU (driver R580+, NVRTC 13) the layer runs there at a decode size
//! (n = 57344, k = 8192) the way user code runs it: a `GpuQuantizedLinear`, autotuned on first
//! use for the `m` bucket and the winner persisted, so a second run reuses it. Without a GPU it
//! runs the same program through the CPU interpreter on a small layer and says so.
//!
//! Bad arguments are a one-line error naming the argument and what it accepts (exit status 2).

use half::f16;
use rand::Rng;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use tilus::kernels::linear::GpuQuantizedLinear;
use tilus::kernels::qmatmul::bench::bench_cublas;
use tilus::kernels::qmatmul::{build, config_name, prepare, weight_types, QMatmulConfig};
use tilus::quant::{Group, QuantizedWeight};
use tilus::runtime::{
    copy_bandwidth, time_runs, Context, Cublas, DeviceBuffer, L2Flush, L2Mode, TuneSource,
};
use tilus::DType;

type Error = Box<dyn std::error::Error>;

pub const USAGE: &str = "usage: quickstart [WDTYPE [M]] (default: i4 1)";

/// The largest `m` accepted (the GPU layer's output is `m x 57344` f16).
pub const MAX_M: usize = 16384;

/// The arguments: the weight type and the number of activation rows.
#[derive(Debug, PartialEq)]
pub struct Args {
    pub wdtype: DType,
    pub m: usize,
}

/// `[WDTYPE [M]]`, or a one-line error naming the argument and the values it accepts.
pub fn parse_args(args: &[String]) -> Result<Args, String> {
    if let Some(extra) = args.get(2) {
        return Err(format!("unexpected argument `{extra}`; {USAGE}"));
    }
    let wdtype = match args.first() {
        None => DType::Int(4),
        Some(name) => {
            let accepted = || {
                let names: Vec<String> = weight_types().iter().map(|t| t.to_string()).collect();
                names.join(", ")
            };
            match name.parse::<DType>() {
                Ok(t) if weight_types().contains(&t) => t,
                _ => {
                    return Err(format!(
                        "argument WDTYPE: `{name}` is not a weight type; accepted: {}",
                        accepted()
                    ))
                }
            }
        }
    };
    let m = match args.get(1) {
        None => 1,
        Some(v) => match v.parse::<usize>() {
            Ok(m) if (1..=MAX_M).contains(&m) => m,
            _ => {
                return Err(format!(
                    "argument M: `{v}` is not an integer from 1 to {MAX_M} (rows of x)"
                ))
            }
        },
    };
    Ok(Args { wdtype, m })
}

/// The whole program; the exit status: 0, 1 (a failure, e.g. a wrong result) or 2 (bad
/// arguments, reported before a GPU is looked for).
pub fn run(args: &[String]) -> u8 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}\nWDTYPE: one of {}", {
            let names: Vec<String> = weight_types().iter().map(|t| t.to_string()).collect();
            names.join(", ")
        });
        return 0;
    }
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("quickstart: {e}");
            return 2;
        }
    };
    let result = match Context::new(0) {
        Ok(ctx) => on_gpu(&ctx, args.wdtype, args.m),
        Err(e) if e.is_unavailable() => {
            println!("no GPU ({e})");
            println!("running through the CPU interpreter on a small layer instead\n");
            on_cpu(args.wdtype, args.m)
        }
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "quickstart: {}",
                e.to_string().lines().collect::<Vec<_>>().join("; ")
            );
            1
        }
    }
}

#[allow(dead_code)] // tests/quickstart.rs includes this file as a module
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(run(&args))
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

fn on_gpu(ctx: &Arc<Context>, wdtype: DType, m: usize) -> Result<(), Error> {
    let (n, k) = (57344, 8192);
    println!("GPU: {} ({})", ctx.device().name, ctx.arch());
    println!("y[{m}, {n}] = x[{m}, {k}] · W[{k}, {n}], W in {wdtype}, group 128, f16");
    let t0 = Instant::now();
    let layer = {
        let mut rng = rand::rng();
        let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        GpuQuantizedLinear::<f16>::new(ctx, &w, k, n, wdtype, Group::Rows(128))?
    };
    println!(
        "quantized, re-laid-out and uploaded in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // What the first forward of a new m bucket does: tune the layer's candidates (compile all
    // in parallel, time each) or reuse the winner persisted by an earlier run.
    let t0 = Instant::now();
    let plan = layer.plan(m)?;
    let took = t0.elapsed().as_secs_f64();
    let winner = config_name(&plan.config);
    match plan.source {
        TuneSource::Measured => println!(
            "autotuned the m <= {} bucket in {took:.1} s: {} configurations measured, winner {winner} ({:.1} us)",
            plan.m_bucket, plan.candidates, plan.median_us
        ),
        TuneSource::Memory | TuneSource::Disk => println!(
            "reused the persisted winner of the m <= {} bucket in {:.0} ms, nothing measured: {winner} ({:.1} us when tuned)",
            plan.m_bucket,
            took * 1e3,
            plan.median_us
        ),
    }
    match &plan.record {
        Some(path) => println!(
            "the winner is kept in {}: a second run reuses it (delete the file to tune again)",
            path.display()
        ),
        None => println!("the disk cache is off (TILUS_CACHE=off): a second run tunes again"),
    }

    let mut rng = rand::rng();
    let x: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let x_dev = DeviceBuffer::from_host(ctx, &x)?;
    // Poisoned: an element the kernel does not write stays NaN and fails the check.
    let mut y_dev = DeviceBuffer::filled(ctx, m * n, f16::NAN)?;
    layer.forward_into(&x_dev, m, &mut y_dev)?;
    let y = y_dev.to_host()?;
    let cols = 256;
    let rel = relative_error(&x, layer.quantized(), &y, m, cols);
    let unwritten = y.iter().filter(|v| v.is_nan()).count();
    println!("check against the f64 reference (first {cols} columns): relative error {rel:.2e}");
    if unwritten > 0 || rel.is_nan() || rel >= 1e-2 {
        return Err(
            format!("wrong result: {unwritten} unwritten outputs, relative error {rel}").into(),
        );
    }

    // Clean lines in L2, as `tilus bench` measures (a dirty flush charges ~17 us of write-back).
    let mut flush = L2Flush::with_mode(ctx, L2Mode::Clean)?;
    let t = time_runs(ctx, 3, 20, Some(&mut flush), || {
        layer.forward_into(&x_dev, m, &mut y_dev).map_err(|e| {
            tilus::runtime::RuntimeError::InvalidArgument {
                arg: "forward".into(),
                reason: e.to_string(),
            }
        })
    })?;
    let (_, copy_gbps) = copy_bandwidth(ctx, 1 << 30)?;
    let bytes = plan.config.byte_floor(m, n, k);
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

/// The same program through the CPU interpreter on a small layer (`m` capped at 4).
pub fn on_cpu(wdtype: DType, m: usize) -> Result<(), Error> {
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
