//! `tilus bench vq`: the codebook-centric VQ-GEMV per format, shape and `m`, against the
//! memory floor, the naive GC kernel, cuBLAS f16 and the project's element-wise quantized
//! kernel of the same bit width, all measured in the same run.
//!
//! Timings are medians of CUDA-event timings with the L2 flushed before each run. The floor is
//! the unavoidable traffic: the codes as the kernel stores them (8, 12 or 16 bits each) + the
//! f16 codebooks (and scales) + the f16 activations (`2 m k`) + the f16 output (`2 m n`), over
//! the device-to-device copy bandwidth measured in the same run. The weights are random (codes
//! uniform over the entries, the cache's worst case, or skewed with `--skewed`; values do not
//! change the time), since
//! k-means on a 470M-element matrix would only cost time; correctness is the tests' job
//! (`tests/vq.rs`, `tests/gpu_vq.rs`). A split k added by atomics includes the finalize
//! kernel's launch.

use super::{VqCache, VqLinear};
use crate::kernels::timing::time_launches;
use crate::vq::{VqConfig, VqWeight};
use half::f16;
use tilus_runtime::{Context, DeviceBuffer, L2Flush, Timing};

/// The Llama-2/3-70B weight shapes `(n, k)` of the issue: gate+up, down, o.
pub const LLAMA70B_SHAPES: [(usize, usize); 3] = [(57344, 8192), (8192, 28672), (8192, 8192)];

/// The formats the bench runs by default (the weight formats the GEMV serves).
pub const CONFIGS: [VqConfig; 3] = [VqConfig::GPTVQ_2, VqConfig::AQLM_3, VqConfig::QUIP_4];

/// The layer's knobs a bench run overrides (`None`: the layer's choice).
#[derive(Clone, Copy, Debug, Default)]
pub struct VqKnobs {
    pub cache: Option<VqCache>,
    pub stages: Option<usize>,
    pub split: Option<usize>,
    pub warps: Option<usize>,
    pub product: Option<usize>,
    /// How a split k adds its partials (`true`: in split order; `false`: by atomics).
    pub ordered: Option<bool>,
    /// One token by tables: on, off or a tiling, instead of the layer's rule.
    pub lut: Option<LutKnob>,
    /// Autotune the direct kernel's knobs ([`super::tune`]) after the ones above.
    pub tune: bool,
    /// Time prefill's dequantize-then-GEMM path too ([`super::GpuVqLinear::forward_dense_into`]).
    pub dense: bool,
    /// Time the three-tier codebook cache ([`super::cache::vq_gemv_cached`]) at every point of
    /// its tuning space ([`super::tune::tune_tiers`]).
    pub tiers: bool,
    /// Skewed random codes (code `⌊u² · entries⌋`, entries reordered by frequency: the hottest
    /// 1/8 of the entries take 35% of the look-ups) instead of uniform ones.
    pub skewed: bool,
}

/// The three-tier cache's points at one row (`tilus bench vq --tiers`).
#[derive(Clone, Debug)]
pub struct TierPoints {
    /// The tiers [`super::cache::CacheTiers::for_kernel`] chooses from the kernel's slack.
    pub rule: super::cache::CacheTiers,
    /// Every point the tuner measured, in its order, with its median (`None`: it failed).
    pub points: Vec<(super::cache::CacheTiers, Option<f64>)>,
    /// The tuner's winner.
    pub best: super::cache::CacheTiers,
}

impl TierPoints {
    pub fn us(&self, t: super::cache::CacheTiers) -> Option<f64> {
        self.points.iter().find(|(p, _)| *p == t).and_then(|p| p.1)
    }
}

/// Tokens up to which the naive GC kernel is timed: above them it takes seconds a point (it
/// gathers every codebook value from global memory for every 16 tokens).
pub const NAIVE_MAX_M: usize = 16;

/// `tilus bench vq --lut`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LutKnob {
    On,
    Off,
    Tiling(super::lut::LutTiling),
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct VqBenchRow {
    pub config: &'static str,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub cache: VqCache,
    /// Stages of the kernel's ring of activations and codes.
    pub stages: usize,
    /// Warps per block.
    pub warps: usize,
    /// The product (`TR`: 0, 1, 2, 3).
    pub product: usize,
    /// The k split (1: none).
    pub split: usize,
    /// How a split k added its partials (`true`: in split order, one launch; `false`: by
    /// atomics, then the finalize kernel).
    pub ordered: bool,
    /// The layer's forward: [`super::kernel::vq_gemv`] with `cache`, or the tables of
    /// [`super::lut`] where `lut` says so.
    pub cached: Timing,
    /// The tables' tiling, where the forward took them.
    pub lut: Option<super::lut::LutTiling>,
    /// The direct kernel on the same token, where the forward took the tables.
    pub direct: Option<Timing>,
    /// The naive GC kernel (up to [`NAIVE_MAX_M`] tokens).
    pub naive: Option<Timing>,
    /// The dense weight and one cuBLAS GEMM on it, where `VqKnobs::dense` asked.
    pub dense: Option<Timing>,
    /// The fused VQ-GEMM ([`super::gemm::vq_gemm`]) at each block height it takes (64, 128,
    /// 256 tokens), where `VqKnobs::dense` asked and the format has one.
    pub fused: Vec<(usize, Timing)>,
    /// The three-tier cache's points, where `VqKnobs::tiers` asked and the format has the
    /// kernel.
    pub tiers: Option<TierPoints>,
    /// The floor's bytes (module docs).
    pub bytes: usize,
    pub floor_us: f64,
    pub cublas_us: Option<f64>,
    /// The element-wise kernel of `elementwise_bits` bits (`u<bits>` weight, per-channel
    /// scales, f16 activations), best of 3 configurations.
    pub elementwise_us: Option<f64>,
    pub elementwise_bits: u32,
}

impl VqBenchRow {
    pub fn percent_of_floor(&self) -> f64 {
        100.0 * self.floor_us / self.cached.median_us
    }
    /// The fastest block height of the fused GEMM and its time.
    pub fn best_fused(&self) -> Option<(usize, f64)> {
        self.fused
            .iter()
            .map(|(bm, t)| (*bm, t.median_us))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / (self.cached.median_us * 1e-6) / 1e9
    }
}

/// The element-wise width compared with a format: its bits per value, rounded up.
pub fn elementwise_bits(c: VqConfig) -> u32 {
    c.bits_per_value().ceil() as u32
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Measure one format at `(m, n, k)`: the cached kernel (with `cache`, or the layer's default)
/// and the GC kernel; the cuBLAS and element-wise times are carried.
#[allow(clippy::too_many_arguments)]
pub fn bench_vq(
    ctx: &std::sync::Arc<Context>,
    flush: &mut L2Flush,
    config: VqConfig,
    m: usize,
    n: usize,
    k: usize,
    runs: usize,
    copy_gbps: f64,
    knobs: VqKnobs,
    cublas_us: Option<f64>,
    elementwise_us: Option<f64>,
) -> Result<VqBenchRow, String> {
    let w = VqWeight::random(config, n, k, 0x18, knobs.skewed).map_err(err)?;
    let bytes = w.kernel_code_bytes() + w.codebook_bytes() + 2 * m * k + 2 * m * n;
    // `vq us` is the VQ kernel's at every m; prefill's paths are their own columns (`dense`,
    // `fused`).
    let mut layer = VqLinear::new(w)
        .map_err(err)?
        .with_prefill_from(usize::MAX)
        .map_err(err)?;
    let VqKnobs {
        cache,
        stages,
        split,
        warps,
        product,
        ordered,
        lut,
        tune,
        dense,
        tiers,
        skewed: _,
    } = knobs;
    if let Some(s) = stages {
        layer = layer.with_stages(s).map_err(err)?;
    }
    if let Some(c) = cache {
        layer = layer.with_cache(c).map_err(err)?;
    }
    if let Some(w) = warps {
        layer = layer.with_warps(w).map_err(err)?;
    }
    if let Some(p) = product {
        layer = layer.with_product(p).map_err(err)?;
    }
    if let Some(s) = split {
        layer = layer.with_split(s).map_err(err)?;
    }
    if let Some(o) = ordered {
        layer = layer.with_ordered_split(o);
    }
    layer = match lut {
        None => layer,
        Some(LutKnob::On) => layer.with_lut(true).map_err(err)?,
        Some(LutKnob::Off) => layer.with_lut(false).map_err(err)?,
        Some(LutKnob::Tiling(t)) => layer.with_lut_tiling(t).map_err(err)?,
    };
    if tune {
        let (tuned, point, outcome) = super::tune::tune(ctx, &layer, m).map_err(err)?;
        eprintln!(
            "{} m={m} {n}x{k}: tuned {point} ({})",
            config.name,
            if outcome.reused() {
                "remembered".to_string()
            } else {
                format!("{} points measured", outcome.record.candidates.len())
            }
        );
        layer = tuned;
    }
    let gpu = layer.to_gpu(ctx).map_err(err)?;
    let x: Vec<f16> = (0..m * k)
        .map(|i| f16::from_f32(((i * 2654435761) >> 9) as f32 % 1000.0 / 1000.0 - 0.5))
        .collect();
    let xd = DeviceBuffer::from_host(ctx, &x).map_err(err)?;
    let mut y = DeviceBuffer::<f16>::zeros(ctx, m * n).map_err(err)?;
    let cached = time_launches(ctx, flush, runs, || {
        gpu.forward_into(&xd, m, &mut y, false).map_err(err)
    })?;
    let naive = if m <= NAIVE_MAX_M {
        Some(time_launches(ctx, flush, runs, || {
            gpu.forward_into(&xd, m, &mut y, true).map_err(err)
        })?)
    } else {
        None
    };
    let dense = if dense {
        let blas = tilus_runtime::Cublas::new(ctx).map_err(err)?;
        let mut w = DeviceBuffer::<f16>::zeros(ctx, n * k).map_err(err)?;
        Some(time_launches(ctx, flush, runs, || {
            gpu.forward_dense_into(&xd, m, &mut y, &mut w, &blas)
                .map_err(err)
        })?)
    } else {
        None
    };
    let mut fused = Vec::new();
    // `dense` is timed exactly where prefill's paths were asked for.
    if dense.is_some() {
        for bm in [64, 128, 256] {
            if layer.gemm_config(m, Some(bm)).is_ok() {
                let t = time_launches(ctx, flush, runs, || {
                    gpu.forward_gemm_into(&xd, m, &mut y, Some(bm)).map_err(err)
                })?;
                fused.push((bm, t));
            }
        }
    }
    let tiers = if tiers && super::cache::cached_refusal(config, n, k).is_none() {
        let rule = super::cache::CacheTiers::for_kernel(config);
        let cw = super::cache::CachedWeight::new(layer.weight(), rule).map_err(err)?;
        let (best, outcome) = super::tune::tune_tiers(ctx, &cw, m).map_err(err)?;
        let candidates = super::cache::CacheTiers::candidates(config);
        let points = candidates
            .iter()
            .zip(&outcome.record.candidates)
            .map(|(t, r)| (*t, r.median_us))
            .collect();
        Some(TierPoints { rule, points, best })
    } else {
        None
    };
    let tiling = layer.lut_tiling(m);
    let direct = match tiling {
        Some(_) => {
            let direct = layer
                .clone()
                .with_lut(false)
                .map_err(err)?
                .to_gpu(ctx)
                .map_err(err)?;
            Some(time_launches(ctx, flush, runs, || {
                direct.forward_into(&xd, m, &mut y, false).map_err(err)
            })?)
        }
        None => None,
    };
    Ok(VqBenchRow {
        config: config.name,
        m,
        n,
        k,
        cache: layer.cache(),
        stages: layer.stages(),
        warps: layer.warps(),
        product: layer.config(m).TR as usize,
        split: layer.config(m).SPLIT as usize,
        ordered: layer.config(m).ORDERED == 1,
        cached,
        lut: tiling,
        direct,
        naive,
        dense,
        fused,
        tiers,
        bytes,
        floor_us: bytes as f64 / (copy_gbps * 1e9) * 1e6,
        cublas_us,
        elementwise_us,
        elementwise_bits: elementwise_bits(config),
    })
}

/// The table `tilus bench vq` prints.
pub fn table(copy_gbps: f64, rows: &[VqBenchRow]) -> String {
    let mut s = format!(
        "tilus vq (codebook-centric VQ-GEMV); copy bandwidth {copy_gbps:.0} GB/s; floor = \
         (codes + f16 codebooks/scales + f16 activations + f16 output) / that; L2 flushed\n\
         GC = the naive kernel (codebook gathered from global memory per element); elem = the \
         project's element-wise kernel, u<bits> weight, f16 activations; cache = codebook copies in shared memory, warps, product (t0: 16 tokens, t1/t2: transposed, 8/16, t3: transposed with paired rows, 4), stages, k split (atomic: partials added by atomics, else in split order); lut = one token by tables (warps x rows per thread x chunks per block), direct = the direct kernel on the same token\n\
         dense = the dense weight (vq_dequant) and one cuBLAS GEMM on it, fused = the fused VQ-GEMM (vq_gemm, best block height @ tokens), both where --dense asked; GC is timed up to 16 tokens\n\
         {:<7} {:>4} {:>12} {:>9} {:>9} {:>9} {:>12} {:>7} {:>7} {:>8} {:>7} {:>10} {:>8} {:>9} {:>7}  cache\n",
        "config",
        "m",
        "n x k",
        "vq us",
        "direct us",
        "dense us",
        "fused us",
        "GB/s",
        "%floor",
        "GC us",
        "vs GC",
        "cuBLAS us",
        "vs f16",
        "elem us",
        "vs elem"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |c| format!("{c:.1}"));
    for r in rows {
        let t = r.cached.median_us;
        let ratio = |v: Option<f64>| v.map_or("-".to_string(), |c| format!("{:.2}x", c / t));
        s += &format!(
            "{:<7} {:>4} {:>12} {:>9.1} {:>9} {:>9} {:>12} {:>7.0} {:>6.1}% {:>8} {:>7} {:>10} {:>8} {:>9} {:>7}  {}\n",
            r.config,
            r.m,
            format!("{}x{}", r.n, r.k),
            t,
            opt(r.direct.as_ref().map(|d| d.median_us)),
            opt(r.dense.as_ref().map(|d| d.median_us)),
            r.best_fused()
                .map_or("-".to_string(), |(bm, us)| format!("{us:.1}@{bm}")),
            r.gb_per_s(),
            r.percent_of_floor(),
            opt(r.naive.as_ref().map(|g| g.median_us)),
            ratio(r.naive.as_ref().map(|g| g.median_us)),
            opt(r.cublas_us),
            ratio(r.cublas_us),
            format!("u{}:{}", r.elementwise_bits, opt(r.elementwise_us)),
            ratio(r.elementwise_us),
            match r.lut {
                Some(l) => format!("lut {}x{}x{}", l.warps, l.rs, l.per),
                None => format!(
                    "x{} w{} t{} s{} k/{}{}",
                    r.cache.replicas,
                    r.warps,
                    r.product,
                    r.stages,
                    r.split,
                    if r.split > 1 && !r.ordered { " atomic" } else { "" },
                ),
            },
        );
    }
    s
}

/// The table of the three-tier codebook cache's points (`tilus bench vq --tiers`): each row's
/// rule point, best point and every point measured, against the layer's own kernel (`vq us`),
/// the naive GC kernel and the floor, all from the same run.
pub fn tiers_table(rows: &[VqBenchRow]) -> String {
    let mut s = String::from(
        "three-tier codebook cache (vq_gemv_cached: CUDA cores, one token a block row; rNsM = N \
         entries in registers, read by warp shuffles, M in shared memory, the rest from global \
         memory); rule = from the kernel's slack, best = the tuner's\n",
    );
    s += &format!(
        "{:<7} {:>4} {:>12} {:>10} {:>9} {:>12} {:>9} {:>7} {:>8} {:>8}  points (us)\n",
        "config", "m", "n x k", "rule", "rule us", "best", "best us", "%floor", "vs GC", "vs vq"
    );
    for r in rows {
        let Some(t) = &r.tiers else { continue };
        let best = t.us(t.best);
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |c| format!("{c:.1}"));
        let ratio = |base: Option<f64>| match (base, best) {
            (Some(b), Some(us)) => format!("{:.2}x", b / us),
            _ => "-".to_string(),
        };
        let points: Vec<String> = t
            .points
            .iter()
            .map(|(p, us)| format!("{p}:{}", opt(*us)))
            .collect();
        s += &format!(
            "{:<7} {:>4} {:>12} {:>10} {:>9} {:>12} {:>9} {:>6.1}% {:>8} {:>8}  {}\n",
            r.config,
            r.m,
            format!("{}x{}", r.n, r.k),
            t.rule.to_string(),
            opt(t.us(t.rule)),
            t.best.to_string(),
            opt(best),
            best.map_or(0.0, |us| 100.0 * r.floor_us / us),
            ratio(r.naive.as_ref().map(|g| g.median_us)),
            ratio(Some(r.cached.median_us)),
            points.join(" ")
        );
    }
    s
}

/// The formats of `--configs` (names as [`VqConfig::by_name`] reads them); errors name the
/// argument.
pub fn parse_configs(list: &str) -> Result<Vec<VqConfig>, String> {
    list.split(',')
        .map(|c| {
            let cfg = VqConfig::by_name(c.trim()).ok_or_else(|| {
                format!(
                    "argument `--configs`: `{c}` is not one of gptvq2, aqlm2x8, aqlm3, quip4 (cq2 \
                     and cq4 are KV-cache formats)"
                )
            })?;
            if cfg.channel_scale || matches!(cfg.scope, crate::vq::CodebookScope::Tile { .. }) {
                Ok(cfg)
            } else {
                Err(format!(
                    "argument `--configs`: `{c}` is a KV-cache format; the GEMV serves gptvq2, \
                     aqlm2x8, aqlm3 and quip4"
                ))
            }
        })
        .collect()
}

/// The cache of `--cache replicas` (1, 8 or 16 copies of the codebook in shared memory; the
/// layer refuses a count its format does not take), or `None` for each format's default.
pub fn parse_cache(arg: Option<&str>) -> Result<Option<VqCache>, String> {
    let Some(a) = arg else { return Ok(None) };
    match a.trim().parse::<usize>() {
        Ok(replicas @ (1 | 8 | 16)) => Ok(Some(VqCache { replicas })),
        _ => Err(format!(
            "argument `--cache`: `{a}` is not 1, 8 or 16 (copies of the codebook in shared memory)"
        )),
    }
}
