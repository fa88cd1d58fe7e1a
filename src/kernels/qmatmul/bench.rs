//! Benchmarking the quantized matmul on the GPU: pick the fastest of a few configurations
//! (a small on-the-spot tuning), and report it against the memory floor and cuBLAS f16.

use super::config::{QMatmulConfig, QMatmulError};
use super::cpu::prepare;
use super::gpu::{DeviceWeight, GpuQMatmul};
use super::program::build;
use crate::quant::{Group, QuantizedWeight};
use crate::DType;
use half::f16;
use tilus_runtime::{time_runs, Context, CublasF16, DeviceBuffer, L2Flush, Timing};

/// One measured case.
#[derive(Clone, Debug)]
pub struct BenchRow {
    pub wdtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// The fastest configuration found.
    pub config: QMatmulConfig,
    pub timing: Timing,
    /// Bytes of weights + scales (+ zero points) + activations + output.
    pub bytes: usize,
    /// `bytes` over the measured copy bandwidth, in microseconds.
    pub floor_us: f64,
    pub cublas_us: Option<f64>,
}

impl BenchRow {
    pub fn gb_per_s(&self) -> f64 {
        self.timing.gb_per_s(self.bytes as f64)
    }
    pub fn percent_of_floor(&self) -> f64 {
        100.0 * self.floor_us / self.timing.median_us
    }
    pub fn speedup_over_cublas(&self) -> Option<f64> {
        self.cublas_us.map(|c| c / self.timing.median_us)
    }
}

/// The configurations tried for an `m`-row problem: the default tiles, deeper pipelines and
/// longer k tiles for decode shapes, and larger m tiles with more warps for prefill shapes.
pub fn candidates(
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<QMatmulConfig>, QMatmulError> {
    let zeros = matches!(wdtype, DType::UInt(_));
    let base = QMatmulConfig::for_shape(wdtype, adtype, group, zeros, n, k)?;
    let mut out = vec![base];
    let shapes: &[(usize, usize, usize)] = if m <= 16 {
        // (bm, warps, stages)
        &[(16, 4, 4), (16, 4, 5)]
    } else if m <= 256 {
        &[(32, 4, 3), (64, 4, 3)]
    } else {
        &[(64, 4, 3), (128, 8, 3), (128, 4, 3)]
    };
    for &(bm, warps, stages) in shapes {
        for bk in [base.bk, 128] {
            let cfg = QMatmulConfig {
                bm,
                warps,
                stages,
                bk,
                ..base
            };
            if cfg.tiling().is_ok()
                && k.is_multiple_of(bk)
                && group.is_none_or(|g| g >= bk || bk.is_multiple_of(g))
                && !out.contains(&cfg)
            {
                out.push(cfg);
            }
        }
    }
    Ok(out)
}

/// Non-constant, non-zero f16 data (a hash pattern in [-0.5, 0.5)): zeros or constants can
/// make a GEMM look faster than it is on real data.
fn pattern(len: usize, salt: usize) -> Vec<f16> {
    (0..len)
        .map(|i| {
            let h = (i ^ salt).wrapping_mul(2654435761) >> 9;
            f16::from_f32((h % 1000) as f32 / 1000.0 - 0.5)
        })
        .collect()
}

/// cuBLAS f16 `C[m, n] = A[m, k] · B[k, n]`, median microseconds.
pub fn bench_cublas(
    ctx: &Context,
    blas: &CublasF16,
    flush: &mut L2Flush,
    m: usize,
    n: usize,
    k: usize,
) -> Result<f64, QMatmulError> {
    let a = DeviceBuffer::from_host(ctx, &pattern(m * k, 1))?;
    let b = DeviceBuffer::from_host(ctx, &pattern(k * n, 2))?;
    let mut c = DeviceBuffer::<f16>::zeros(ctx, m * n)?;
    let t = time_runs(ctx, 3, 20, Some(flush), || {
        blas.gemm(m, n, k, &a, &b, &mut c)
    })?;
    Ok(t.median_us)
}

/// Measure `C[m, n] = A[m, k] · dequant(W)` for a weight of `wdtype` (f16 activations, group
/// `group`), trying at most `tune` configurations, against `copy_gbps` (the copy bandwidth
/// measured in the same run); `cublas_us` is carried into the row for the comparison.
#[allow(clippy::too_many_arguments)]
pub fn bench_qmatmul(
    ctx: &Context,
    cublas_us: Option<f64>,
    flush: &mut L2Flush,
    wdtype: DType,
    m: usize,
    n: usize,
    k: usize,
    group: Option<usize>,
    tune: usize,
    copy_gbps: f64,
) -> Result<BenchRow, QMatmulError> {
    let adtype = DType::F16;
    let cands = candidates(wdtype, adtype, group, m, n, k)?;
    // A weight with a simple pattern: quantization cost is host time, not what is measured,
    // and any non-zero codes exercise the same instructions.
    let w: Vec<f32> = (0..k * n)
        .map(|i| ((i.wrapping_mul(2654435761) >> 7) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let zeros = matches!(wdtype, DType::UInt(_));
    let g = group.map_or(Group::PerChannel, Group::Rows);
    let q = QuantizedWeight::quantize(&w, k, n, wdtype, g, adtype, zeros)?;
    drop(w);
    let a = DeviceBuffer::from_host(ctx, &pattern(m * k, 3))?;
    let mut c = DeviceBuffer::<f16>::zeros(ctx, m * n)?;

    let mut best: Option<(QMatmulConfig, Timing, usize)> = None;
    for cfg in cands.into_iter().take(tune.max(1)) {
        let kernel = build(&cfg)?;
        let gpu = GpuQMatmul::new(&kernel)?;
        let weight = DeviceWeight::<f16>::upload(ctx, &prepare(&q, &cfg)?)?;
        let t = time_runs(ctx, 3, 20, Some(flush), || {
            gpu.run(ctx, m, &a, &weight, &mut c).map_err(|e| {
                tilus_runtime::RuntimeError::InvalidArgument {
                    arg: "qmatmul".into(),
                    reason: e.to_string(),
                }
            })
        })?;
        let bytes = weight.bytes() + 2 * (m * k + m * n);
        if best
            .as_ref()
            .is_none_or(|(_, bt, _)| t.median_us < bt.median_us)
        {
            best = Some((cfg, t, bytes));
        }
    }
    let (config, timing, bytes) = best.expect("at least one candidate");
    Ok(BenchRow {
        wdtype,
        m,
        n,
        k,
        config,
        timing,
        bytes,
        floor_us: bytes as f64 / (copy_gbps * 1e3),
        cublas_us,
    })
}
