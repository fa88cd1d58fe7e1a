//! Benchmarking the quantized matmul on the GPU: pick the fastest of a few configurations
//! (a small on-the-spot tuning), and report it against the memory floor and cuBLAS f16.

use super::config::{QMatmulConfig, QMatmulError};
use super::gpu::{DeviceWeight, GpuQMatmul};
use super::program::build;
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
    /// Every configuration tried, with its median time in microseconds.
    pub tried: Vec<(QMatmulConfig, f64)>,
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
    let mut push = |cfg: QMatmulConfig| {
        if cfg.tiling().is_ok()
            && cfg.check_shape(m, n, k).is_ok()
            && build(&cfg).is_ok()
            && !out.contains(&cfg)
        {
            out.push(cfg);
        }
    };
    if m <= 16 {
        // Decode: one row of blocks, each a chain of k / bk dependent pipeline steps. Longer k
        // tiles and wider n tiles amortize the per-step cost (barrier, A fragments, copy
        // issue) over more weights; deeper pipelines keep more bytes in flight.
        for bk in [128, 64] {
            for wide in [2, 1, 4] {
                for stages in [4, 3] {
                    push(QMatmulConfig {
                        bk,
                        bn: base.bn * wide,
                        stages,
                        ..base
                    });
                }
            }
        }
    } else {
        let shapes: &[(usize, usize, usize)] = if m <= 256 {
            // (bm, warps, stages)
            &[(32, 4, 3), (64, 4, 3)]
        } else {
            &[(64, 4, 3), (128, 8, 3), (128, 4, 3)]
        };
        for &(bm, warps, stages) in shapes {
            for bk in [128, base.bk] {
                push(QMatmulConfig {
                    bm,
                    warps,
                    stages,
                    bk,
                    ..base
                });
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

/// Random codes, scales in [0.5, 1) and (with `zeros`) small zero points, in kernel layout.
fn random_weight(
    ctx: &Context,
    wdtype: DType,
    n: usize,
    k: usize,
    groups: usize,
    zeros: bool,
) -> Result<DeviceWeight<f16>, QMatmulError> {
    let bytes = tilus_core::storage::packed_len(wdtype, k * n);
    let mut state = 0x9e3779b97f4a7c15u64;
    let codes: Vec<u8> = (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let scales: Vec<f16> = pattern(groups * n, 5)
        .into_iter()
        .map(|v| f16::from_f32(v.to_f32() * 0.5 + 0.75))
        .collect();
    Ok(DeviceWeight {
        k,
        n,
        b: DeviceBuffer::from_host(ctx, &codes)?,
        scales: DeviceBuffer::from_host(ctx, &scales)?,
        zeros: if zeros {
            let z: Vec<f16> = (0..groups * n)
                .map(|i| f16::from_f32((i % 7) as f32))
                .collect();
            Some(DeviceBuffer::from_host(ctx, &z)?)
        } else {
            None
        },
    })
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
    // Timing needs operands of the right sizes with realistic (random, non-zero) contents, not
    // a particular weight: any bytes are a valid re-laid-out weight, so the codes are random
    // bytes and quantizing a 470M-element matrix on the host is skipped. Correctness is the
    // tests' job (tests/gpu_qmatmul.rs).
    let groups = k / group.unwrap_or(k);
    let weight = random_weight(ctx, wdtype, n, k, groups, matches!(wdtype, DType::UInt(_)))?;
    let a = DeviceBuffer::from_host(ctx, &pattern(m * k, 3))?;
    let mut c = DeviceBuffer::<f16>::zeros(ctx, m * n)?;

    let mut best: Option<(QMatmulConfig, Timing, usize)> = None;
    let mut tried = Vec::new();
    for cfg in cands.into_iter().take(tune.max(1)) {
        let kernel = build(&cfg)?;
        let gpu = GpuQMatmul::new(&kernel)?;
        let t = time_runs(ctx, 3, 20, Some(flush), || {
            gpu.run(ctx, m, &a, &weight, &mut c).map_err(|e| {
                tilus_runtime::RuntimeError::InvalidArgument {
                    arg: "qmatmul".into(),
                    reason: e.to_string(),
                }
            })
        })?;
        let bytes = weight.bytes() + 2 * (m * k + m * n);
        tried.push((cfg, t.median_us));
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
        tried,
    })
}
