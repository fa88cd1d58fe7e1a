//! `tilus bench dense`: the wgmma GEMM per shape against cuBLAS in the same run.
//!
//! `c[m, n] = a[m, k] · b[n, k]ᵀ` in f16 or bf16 (cuBLAS with the same layout, `gemm_nt`), or
//! with 8-bit operands: i8 into i32 (torch's `_int_mm`; `bench/torch_gemm8.py` times it and
//! `_scaled_mm` in the same table layout), fp8 e4m3 or e5m2 into f16. Every configuration of the
//! kernel's space is timed (`kernels::timing::time_launches`: median of CUDA-event timings, L2
//! flushed before each run) and the best is reported, with tera-operations per second
//! (`2 m n k` over the time) and the ratio to cuBLAS. With `rounds`, each pipeline's best and
//! cuBLAS are timed again in turns and compared by their medians (the GEMMs run at the chip's
//! power cap, so back-to-back sweeps favour whatever ran first).

use super::{
    gemm_bf16, gemm_f16, gemm_persistent_bf16, gemm_persistent_f16, gemm_tma_bf16, gemm_tma_e4m3,
    gemm_tma_e5m2, gemm_tma_f16, gemm_tma_i8, gemm_ws_bf16, gemm_ws_f16,
};
use crate::kernels::timing::{pattern, time_launches};
use half::{bf16, f16};
use tilus_runtime::{Context, Cublas, DeviceBuffer, L2Flush, Timing};

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
    /// The best configuration of the `cp.async` kernel and its median time (16-bit operands
    /// only).
    pub cp_async: Option<(String, f64)>,
    /// The same for the copy-engine kernel (`gemm_tma_*`); `None` when `k` is not a multiple
    /// of 8 (its tensor-map rows must be multiples of 16 bytes).
    pub tma: Option<(String, f64)>,
    /// The same for the persistent copy-engine kernel (`gemm_persistent_*`, one block per
    /// multiprocessor, the epilogue stored by the copy engine; 16-bit operands); `None` when
    /// `k` or `n` is not a multiple of 8 (its output's tensor-map rows too).
    pub persistent: Option<(String, f64)>,
    /// The same for the warp-specialized persistent kernel (`gemm_ws_*`: a producer
    /// warpgroup fills the ring, the consumers multiply).
    pub specialized: Option<(String, f64)>,
    pub cublas_us: Option<f64>,
}

impl GemmRow {
    pub fn tflops(us: f64, m: usize, n: usize, k: usize) -> f64 {
        2.0 * (m * n * k) as f64 / (us * 1e-6) / 1e12
    }

    /// The fastest of the pipelines.
    pub fn best_us(&self) -> f64 {
        [
            &self.cp_async,
            &self.tma,
            &self.persistent,
            &self.specialized,
        ]
        .into_iter()
        .flatten()
        .map(|(_, t)| *t)
        .fold(f64::INFINITY, f64::min)
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The fastest configuration of `space` (its name) and its median time, each configuration
/// timed by `time_launches` around `launch` (and printed to stderr when `verbose`).
fn fastest<C: std::fmt::Display>(
    ctx: &Context,
    flush: &mut L2Flush,
    runs: usize,
    verbose: bool,
    space: &[C],
    launch: impl FnMut(&C) -> Result<(), String>,
) -> Result<(String, f64), String> {
    fastest_at(ctx, flush, runs, verbose, space, launch).map(|(_, name, us)| (name, us))
}

/// [`fastest`], with the best configuration's index in `space`.
fn fastest_at<C: std::fmt::Display>(
    ctx: &Context,
    flush: &mut L2Flush,
    runs: usize,
    verbose: bool,
    space: &[C],
    mut launch: impl FnMut(&C) -> Result<(), String>,
) -> Result<(usize, String, f64), String> {
    let mut best: Option<(usize, String, f64)> = None;
    for (i, cfg) in space.iter().enumerate() {
        let t =
            time_launches(ctx, flush, runs, || launch(cfg)).map_err(|e| format!("{cfg}: {e}"))?;
        if verbose {
            eprintln!("  {cfg}: {:.1} us", t.median_us);
        }
        if best.as_ref().is_none_or(|(_, _, us)| t.median_us < *us) {
            best = Some((i, cfg.to_string(), t.median_us));
        }
    }
    best.ok_or_else(|| "the configuration space is empty".to_string())
}

/// The operand types `bench_gemm` takes.
pub const DTYPES: [&str; 5] = ["f16", "bf16", "i8", "e4m3", "e5m2"];

/// Time every configuration of the `dtype` kernels (`"f16"` or `"bf16"`: the `cp.async` one,
/// the copy-engine one and the persistent one on the device's multiprocessors; the 8-bit types
/// have the copy-engine one) at `m x n x k`, and
/// cuBLAS (16-bit types) unless `blas` is `None`; `verbose` prints every configuration's time.
///
/// With `rounds > 0` (16-bit types), each pipeline's best configuration and cuBLAS are then
/// timed again in turns, `rounds` times, and each reports the median of its rounds: a long
/// sweep warms the chip and lowers its clocks, which would otherwise favour whatever ran
/// first.
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
    verbose: bool,
    rounds: usize,
) -> Result<GemmRow, String> {
    let (mi, ni, ki) = (
        i32::try_from(m).map_err(|_| "argument `m`: too large".to_string())?,
        i32::try_from(n).map_err(|_| "argument `n`: too large".to_string())?,
        i32::try_from(k).map_err(|_| "argument `k`: too large".to_string())?,
    );
    macro_rules! run {
        ($t:ty, $kernel:ident, $tma:ident, $persistent:ident, $ws:ident, $name:literal) => {{
            let a: Vec<$t> = pattern(m * k, 1).into_iter().map(<$t>::from_f32).collect();
            let b: Vec<$t> = pattern(n * k, 2).into_iter().map(<$t>::from_f32).collect();
            let a = DeviceBuffer::from_host(ctx, &a).map_err(err)?;
            let b = DeviceBuffer::from_host(ctx, &b).map_err(err)?;
            let mut c = DeviceBuffer::<$t>::zeros(ctx, m * n).map_err(err)?;
            let sms = ctx.device().multiprocessors as usize;
            let run_cp = |cfg: &$kernel::Config, c: &mut DeviceBuffer<$t>| {
                $kernel::launch(ctx, cfg, mi, ni, ki, &a, &b, c).map_err(err)
            };
            let run_tma = |cfg: &$tma::Config, c: &mut DeviceBuffer<$t>| {
                $tma::launch(ctx, cfg, mi, ni, ki, &a, &b, c).map_err(err)
            };
            let run_persistent = |cfg: &$persistent::Config, c: &mut DeviceBuffer<$t>| {
                let tiles = m.div_ceil(cfg.BM as usize) * n.div_ceil(cfg.BN as usize);
                let workers = tiles.clamp(1, sms) as i32;
                $persistent::launch(ctx, cfg, mi, ni, ki, workers, &a, &b, c).map_err(err)
            };
            let run_ws = |cfg: &$ws::Config, c: &mut DeviceBuffer<$t>| {
                let tiles = m.div_ceil(cfg.BM as usize) * n.div_ceil(cfg.BN as usize);
                let workers = tiles.clamp(1, sms) as i32;
                $ws::launch(ctx, cfg, mi, ni, ki, workers, &a, &b, c).map_err(err)
            };
            let run_cublas = |blas: &Cublas, c: &mut DeviceBuffer<$t>| {
                blas.gemm_nt(m, n, k, &a, &b, c).map_err(err)
            };
            let mut cp_async = fastest_at(ctx, flush, runs, verbose, $kernel::SPACE, |cfg| {
                run_cp(cfg, &mut c)
            })?;
            let mut tma = if k % 8 == 0 {
                Some(fastest_at(ctx, flush, runs, verbose, $tma::SPACE, |cfg| {
                    run_tma(cfg, &mut c)
                })?)
            } else {
                None
            };
            let mut persistent = if k % 8 == 0 && n % 8 == 0 {
                Some(fastest_at(
                    ctx,
                    flush,
                    runs,
                    verbose,
                    $persistent::SPACE,
                    |cfg| run_persistent(cfg, &mut c),
                )?)
            } else {
                None
            };
            let mut specialized = if k % 8 == 0 && n % 8 == 0 {
                Some(fastest_at(ctx, flush, runs, verbose, $ws::SPACE, |cfg| {
                    run_ws(cfg, &mut c)
                })?)
            } else {
                None
            };
            let mut cublas_us = match blas {
                Some(blas) => {
                    Some(time_launches(ctx, flush, runs, || run_cublas(blas, &mut c))?.median_us)
                }
                None => None,
            };
            if rounds > 0 {
                let mut times: [Vec<f64>; 5] = Default::default();
                // Round r starts with candidate r % 5, so none always runs first.
                for r in 0..rounds {
                    for turn in 0..5 {
                        let which = (r + turn) % 5;
                        let t = match which {
                            0 => {
                                let cfg = &$kernel::SPACE[cp_async.0];
                                time_launches(ctx, flush, runs, || run_cp(cfg, &mut c))?
                            }
                            1 => match tma {
                                Some((i, _, _)) => {
                                    let cfg = &$tma::SPACE[i];
                                    time_launches(ctx, flush, runs, || run_tma(cfg, &mut c))?
                                }
                                None => continue,
                            },
                            2 => match persistent {
                                Some((i, _, _)) => {
                                    let cfg = &$persistent::SPACE[i];
                                    time_launches(ctx, flush, runs, || run_persistent(cfg, &mut c))?
                                }
                                None => continue,
                            },
                            3 => match specialized {
                                Some((i, _, _)) => {
                                    let cfg = &$ws::SPACE[i];
                                    time_launches(ctx, flush, runs, || run_ws(cfg, &mut c))?
                                }
                                None => continue,
                            },
                            _ => match blas {
                                Some(blas) => {
                                    time_launches(ctx, flush, runs, || run_cublas(blas, &mut c))?
                                }
                                None => continue,
                            },
                        };
                        times[which].push(t.median_us);
                    }
                }
                let [t_cp, t_tma, t_persistent, t_ws, t_cublas] =
                    times.map(|t| (!t.is_empty()).then(|| Timing::from_samples(t).median_us));
                cp_async.2 = t_cp.unwrap_or(cp_async.2);
                if let (Some(p), Some(t)) = (tma.as_mut(), t_tma) {
                    p.2 = t;
                }
                if let (Some(p), Some(t)) = (persistent.as_mut(), t_persistent) {
                    p.2 = t;
                }
                if let (Some(p), Some(t)) = (specialized.as_mut(), t_ws) {
                    p.2 = t;
                }
                if t_cublas.is_some() {
                    cublas_us = t_cublas;
                }
            }
            let named = |p: (usize, String, f64)| (p.1, p.2);
            let (cp_async, tma, persistent, specialized) = (
                named(cp_async),
                tma.map(named),
                persistent.map(named),
                specialized.map(named),
            );
            GemmRow {
                dtype: $name,
                m,
                n,
                k,
                cp_async: Some(cp_async),
                tma,
                persistent,
                specialized,
                cublas_us,
            }
        }};
    }
    // 8-bit operands: bytes of a non-constant pattern (any byte is a finite fp8 value but
    // e4m3's 0x7f/0xff and e5m2's infinities and NaNs; the pattern's bytes avoid them by
    // clearing bit 6: exponents below the top).
    macro_rules! run8 {
        ($elem:ty, $out:ty, $tma:ident, $name:literal) => {{
            if k % 16 != 0 {
                return Err(format!(
                    "argument `k`: {k} is not a multiple of 16 (the copy engine's 16-byte rows)"
                ));
            }
            let bytes = |len: usize, salt: usize| -> Vec<$elem> {
                pattern(len, salt)
                    .into_iter()
                    .map(|x| (((x + 0.5) * 255.0) as u8 & 0xbf) as $elem)
                    .collect()
            };
            let a = DeviceBuffer::from_host(ctx, &bytes(m * k, 1)).map_err(err)?;
            let b = DeviceBuffer::from_host(ctx, &bytes(n * k, 2)).map_err(err)?;
            let mut c = DeviceBuffer::<$out>::zeros(ctx, m * n).map_err(err)?;
            let tma = fastest(ctx, flush, runs, verbose, $tma::SPACE, |cfg| {
                $tma::launch(ctx, cfg, mi, ni, ki, &a, &b, &mut c).map_err(err)
            })?;
            GemmRow {
                dtype: $name,
                m,
                n,
                k,
                cp_async: None,
                tma: Some(tma),
                persistent: None,
                specialized: None,
                cublas_us: None,
            }
        }};
    }
    Ok(match dtype {
        "f16" => run!(
            f16,
            gemm_f16,
            gemm_tma_f16,
            gemm_persistent_f16,
            gemm_ws_f16,
            "f16"
        ),
        "bf16" => run!(
            bf16,
            gemm_bf16,
            gemm_tma_bf16,
            gemm_persistent_bf16,
            gemm_ws_bf16,
            "bf16"
        ),
        "i8" => run8!(i8, i32, gemm_tma_i8, "i8"),
        "e4m3" => run8!(u8, f16, gemm_tma_e4m3, "e4m3"),
        "e5m2" => run8!(u8, f16, gemm_tma_e5m2, "e5m2"),
        other => {
            return Err(format!(
                "argument `--dtype`: `{other}` is not one of {}",
                DTYPES.join(", ")
            ))
        }
    })
}

/// The table `tilus bench dense` prints: each pipeline's best time, cuBLAS's, and the best
/// pipeline against cuBLAS. `TOPS` are tera-operations per second, `2 m n k` over the time
/// (floating-point or integer).
pub fn table(rows: &[GemmRow]) -> String {
    let mut s = format!(
        "tilus gemm (wgmma m64nNkK from shared memory), c = a · bᵀ; L2 flushed; best configuration of each pipeline\n\
         {:<5} {:>22} {:>11} {:>8} {:>10} {:>8} {:>7} {:>11} {:>8} {:>9}  configs (cp.async; tma; persistent; specialized)\n",
        "dtype", "m x n x k", "cp.async us", "tma us", "persist us", "ws us", "TOPS", "cuBLAS us", "TOPS", "vs cuBLAS"
    );
    let us = |p: &Option<(String, f64)>| match p {
        Some((cfg, us)) => (format!("{us:.1}"), cfg.clone()),
        None => ("-".to_string(), "-".to_string()),
    };
    for r in rows {
        let best = r.best_us();
        let (cu, cu_tf, ratio) = match r.cublas_us {
            Some(c) => (
                format!("{c:.1}"),
                format!("{:.0}", GemmRow::tflops(c, r.m, r.n, r.k)),
                format!("{:.1}%", 100.0 * c / best),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let ((cp_us, cp_cfg), (tma_us, tma_cfg)) = (us(&r.cp_async), us(&r.tma));
        let (p_us, p_cfg) = us(&r.persistent);
        let (ws_us, ws_cfg) = us(&r.specialized);
        s += &format!(
            "{:<5} {:>22} {:>11} {:>8} {:>10} {:>8} {:>7.0} {:>11} {:>8} {:>9}  {}; {}; {}; {}\n",
            r.dtype,
            format!("{}x{}x{}", r.m, r.n, r.k),
            cp_us,
            tma_us,
            p_us,
            ws_us,
            GemmRow::tflops(best, r.m, r.n, r.k),
            cu,
            cu_tf,
            ratio,
            cp_cfg,
            tma_cfg,
            p_cfg,
            ws_cfg
        );
    }
    s
}

/// One measured point of the 4-bit-weight GEMM.
#[derive(Clone, Debug)]
pub struct W4Row {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub config: String,
    pub us: f64,
    /// The best configuration and time of the kernel with the weight in registers
    /// ([`super::w4::gemm_w4t_f16`]); `None` when `n` is not a multiple of its 128-row blocks.
    pub w4t: Option<(String, f64)>,
    /// Codes + scales + activations + output bytes over the copy bandwidth of the same run.
    pub floor_us: f64,
    pub cublas_us: Option<f64>,
    /// The project's mma.sync quantized matmul (`tilus bench qmatmul`, i4 weight, group 128),
    /// best of its first 12 configurations.
    pub mma_sync_us: Option<f64>,
}

/// Time every configuration of [`super::w4::gemm_w4_f16`] at `m x n x k` (random codes and
/// scales: timing does not depend on the values), against cuBLAS f16 (`gemm_nt`) and the
/// mma.sync quantized matmul unless left out.
#[allow(clippy::too_many_arguments)]
pub fn bench_w4(
    ctx: &Context,
    blas: Option<&Cublas>,
    flush: &mut L2Flush,
    (m, n, k, group): (usize, usize, usize, usize),
    runs: usize,
    copy_gbps: f64,
    mma_sync: bool,
) -> Result<W4Row, String> {
    use super::w4::gemm_w4_f16;
    if group == 0 || !group.is_multiple_of(64) || !k.is_multiple_of(group) {
        return Err(format!(
            "argument `--group`: {group} must be a multiple of 64 dividing k = {k}"
        ));
    }
    let codes: Vec<u32> = (0..n * k / 8)
        .map(|i| (i as u32).wrapping_mul(2654435761))
        .collect();
    let scales: Vec<f16> = pattern(n * k / group, 3)
        .into_iter()
        .map(|x| f16::from_f32(0.01 + x.abs() * 0.02))
        .collect();
    let a: Vec<f16> = pattern(m * k, 1).into_iter().map(f16::from_f32).collect();
    let (dw, ds, da) = (
        DeviceBuffer::from_host(ctx, &codes).map_err(err)?,
        DeviceBuffer::from_host(ctx, &scales).map_err(err)?,
        DeviceBuffer::from_host(ctx, &a).map_err(err)?,
    );
    let mut dc = DeviceBuffer::<f16>::zeros(ctx, m * n).map_err(err)?;
    let dims = [m, n, k, group].map(|x| i32::try_from(x).map_err(|_| "sizes must fit an i32"));
    let [mi, ni, ki, gi] = [dims[0]?, dims[1]?, dims[2]?, dims[3]?];
    let best = fastest(ctx, flush, runs, false, gemm_w4_f16::SPACE, |cfg| {
        gemm_w4_f16::launch(ctx, cfg, mi, ni, ki, gi, &da, &dw, &ds, &mut dc).map_err(err)
    })?;
    let w4t = if n.is_multiple_of(128) {
        use super::w4::{gemm_w4t_f16, W4Weight, W4tWeight};
        let host = W4Weight {
            n,
            k,
            group,
            codes: codes.clone(),
            scales: scales.clone(),
        };
        let t = W4tWeight::from_w4(&host, 128).map_err(err)?;
        let (tw, ts) = (
            DeviceBuffer::from_host(ctx, &t.codes).map_err(err)?,
            DeviceBuffer::from_host(ctx, &t.scales).map_err(err)?,
        );
        Some(fastest(
            ctx,
            flush,
            runs,
            false,
            gemm_w4t_f16::SPACE,
            |cfg| {
                gemm_w4t_f16::launch(ctx, cfg, mi, ni, ki, gi, &da, &tw, &ts, &mut dc).map_err(err)
            },
        )?)
    } else {
        None
    };
    let cublas_us = match blas {
        Some(blas) => {
            let b = DeviceBuffer::from_host(
                ctx,
                &pattern(n * k, 2)
                    .into_iter()
                    .map(f16::from_f32)
                    .collect::<Vec<_>>(),
            )
            .map_err(err)?;
            Some(
                time_launches(ctx, flush, runs, || {
                    blas.gemm_nt(m, n, k, &da, &b, &mut dc).map_err(err)
                })?
                .median_us,
            )
        }
        None => None,
    };
    let mma_sync_us = if mma_sync {
        crate::kernels::qmatmul::bench::bench_qmatmul::<f16>(
            ctx,
            None,
            flush,
            crate::DType::Int(4),
            m,
            n,
            k,
            Some(128),
            12,
            copy_gbps,
        )
        .ok()
        .map(|r| r.timing.median_us)
    } else {
        None
    };
    let bytes = n * k / 2 + 2 * (n * k / group) + 2 * m * k + 2 * m * n;
    let (config, us) = best;
    Ok(W4Row {
        m,
        n,
        k,
        config,
        us,
        w4t,
        floor_us: bytes as f64 / (copy_gbps * 1e3),
        cublas_us,
        mma_sync_us,
    })
}

/// The table `tilus bench w4` prints: both kernels' best times, and the better one against
/// the floor, cuBLAS and the mma.sync kernel.
pub fn w4_table(copy_gbps: f64, rows: &[W4Row]) -> String {
    let mut s = format!(
        "tilus 4-bit-weight GEMM on wgmma: `smem` dequantizes into shared memory (B operand), `regs` computes cᵀ = W·aᵀ \
         with the weight dequantized into wgmma's register operand; f16 activations, group scales; \
         copy bandwidth {copy_gbps:.0} GB/s; floor = (codes + scales + activations + output) / that; L2 flushed\n\
         {:>5} {:>12} {:>9} {:>9} {:>7} {:>8} {:>10} {:>8} {:>12} {:>8}  configs (smem; regs)\n",
        "m", "n x k", "smem us", "regs us", "%floor", "TFLOP/s", "cuBLAS us", "vs f16", "mma.sync us", "vs mma"
    );
    for r in rows {
        let best = r.w4t.as_ref().map_or(r.us, |(_, t)| t.min(r.us));
        let ratio = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.2}x", x / best));
        let us = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.1}"));
        let (regs_us, regs_cfg) = match &r.w4t {
            Some((cfg, t)) => (format!("{t:.1}"), cfg.as_str()),
            None => ("-".to_string(), "-"),
        };
        s += &format!(
            "{:>5} {:>12} {:>9.1} {:>9} {:>6.1}% {:>8.0} {:>10} {:>8} {:>12} {:>8}  {}; {}\n",
            r.m,
            format!("{}x{}", r.n, r.k),
            r.us,
            regs_us,
            100.0 * r.floor_us / best,
            GemmRow::tflops(best, r.m, r.n, r.k),
            us(r.cublas_us),
            ratio(r.cublas_us),
            us(r.mma_sync_us),
            ratio(r.mma_sync_us),
            r.config,
            regs_cfg
        );
    }
    s
}
