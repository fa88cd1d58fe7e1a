//! Benchmarking the quantized matmul on the GPU: pick the fastest of a few configurations
//! (a small on-the-spot tuning), and report it against the memory floor and cuBLAS f16.

use super::config::{QMatmulConfig, QMatmulError, QMatmulMethod};
use super::gpu::GpuQMatmul;
use super::program::build;
use crate::DType;
use half::f16;
use tilus_runtime::{time_runs, Context, Cublas, DeviceBuffer, L2Flush, Timing};

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

/// The configurations tried for an `m`-row problem, most promising first: for decode shapes
/// (`m <= 16`) split-k, wide and long tiles and deep pipelines in the order they measured on an
/// H100, then the rest of that space; for larger `m` the default tiles with taller m tiles, and
/// for prefill (`m > 256`) dequantize-then-GEMM first. Every one is valid for the shape.
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
    // Decode shapes start with the measured best; the default tiles come first otherwise.
    let mut out = if m <= 16 || m > 256 {
        vec![]
    } else {
        vec![base]
    };
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
        // Decode: a block is a chain of k / bk dependent pipeline steps, and the dequantization
        // chain of each step needs several warps per scheduler to hide its latency. Split-k
        // (more blocks), wide and long tiles (fewer per-step costs per weight) and deeper
        // pipelines (more bytes in flight) are what wins; the first configurations are the
        // ones that measured best on an H100 across i2, i3, i4, u1 and u4 at m = 1 and i8 at
        // m = 16 (docs/perf-notes.md, entries 2 and 5).
        // (n-tile multiple of the default, bk, warps, stages, split_k)
        const MEASURED_BEST: [(usize, usize, usize, usize, usize); 15] = [
            (2, 128, 4, 4, 4),
            (2, 128, 4, 3, 8),
            (2, 128, 4, 4, 8),
            (4, 128, 4, 3, 8),
            (4, 128, 4, 3, 1),
            (4, 64, 4, 3, 1),
            (4, 128, 4, 3, 4),
            (2, 128, 4, 3, 2),
            (2, 128, 4, 3, 1),
            (2, 64, 4, 4, 4),
            (4, 128, 8, 4, 4),
            (4, 64, 4, 4, 4),
            (1, 128, 4, 4, 4),
            (2, 128, 4, 4, 2),
            (1, 64, 4, 4, 2),
        ];
        let decode = |(wide, bk, warps, stages, split_k): (usize, usize, usize, usize, usize)| {
            QMatmulConfig {
                bn: base.bn * wide,
                bk,
                warps,
                stages,
                split_k,
                ..base
            }
        };
        for c in MEASURED_BEST {
            push(decode(c));
        }
        push(base);
        // Then the rest of the space, for longer tuning. Split 8 gives 4-8x the blocks of the
        // n tiles alone, which also evens out the last wave.
        for split_k in [1, 2, 4, 8] {
            for warps in [4, 8] {
                for bk in [128, 64] {
                    for wide in [2, 1, 4] {
                        for stages in [4, 3] {
                            push(decode((wide, bk, warps, stages, split_k)));
                        }
                    }
                }
            }
        }
    } else {
        if m > 256 {
            // Prefill: dequantize once, then cuBLAS (the fused tiles below are the alternative).
            push(QMatmulConfig {
                method: QMatmulMethod::DequantizeThenGemm,
                ..base
            });
            push(base);
        }
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
    if out.is_empty() {
        out.push(base);
    }
    Ok(out)
}

/// Compile every configuration on `ctx` ahead of timing, on all CPU cores: NVRTC takes about
/// a second per large configuration, and a sweep has hundreds. Later launches find the kernels
/// in the context's memory cache.
pub fn precompile(ctx: &Context, configs: &[QMatmulConfig]) -> Result<(), QMatmulError> {
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.min(configs.len()))
            .map(|_| {
                scope.spawn(|| -> Result<(), QMatmulError> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(cfg) = configs.get(i) else {
                            return Ok(());
                        };
                        GpuQMatmul::new(&build(cfg)?)?.load(ctx)?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("a compile worker panicked"))
    })
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
    blas: &Cublas,
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
    let zeros = matches!(wdtype, DType::UInt(_));
    let weight = super::tune::synthetic_weight::<f16>(ctx, wdtype, n, k, group, zeros)?;
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
