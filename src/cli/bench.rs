//! `tilus bench ...`: GPU measurements printed as tables.
//!
//! Every figure is a median of CUDA-event timings after warm-up. Bandwidth counts bytes read
//! plus bytes written, the same way the copy-bandwidth floor is counted.

use clap::Subcommand;
use half::f16;
use tilus_runtime::{copy_bandwidth, time_runs, Context, CublasF16, DeviceBuffer, L2Flush};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Device-to-device copy bandwidth (the floor memory-bound kernels are judged against).
    Copy {
        /// Bytes copied per run, in MiB (far over L2, so the copy streams from DRAM).
        #[arg(long, default_value_t = 1024)]
        mib: usize,
    },
    /// cuBLAS f16 GEMM `C[m,n] = A[m,k] · B[k,n]` (the baseline of the quantized kernels).
    Gemm {
        #[arg(long)]
        m: usize,
        #[arg(long)]
        n: usize,
        #[arg(long)]
        k: usize,
    },
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Bad arguments are reported before a GPU is looked for.
fn validate(cmd: &BenchCommand) -> Result<(), String> {
    let positive: Vec<(&str, usize)> = match *cmd {
        BenchCommand::Copy { mib } => vec![("--mib", mib)],
        BenchCommand::Gemm { m, n, k } => vec![("--m", m), ("--n", n), ("--k", k)],
    };
    match positive.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("argument `{name}`: must be positive")),
        None => Ok(()),
    }
}

pub fn run(cmd: &BenchCommand) -> Result<String, String> {
    validate(cmd)?;
    let ctx = Context::new(0).map_err(err)?;
    let dev = ctx.device();
    let mut out = format!("device: {} ({})\n", dev.name, ctx.arch());
    match *cmd {
        BenchCommand::Copy { mib } => {
            let (t, gbps) = copy_bandwidth(&ctx, mib << 20).map_err(err)?;
            out += &format!(
                "copy {mib} MiB: median {:.1} us (min {:.1}, max {:.1}, {} runs), {gbps:.0} GB/s read+write",
                t.median_us, t.min_us, t.max_us, t.samples
            );
        }
        BenchCommand::Gemm { m, n, k } => {
            let blas = CublasF16::new(&ctx).map_err(err)?;
            let a = random_f16(&ctx, m * k, 1)?;
            let b = random_f16(&ctx, k * n, 2)?;
            let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).map_err(err)?;
            let mut flush = L2Flush::new(&ctx).map_err(err)?;
            let t = time_runs(&ctx, 5, 30, Some(&mut flush), || {
                blas.gemm(m, n, k, &a, &b, &mut c)
            })
            .map_err(err)?;
            let bytes = 2.0 * (m * k + k * n + m * n) as f64;
            let tflops = 2.0 * (m * n * k) as f64 / (t.median_us * 1e-6) / 1e12;
            out += &format!(
                "cuBLAS f16 gemm m={m} n={n} k={k}: median {:.1} us, {:.0} GB/s, {tflops:.1} TFLOP/s",
                t.median_us,
                t.gb_per_s(bytes)
            );
        }
    }
    Ok(out)
}

/// Values in [-1, 1) from a small LCG: benchmarks need non-zero data, not statistical quality.
fn random_f16(ctx: &Context, len: usize, seed: u64) -> Result<DeviceBuffer<f16>, String> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f16> = (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f16::from_f32(((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
        })
        .collect();
    DeviceBuffer::from_host(ctx, &data).map_err(err)
}
