//! `tilus bench gemm`: the wgmma GEMM per shape against cuBLAS in the same run.
//!
//! `c[m, n] = a[m, k] · b[n, k]ᵀ` in f16 or bf16 (cuBLAS with the same layout, `gemm_nt`). Every
//! configuration of the kernel's space is timed (median of CUDA-event timings, L2 flushed before
//! each run) and the best is reported, with TFLOP/s (`2 m n k` over the time) and the ratio to
//! cuBLAS.

use super::{gemm_bf16, gemm_f16};
use half::{bf16, f16};
use tilus_runtime::{time_runs, Context, Cublas, DeviceBuffer, L2Flush};

/// `8192^3` and the Llama-3-70B prefill layers at 8192 tokens `(m, n, k)`: qkv, o, gate+up,
/// down.
pub const DEFAULT_SHAPES: [(usize, usize, usize); 5] = [
    (8192, 8192, 8192),
    (8192, 10240, 8192),
    (8192, 57344, 8192),
    (8192, 8192, 28672),
    (4096, 4096, 4096),
];

/// One measured point.
#[derive(Clone, Debug)]
pub struct GemmRow {
    pub dtype: &'static str,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// The best configuration and its median time.
    pub config: String,
    pub us: f64,
    pub cublas_us: Option<f64>,
}

impl GemmRow {
    pub fn tflops(us: f64, m: usize, n: usize, k: usize) -> f64 {
        2.0 * (m * n * k) as f64 / (us * 1e-6) / 1e12
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Deterministic values in `[-0.5, 0.5)`, never all zero.
fn pattern(len: usize, salt: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i ^ salt).wrapping_mul(2654435761) >> 9) % 1000)
        .map(|h| h as f32 / 1000.0 - 0.5)
        .collect()
}

/// Time every configuration of the `dtype` kernel (`"f16"` or `"bf16"`) at `m x n x k`, and
/// cuBLAS unless `no_cublas`.
#[allow(clippy::too_many_arguments)]
pub fn bench_gemm(
    ctx: &Context,
    blas: Option<&Cublas>,
    flush: &mut L2Flush,
    dtype: &str,
    m: usize,
    n: usize,
    k: usize,
    runs: usize,
) -> Result<GemmRow, String> {
    macro_rules! run {
        ($t:ty, $kernel:ident, $name:literal) => {{
            let a: Vec<$t> = pattern(m * k, 1).into_iter().map(<$t>::from_f32).collect();
            let b: Vec<$t> = pattern(n * k, 2).into_iter().map(<$t>::from_f32).collect();
            let a = DeviceBuffer::from_host(ctx, &a).map_err(err)?;
            let b = DeviceBuffer::from_host(ctx, &b).map_err(err)?;
            let mut c = DeviceBuffer::<$t>::zeros(ctx, m * n).map_err(err)?;
            let (mi, ni, ki) = (
                i32::try_from(m).map_err(|_| "argument `m`: too large".to_string())?,
                i32::try_from(n).map_err(|_| "argument `n`: too large".to_string())?,
                i32::try_from(k).map_err(|_| "argument `k`: too large".to_string())?,
            );
            let mut best: Option<(String, f64)> = None;
            for cfg in $kernel::SPACE {
                // A launch error is kept and reported after the timing loop.
                let mut failure = None;
                let t = time_runs(ctx, 2, runs, Some(&mut *flush), || {
                    if let Err(e) = $kernel::launch(ctx, cfg, mi, ni, ki, &a, &b, &mut c) {
                        failure = Some(e);
                    }
                    Ok(())
                })
                .map_err(|e| format!("{cfg}: {e}"))?;
                if let Some(e) = failure {
                    return Err(format!("{cfg}: {e}"));
                }
                if best.as_ref().is_none_or(|(_, us)| t.median_us < *us) {
                    best = Some((cfg.to_string(), t.median_us));
                }
            }
            let cublas_us = match blas {
                Some(blas) => Some(
                    time_runs(ctx, 2, runs, Some(&mut *flush), || {
                        blas.gemm_nt(m, n, k, &a, &b, &mut c)
                    })
                    .map_err(err)?
                    .median_us,
                ),
                None => None,
            };
            let (config, us) = best.expect("the space is not empty");
            GemmRow {
                dtype: $name,
                m,
                n,
                k,
                config,
                us,
                cublas_us,
            }
        }};
    }
    Ok(match dtype {
        "f16" => run!(f16, gemm_f16, "f16"),
        "bf16" => run!(bf16, gemm_bf16, "bf16"),
        other => return Err(format!("argument `--dtype`: `{other}` is not f16 or bf16")),
    })
}

/// The table `tilus bench gemm` prints.
pub fn table(rows: &[GemmRow]) -> String {
    let mut s = format!(
        "tilus gemm (wgmma m64nNk16 from shared memory, cp.async pipeline), c = a · bᵀ; L2 flushed; best configuration\n\
         {:<5} {:>22} {:>10} {:>8} {:>11} {:>8} {:>9}  config\n",
        "dtype", "m x n x k", "tilus us", "TFLOP/s", "cuBLAS us", "TFLOP/s", "vs cuBLAS"
    );
    for r in rows {
        let (cu, cu_tf, ratio) = match r.cublas_us {
            Some(c) => (
                format!("{c:.1}"),
                format!("{:.0}", GemmRow::tflops(c, r.m, r.n, r.k)),
                format!("{:.1}%", 100.0 * c / r.us),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        s += &format!(
            "{:<5} {:>22} {:>10.1} {:>8.0} {:>11} {:>8} {:>9}  {}\n",
            r.dtype,
            format!("{}x{}x{}", r.m, r.n, r.k),
            r.us,
            GemmRow::tflops(r.us, r.m, r.n, r.k),
            cu,
            cu_tf,
            ratio,
            r.config
        );
    }
    s
}
