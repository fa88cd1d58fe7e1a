//! Benchmarking the quantized matmul on the GPU: pick the fastest of the first few
//! [`super::tune::candidates`] (a small on-the-spot tuning), and report it against the memory
//! floor and cuBLAS f16.

use super::config::{config_err, QMatmulConfig, QMatmulError};
use super::gpu::GpuQMatmul;
use super::program::build;
use super::tune::{candidates_up_to, synthetic_weight};
use crate::element::Activation;
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
    /// A device copy moving the same bytes (`bytes / 2` read and written), timed the same way:
    /// what any one launch moving them costs, its start, cold first loads and tail included.
    /// Small layers judge against it: at 8192 x 8192 it is 30-60% of the floor.
    pub copy_us: f64,
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
    /// `copy_us` over the time: how close to a same-size copy the kernel runs.
    pub fn percent_of_copy(&self) -> f64 {
        100.0 * self.copy_us / self.timing.median_us
    }
    pub fn speedup_over_cublas(&self) -> Option<f64> {
        self.cublas_us.map(|c| c / self.timing.median_us)
    }
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

/// Non-constant, non-zero data (a hash pattern in [-0.5, 0.5)): zeros or constants can make a
/// GEMM look faster than it is on real data.
fn pattern<T: Activation>(len: usize, salt: usize) -> Vec<T> {
    (0..len)
        .map(|i| {
            let h = (i ^ salt).wrapping_mul(2654435761) >> 9;
            T::from_f32((h % 1000) as f32 / 1000.0 - 0.5)
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
    let a = DeviceBuffer::from_host(ctx, &pattern::<f16>(m * k, 1))?;
    let b = DeviceBuffer::from_host(ctx, &pattern::<f16>(k * n, 2))?;
    let mut c = DeviceBuffer::<f16>::zeros(ctx, m * n)?;
    let t = time_runs(ctx, 3, 20, Some(flush), || {
        blas.gemm(m, n, k, &a, &b, &mut c)
    })?;
    Ok(t.median_us)
}

/// Measure `C[m, n] = A[m, k] · dequant(W)` for a weight of `wdtype` (activations, scales and
/// output of type `T`: f16 or bf16; group `group`), trying at most `tune` configurations,
/// against `copy_gbps` (the copy bandwidth measured in the same run); `cublas_us` is carried
/// into the row for the comparison.
#[allow(clippy::too_many_arguments)]
pub fn bench_qmatmul<T: Activation>(
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
    let cands = tuned_head(ctx, wdtype, T::DTYPE, group, m, n, k, tune)?;
    bench_configs::<T>(ctx, cublas_us, flush, m, n, k, &cands, copy_gbps)
}

/// The first `tune` (at least one) configurations of the tuning order that run on `ctx`'s
/// device (the warpgroup MMA is left out where the device lacks it: at most a third of the
/// list), as [`bench_qmatmul`] times them.
#[allow(clippy::too_many_arguments)]
pub fn tuned_head(
    ctx: &Context,
    wdtype: DType,
    adtype: DType,
    group: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
    tune: usize,
) -> Result<Vec<QMatmulConfig>, QMatmulError> {
    Ok(
        candidates_up_to(wdtype, adtype, group, m, n, k, tune.max(1) * 2)?
            .into_iter()
            .filter(|c| super::runs_on(c, ctx.arch()))
            .map(|c| c.for_multiprocessors(ctx.device().multiprocessors as usize))
            .take(tune.max(1))
            .collect(),
    )
}

/// [`bench_qmatmul`] over the given configurations (at least one; all of one weight type,
/// activation type and group, e.g. from `tilus bench qmatmul --config`), each checked against
/// the shape and the device first.
#[allow(clippy::too_many_arguments)]
pub fn bench_configs<T: Activation>(
    ctx: &Context,
    cublas_us: Option<f64>,
    flush: &mut L2Flush,
    m: usize,
    n: usize,
    k: usize,
    cands: &[QMatmulConfig],
    copy_gbps: f64,
) -> Result<BenchRow, QMatmulError> {
    let Some(first) = cands.first() else {
        return Err(config_err("configs", "no configuration to time"));
    };
    let (wdtype, group) = (first.wdtype, (first.group_rows, first.has_zeros));
    for c in cands {
        c.check_shape(m, n, k)?;
        if (c.wdtype, c.adtype, (c.group_rows, c.has_zeros)) != (wdtype, T::DTYPE, group) {
            return Err(config_err(
                "configs",
                format!(
                    "{}: every configuration of one benchmark has the weight type {wdtype}, \
                     the activation type {}, and the same group and zero points",
                    c.wdtype,
                    T::DTYPE
                ),
            ));
        }
        if !super::runs_on(c, ctx.arch()) {
            return Err(config_err(
                "method",
                format!("{:?} does not run on {}", c.method, ctx.arch()),
            ));
        }
    }
    // Timing needs operands of the right sizes with realistic (random, non-zero) contents, not
    // a particular weight: any bytes are a valid re-laid-out weight, so the codes are random
    // bytes and quantizing a 470M-element matrix on the host is skipped. Correctness is the
    // tests' job (tests/gpu_qmatmul.rs).
    let (group, zeros) = group;
    let weight = synthetic_weight::<T>(ctx, wdtype, n, k, group, zeros)?;
    let a = DeviceBuffer::from_host(ctx, &pattern::<T>(m * k, 3))?;
    let mut c = DeviceBuffer::<T>::zeros(ctx, m * n)?;

    let mut best: Option<(QMatmulConfig, Timing, usize)> = None;
    let mut tried = Vec::new();
    for &cfg in cands {
        let kernel = build(&cfg)?;
        let gpu = GpuQMatmul::new(&kernel)?;
        gpu.reserve(ctx, m, n)?;
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
    let copy = tilus_runtime::copy_time(ctx, bytes.div_ceil(2), Some(flush))?;
    Ok(BenchRow {
        wdtype,
        m,
        n,
        k,
        config,
        timing,
        bytes,
        floor_us: bytes as f64 / (copy_gbps * 1e3),
        copy_us: copy.median_us,
        cublas_us,
        tried,
    })
}

/// What one layer call costs besides its kernels: [`bench_launch`]'s measurements.
#[derive(Clone, Debug)]
pub struct LaunchBench {
    /// The tuned configuration of the layer's `m` bucket.
    pub config: QMatmulConfig,
    /// Calls timed in each measurement.
    pub calls: usize,
    /// Host time to queue one `forward_into` (argument checks, plan lookup, launches).
    pub host_us: f64,
    /// GPU time per call of `calls` calls queued back to back (no flush between them).
    pub eager_us: f64,
    /// GPU time of one call timed alone, after the same calls (L2 as they left it).
    pub single_us: f64,
    /// Kernel launches per call (one, also with split-k: the last block of each output tile
    /// reduces; the old split-k path launched a second kernel).
    pub launches: usize,
    /// GPU time per launch of the configuration's kernel alone (a `GpuQMatmul` of the same
    /// configuration and weight, no layer), `calls` launches queued back to back: the
    /// kernel's own time plus the gap between back-to-back launches. `single_us - kernel_us`
    /// is what one forward costs besides its kernel.
    pub kernel_us: f64,
    /// GPU time per call of the same `calls` calls captured in one CUDA graph and replayed
    /// (`None` when the context cannot capture: it is on the legacy default stream).
    pub graph_us: Option<f64>,
}

/// The launch cost of a tuned `GpuQuantizedLinear` (f16, a pattern weight of `wdtype`): the
/// host time to queue one `forward_into`, and the GPU time per call of `calls` calls queued back
/// to back against one call timed alone (the difference is what the gaps between launches
/// cost), and the configuration's kernel alone, launched back to back without the layer. No
/// L2 flush: a layer that fits in L2 stays there, in every measurement.
#[allow(clippy::too_many_arguments)]
pub fn bench_launch(
    ctx: &std::sync::Arc<Context>,
    wdtype: DType,
    m: usize,
    n: usize,
    k: usize,
    group: crate::quant::Group,
    calls: usize,
) -> Result<LaunchBench, QMatmulError> {
    use crate::kernels::linear::GpuQuantizedLinear;
    let w: Vec<f32> = pattern::<f16>(k * n, 5)
        .iter()
        .map(|v| v.to_f32())
        .collect();
    let layer = GpuQuantizedLinear::<f16>::new(ctx, &w, k, n, wdtype, group)?;
    let x = DeviceBuffer::from_host(ctx, &pattern::<f16>(m * k, 6))?;
    let mut y = DeviceBuffer::<f16>::zeros(ctx, m * n)?;
    let config = layer.plan(m)?.config;
    let as_runtime = |e: QMatmulError| tilus_runtime::RuntimeError::InvalidArgument {
        arg: "forward".into(),
        reason: e.to_string(),
    };
    let mut run = |count: usize| -> Result<(), tilus_runtime::RuntimeError> {
        for _ in 0..count {
            layer.forward_into(&x, m, &mut y).map_err(as_runtime)?;
        }
        Ok(())
    };
    run(calls)?;
    ctx.synchronize()?;
    let started = std::time::Instant::now();
    run(calls)?;
    let host_us = started.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let eager = time_runs(ctx, 1, 5, None, || run(calls))?;
    let single = time_runs(ctx, 3, 20, None, || run(1))?;
    // The same calls recorded once and replayed as one graph: no host work per call.
    let graph_us = if ctx.can_capture() {
        let graph = ctx.capture(|| run(calls))?;
        graph.upload()?;
        let replay = time_runs(ctx, 1, 5, None, || graph.launch())?;
        Some(replay.median_us / calls as f64)
    } else {
        None
    };
    // The same kernel without the layer: its own buffers, reserved before timing.
    let prepared = super::prepare(layer.quantized(), &config)?;
    let weight = super::DeviceWeight::<f16>::upload(ctx, &prepared)?;
    let gpu = GpuQMatmul::new(&build(&config)?)?;
    gpu.reserve(ctx, m, n)?;
    let mut bare = |count: usize| -> Result<(), tilus_runtime::RuntimeError> {
        for _ in 0..count {
            gpu.run(ctx, m, &x, &weight, &mut y).map_err(as_runtime)?;
        }
        Ok(())
    };
    bare(calls)?;
    let kernel = time_runs(ctx, 1, 5, None, || bare(calls))?;
    Ok(LaunchBench {
        config,
        calls,
        host_us,
        eager_us: eager.median_us / calls as f64,
        single_us: single.median_us,
        launches: 1,
        kernel_us: kernel.median_us / calls as f64,
        graph_us,
    })
}

/// One decode step of weight-only layers at one weight type and `m` ([`bench_step`]).
#[derive(Clone, Debug)]
pub struct StepBench {
    pub wdtype: DType,
    pub m: usize,
    /// `(n, k, config, alone)`: each layer's shape, the configuration its plan picked at `m`,
    /// and its forward timed alone (the L2 flushed before each run).
    pub layers: Vec<(usize, usize, QMatmulConfig, Timing)>,
    /// The forwards queued back to back, each an ordinary launch.
    pub step: Timing,
    /// The same step with every layer after the first launched as a programmatic dependent of
    /// the one before ([`GpuQuantizedLinear::forward_into_dependent`]).
    ///
    /// [`GpuQuantizedLinear::forward_into_dependent`]: crate::kernels::linear::GpuQuantizedLinear::forward_into_dependent
    pub dependent: Timing,
    /// The layers' floors added (weights, scales, zero points, activations and outputs over
    /// the copy bandwidth).
    pub floor_us: f64,
}

/// A decode step of `GpuQuantizedLinear<T>` layers of `wdtype` (quantized from a pattern
/// weight; each planned at `m` by its own tuner), one per shape `(n, k)` in order, each with
/// its own input: queued back to back with the L2 flushed before each step, once as ordinary
/// launches and once with every layer after the first a programmatic dependent of the one
/// before (the first follows the flush, which no real layer follows, so it stays ordinary).
/// Each layer is also timed alone. The two steps' outputs are compared bit for bit (the
/// outputs poisoned in between): an error if they differ.
#[allow(clippy::too_many_arguments)]
pub fn bench_step<T: Activation>(
    ctx: &std::sync::Arc<Context>,
    flush: &mut L2Flush,
    wdtype: DType,
    m: usize,
    shapes: &[(usize, usize)],
    group: crate::quant::Group,
    runs: usize,
    copy_gbps: f64,
) -> Result<StepBench, QMatmulError> {
    use crate::kernels::linear::GpuQuantizedLinear;
    use crate::kernels::timing::time_fallible;
    let mut layers = Vec::new();
    let mut floor_us = 0.0;
    for (i, &(n, k)) in shapes.iter().enumerate() {
        let w: Vec<f32> = crate::kernels::timing::pattern(k * n, 5 + i);
        let layer = GpuQuantizedLinear::<T>::new(ctx, &w, k, n, wdtype, group)?;
        layer.reserve(m)?;
        let x = DeviceBuffer::from_host(ctx, &pattern::<T>(m * k, 6 + i))?;
        let y = DeviceBuffer::<T>::zeros(ctx, m * n)?;
        let q = layer.quantized();
        let weight_bytes =
            q.codes.len() + 2 * q.scales.len() + q.zeros.as_ref().map_or(0, |z| 2 * z.len());
        let bytes = weight_bytes + 2 * (m * k + m * n);
        floor_us += bytes as f64 / (copy_gbps * 1e3);
        layers.push((layer, x, y));
    }
    let mut alone = Vec::new();
    for (layer, x, y) in &mut layers {
        let t = time_fallible(
            ctx,
            3,
            runs,
            Some(&mut *flush),
            || layer.forward_into(x, m, y),
            QMatmulError::from,
        )?;
        let config = layer.plan(m)?.config;
        alone.push((layer.n(), layer.k(), config, t));
    }
    type Layers<T> = [(GpuQuantizedLinear<T>, DeviceBuffer<T>, DeviceBuffer<T>)];
    let step = |layers: &mut Layers<T>, dependent: bool| -> Result<(), QMatmulError> {
        for (i, (layer, x, y)) in layers.iter_mut().enumerate() {
            if dependent && i > 0 {
                layer.forward_into_dependent(x, m, y)?;
            } else {
                layer.forward_into(x, m, y)?;
            }
        }
        Ok(())
    };
    let mut timed = |dependent: bool| {
        time_fallible(
            ctx,
            3,
            runs,
            Some(&mut *flush),
            || step(&mut layers, dependent),
            QMatmulError::from,
        )
    };
    let ordinary = timed(false)?;
    let dependent = timed(true)?;
    // The same bits both ways: the ordinary step's outputs, then the dependent step's into
    // poisoned buffers (0xFFFF is NaN in f16 and bf16).
    step(&mut layers, false)?;
    let bytes = |y: &DeviceBuffer<T>| y.to_host().map(|h| T::to_bytes(&h));
    let expect = layers
        .iter()
        .map(|(_, _, y)| bytes(y))
        .collect::<Result<Vec<_>, _>>()?;
    let nan = T::from_f32(f32::NAN);
    for (_, _, y) in &mut layers {
        y.fill(nan)?;
    }
    step(&mut layers, true)?;
    for ((layer, _, y), want) in layers.iter().zip(&expect) {
        if bytes(y)? != *want {
            return Err(config_err(
                "dependent",
                format!(
                    "the {}x{} layer's dependent launch differs from its ordinary one",
                    layer.n(),
                    layer.k()
                ),
            ));
        }
    }
    Ok(StepBench {
        wdtype,
        m,
        layers: alone,
        step: ordinary,
        dependent,
        floor_us,
    })
}

/// [`bench_step`]'s rows: the step's time ordinary and dependent against its floor, and the
/// layers' lone times added.
pub fn step_table(copy_gbps: f64, rows: &[StepBench]) -> String {
    let mut out = format!(
        "tilus decode step: the layers' forwards queued back to back, one L2 flush a step; copy \
         bandwidth {copy_gbps:.0} GB/s; floor = the layers' floors added; alone = the layers \
         timed one by one (flushed), added; dependent = each layer after the first launched as \
         the previous one's programmatic dependent\n"
    );
    out += &format!(
        "{:<7} {:>4} {:>9} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7} {:>6}  layers (alone us, config)\n",
        "wdtype",
        "m",
        "floor us",
        "alone us",
        "%floor",
        "step us",
        "%floor",
        "dep us",
        "%floor",
        "gain"
    );
    for r in rows {
        let alone: f64 = r.layers.iter().map(|l| l.3.median_us).sum();
        let each = r
            .layers
            .iter()
            .map(|(n, k, c, t)| format!("{n}x{k} {:.1} {:?}", t.median_us, c.method))
            .collect::<Vec<_>>()
            .join(", ");
        let (s, d) = (r.step.median_us, r.dependent.median_us);
        out += &format!(
            "{:<7} {:>4} {:>9.1} {:>9.1} {:>6.1}% {:>9.1} {:>6.1}% {:>9.1} {:>6.1}% {:>5.2}x  {each}\n",
            r.wdtype.to_string(),
            r.m,
            r.floor_us,
            alone,
            100.0 * r.floor_us / alone,
            s,
            100.0 * r.floor_us / s,
            d,
            100.0 * r.floor_us / d,
            s / d,
        );
    }
    out
}
