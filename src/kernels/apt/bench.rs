//! `tilus bench apt`: the WxAy layer (activation quantizer + bit-serial GEMM) per shape, width
//! and `m`, against the memory floor and cuBLAS f16 measured in the same run
//! (`bench/torch_apt.py` prints cuBLAS f16 and `torch._int_mm` int8 in the same table format).
//!
//! Timings are medians of CUDA-event timings with the L2 flushed before each run. The floor is
//! the layer's unavoidable traffic, weights (`wbits · n · k / 8` bytes of planes, plus the
//! per-channel sums and scales) + activations (`2 m k` bytes of f16 in) + the f16 output
//! (`2 m n`), over the device-to-device copy bandwidth measured in the same run. TOPS counts
//! `2 m n k` operations of the product the layer computes, over the layer's time. The layer
//! column's letter names its path ([`AptPath`]): `P` the popc decode kernel, `M` the
//! integer-mma decode kernel, `F` the fused decode kernel, `I` and `B` the quantizer and the
//! integer or 1-bit warpgroup-MMA GEMM, none the quantizer and [`super::kernel::apt_gemm`].

use super::linear::AptActivations;
use super::{AptLinear, AptPath, AptTiles, ImmaTiles, PopcTiles};
use crate::kernels::qmatmul::bench::bench_cublas;
use crate::kernels::timing::{pattern, time_launches};
use half::f16;
use tilus_runtime::{Context, Cublas, DeviceBuffer, L2Flush, Timing};

/// The `(wbits, abits)` pairs of the bench: W1A2, W2A2, W3A4, W4A4, W2A8.
pub const WIDTHS: [(u32, u32); 5] = [(1, 2), (2, 2), (3, 4), (4, 4), (2, 8)];

/// The weight shapes `(n, k)` of the APT-LLM paper (Llama-3-8B): 1k/1k, 2k/2k, 4k/4k, 1k/4k,
/// 14k/4k, 4k/14k.
pub const PAPER_SHAPES: [(usize, usize); 6] = [
    (1024, 1024),
    (2048, 2048),
    (4096, 4096),
    (1024, 4096),
    (14336, 4096),
    (4096, 14336),
];

/// The Llama-3-70B layers `(n, k)`: qkv, o, gate+up, down.
pub const LLAMA70B_SHAPES: [(usize, usize); 4] =
    [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)];

/// The largest `m` the bench times the popc decode kernel at (it reads the weight once per
/// token).
pub const POPC_BENCH_MAX_M: usize = 4;

/// One measured point.
#[derive(Clone, Debug)]
pub struct AptBenchRow {
    pub wbits: u32,
    pub abits: u32,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// The layer's forward ([`AptLinear::path`]).
    pub layer: Timing,
    pub path: AptPath,
    /// The fused decode kernel on the 1-bit mma, where it applies (`m <= 16`).
    pub fused: Option<Timing>,
    /// The popc decode kernel (at `m <=` [`POPC_BENCH_MAX_M`]), the best of the tiles tried,
    /// and those tiles.
    pub popc: Option<(Timing, PopcTiles)>,
    /// The integer-mma decode kernel (at `m <=` [`POPC_BENCH_MAX_M`], where a tiling serves
    /// the layer), the best of the tiles tried, and those tiles.
    pub imma: Option<(Timing, ImmaTiles)>,
    /// The quantizer + the GEMM (two launches); `None` with `popc_only`.
    pub unfused: Option<Timing>,
    /// The quantizer writing code bytes + the GEMM of the codes on the integer warpgroup MMA
    /// (two launches, [`AptPath::Igmma`]; sm_90a, `k` a multiple of 16, `m >= 16`), the faster
    /// of 256- and 128-column blocks (the tiles column names it).
    pub igmma: Option<Timing>,
    /// The quantizer + the GEMM of the planes on the 1-bit warpgroup MMA (two launches,
    /// [`AptPath::Bgmma`]; sm_90a), the fastest of the rule's tiles, half its columns, and
    /// twice its columns on two warpgroups (the tiles column names it).
    pub bgmma: Option<Timing>,
    /// The GEMM alone; `None` with `popc_only`.
    pub gemm: Option<Timing>,
    /// The floor's bytes (see the module docs).
    pub bytes: usize,
    pub floor_us: f64,
    pub cublas_us: Option<f64>,
    /// The project's weight-only kernel (`tilus bench qmatmul`'s) for a `u{wbits}` weight with
    /// per-channel scales and f16 activations, best of 3 configurations.
    pub weight_only_us: Option<f64>,
    /// The tiles the layer used.
    pub tiles: String,
}

impl AptBenchRow {
    pub fn percent_of_floor(&self) -> f64 {
        100.0 * self.floor_us / self.layer.median_us
    }
    pub fn tops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64 / (self.layer.median_us * 1e-6) / 1e12
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Measure one `(wbits, abits)` layer of shape `(n, k)` at `m` tokens; `cublas_us` is carried.
/// With `popc_only` only the popc decode kernel is timed (each of `popc_tiles`, or the layer's
/// rule), and it is the row's layer time; with `tune` the layer's one-token kernel and tiles
/// are tuned first ([`super::tune::tune`]) and the winner is the one timed (in its kernel's
/// column, the other kernel's in the rule's tiles), and from 2 tokens on sm_90a its GEMM
/// ([`super::tune::tune_batch`]), the winner timed as the layer; `None` when none of them runs
/// at this point (`m` past [`POPC_BENCH_MAX_M`], or every tiling refused for this width and
/// shape).
#[allow(clippy::too_many_arguments)]
pub fn bench_apt(
    ctx: &std::sync::Arc<Context>,
    flush: &mut L2Flush,
    wbits: u32,
    abits: u32,
    m: usize,
    n: usize,
    k: usize,
    runs: usize,
    copy_gbps: f64,
    cublas_us: Option<f64>,
    weight_only_us: Option<f64>,
    (stages, split): (Option<i32>, Option<i32>),
    (popc_tiles, gemm_tiles, imma_tiles): (&[PopcTiles], &[AptTiles], &[ImmaTiles]),
    (popc_only, tune): (bool, bool),
) -> Result<Option<AptBenchRow>, String> {
    // The weight is [k, n] for the layer; its values matter only for realism.
    let layer = AptLinear::new(&pattern(k * n, 7), k, n, wbits, abits, None).map_err(err)?;
    let mut gpu = layer.to_gpu(ctx).map_err(err)?;
    if tune && m <= POPC_BENCH_MAX_M {
        let (tuned, best, outcome) = super::tune::tune(gpu).map_err(err)?;
        let r = &outcome.record;
        let timed = r.candidates.iter().filter(|c| c.error.is_none()).count();
        eprintln!(
            "W{wbits}A{abits} {n}x{k}: one token on {best} (rule {}), {:.1} us; {timed} of {} points timed in {:.1} s{}",
            super::linear::one_token_rule(n, k, wbits, abits),
            outcome.median_us,
            r.candidates.len(),
            r.tune_seconds,
            if outcome.reused() { ", remembered" } else { "" }
        );
        gpu = tuned;
    }
    if tune && m > 1 && !popc_only && ctx.arch() == "sm_90a" {
        let (tuned, best, outcome) = super::tune::tune_batch(gpu, m).map_err(err)?;
        let r = &outcome.record;
        let timed = r.candidates.iter().filter(|c| c.error.is_none()).count();
        eprintln!(
            "W{wbits}A{abits} {n}x{k}: {m} tokens on {best:?} (rule {:?}), {:.1} us; {timed} of {} points timed in {:.1} s{}",
            layer.path(m),
            outcome.median_us,
            r.candidates.len(),
            r.tune_seconds,
            if outcome.reused() { ", remembered" } else { "" }
        );
        gpu = tuned;
    }
    let x: Vec<f16> = pattern(m * k, 3)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let xd = DeviceBuffer::from_host(ctx, &x).map_err(err)?;
    let mut act = AptActivations::new(&gpu, m).map_err(err)?;
    let mut y = DeviceBuffer::<f16>::zeros(ctx, m * n).map_err(err)?;
    // The popc kernel with each tiling asked for (the layer's rule when none), the fastest kept.
    let mut popc: Option<(Timing, PopcTiles)> = None;
    if m <= POPC_BENCH_MAX_M {
        let rule = [gpu.popc_tiles()];
        let tried = if popc_tiles.is_empty() {
            &rule[..]
        } else {
            popc_tiles
        };
        for &tiles in tried {
            // Tiles this width and shape refuse (a ring past shared memory) are skipped.
            if let Err(e) = tiles.config(k, wbits, abits, false) {
                eprintln!("W{wbits}A{abits} m={m} {n}x{k}: {e}");
                continue;
            }
            let t = time_launches(ctx, flush, runs, || {
                gpu.forward_popc(&xd, m, &mut y, None, Some(tiles))
                    .map_err(err)
            })?;
            if popc.as_ref().is_none_or(|(b, _)| t.median_us < b.median_us) {
                popc = Some((t, tiles));
            }
        }
    }
    // The integer-mma decode kernel likewise (the rule's tiles when none are asked for and it
    // serves the layer).
    let mut imma: Option<(Timing, ImmaTiles)> = None;
    if m <= POPC_BENCH_MAX_M {
        // The tuned tiles when the tuner chose this kernel.
        let rule: Vec<ImmaTiles> = match gpu.path(1) {
            AptPath::Imma(t) => vec![t],
            _ => layer.imma_tiles().into_iter().collect(),
        };
        let tried = if imma_tiles.is_empty() {
            &rule[..]
        } else {
            imma_tiles
        };
        for &tiles in tried {
            if let Err(e) = tiles.config(n, k, wbits, abits, false) {
                eprintln!("W{wbits}A{abits} m={m} {n}x{k}: {e}");
                continue;
            }
            let t = time_launches(ctx, flush, runs, || {
                gpu.forward_imma(&xd, m, &mut y, None, Some(tiles))
                    .map_err(err)
            })?;
            eprintln!(
                "W{wbits}A{abits} m={m} {n}x{k} imma {tiles:?}: {:.1} us",
                t.median_us
            );
            if imma.as_ref().is_none_or(|(b, _)| t.median_us < b.median_us) {
                imma = Some((t, tiles));
            }
        }
    }
    let bytes = wbits as usize * n * k / 8 + 8 * n + 2 * m * k + 2 * m * n;
    let floor_us = bytes as f64 / (copy_gbps * 1e9) * 1e6;
    let popc_names = |p: &PopcTiles| {
        format!(
            "popc warps={} rows={} vec={} per_sm={} stages={} qsplit={}",
            p.warps, p.rows, p.vec, p.per_sm, p.stages, p.qsplit
        )
    };
    if popc_only {
        let Some((t, tiles)) = popc else {
            return Ok(None);
        };
        return Ok(Some(AptBenchRow {
            wbits,
            abits,
            m,
            n,
            k,
            layer: t,
            path: AptPath::Popc(tiles),
            fused: None,
            popc,
            imma,
            unfused: None,
            igmma: None,
            bgmma: None,
            gemm: None,
            bytes,
            floor_us,
            cublas_us,
            weight_only_us,
            tiles: format!("{}{}", popc_names(&tiles), imma_names(&imma)),
        }));
    }
    let mut t = layer.tiles(m);
    if let Some(s) = stages {
        t.stages = s;
    }
    // The GEMM with each tiling asked for (the layer's rule when none), the fastest kept for
    // the 2-launch layer; tilings that do not divide the shape are skipped.
    let mut best: Option<f64> = None;
    for &tiles in gemm_tiles {
        let g = time_launches(ctx, flush, runs, || {
            gpu.gemm_into_tiles(&act, &mut y, None, tiles).map_err(err)
        });
        match g {
            Ok(g) => {
                eprintln!(
                    "W{wbits}A{abits} m={m} {n}x{k} gemm {tiles:?}: {:.1} us",
                    g.median_us
                );
                if best.is_none_or(|b| g.median_us < b) {
                    best = Some(g.median_us);
                    t = tiles;
                }
            }
            Err(e) => eprintln!("W{wbits}A{abits} m={m} {n}x{k} gemm {tiles:?}: {e}"),
        }
    }
    let unfused = time_launches(ctx, flush, runs, || {
        gpu.quantize_into(&xd, &mut act).map_err(err)?;
        gpu.gemm_into_tiles(&act, &mut y, None, t).map_err(err)
    })?;
    let fused = match layer.gemv_config(m, false) {
        Some(_) => Some(time_launches(ctx, flush, runs, || {
            gpu.forward_fused_with(&xd, m, &mut y, (stages, split))
                .map_err(err)
        })?),
        None => None,
    };
    // The integer-MMA layer with 256- and 128-column blocks, the faster kept.
    let mut igmma: Option<(Timing, i32)> = None;
    if gpu.context().arch() == "sm_90a" && k.is_multiple_of(16) && m >= 16 {
        let mut codes = AptActivations::with_codes(&gpu, m, true).map_err(err)?;
        for bn in [256, 128] {
            let cfg = super::kernel::apt_gemm_igmma::Config {
                BN: bn,
                ..layer.igmma_config(m, false)
            };
            let t = time_launches(ctx, flush, runs, || {
                gpu.quantize_into(&xd, &mut codes).map_err(err)?;
                gpu.gemm_igmma_with(&codes, &mut y, None, cfg, true)
                    .map_err(err)
            })?;
            if igmma
                .as_ref()
                .is_none_or(|(b, _)| t.median_us < b.median_us)
            {
                igmma = Some((t, bn));
            }
        }
    }
    let (igmma, igmma_bn) = (igmma.map(|(t, _)| t), igmma.map(|(_, bn)| bn));
    // The 1-bit warpgroup MMA on the planes: the rule's tiles, half the columns, twice the
    // columns on two warpgroups, and the columns of one wave.
    let mut bgmma: Option<(Timing, (i32, i32, i32))> = None;
    if gpu.context().arch() == "sm_90a" {
        let rule = layer.bgmma_config(m, false);
        // The columns that make one wave of blocks on this GPU (a multiple of 8 per warpgroup,
        // not a power of two): 14336 columns are 112 blocks of 128, or 128 of 112 for 132
        // multiprocessors (H200, session 38: W2A2 at 64 tokens 11.6 us against the rule's
        // 11.4, W1A2 9.9 against 9.9; the wave is not what bounds it).
        let sms = gpu.context().device().multiprocessors as usize;
        let per_row = (sms / m.div_ceil(rule.BM as usize)).max(1);
        let unit = 8 * rule.WGN as usize;
        let wave = (n.div_ceil(per_row).div_ceil(unit) * unit) as i32;
        let tried = [
            (rule.BM, rule.BN, rule.WGN),
            (rule.BM, rule.BN / 2, 1),
            (64, 2 * rule.BN, 2),
            (rule.BM, wave, rule.WGN),
        ];
        for (bm, bn, wgn) in tried {
            let Some(cfg) = layer.bgmma_tiles(bm, bn, wgn, false) else {
                continue;
            };
            let cfg = layer.bgmma_store(cfg, m);
            // A tiling the kernel refuses is reported and skipped, not the point.
            let t = match time_launches(ctx, flush, runs, || {
                gpu.quantize_into(&xd, &mut act).map_err(err)?;
                gpu.gemm_bgmma_with(&act, &mut y, None, cfg, true)
                    .map_err(err)
            }) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("W{wbits}A{abits} m={m} {n}x{k} bgmma {cfg}: {e}");
                    continue;
                }
            };
            eprintln!(
                "W{wbits}A{abits} m={m} {n}x{k} bgmma BM={} BN={bn} WGN={wgn}: {:.1} us",
                cfg.BM, t.median_us
            );
            if bgmma
                .as_ref()
                .is_none_or(|(b, _)| t.median_us < b.median_us)
            {
                bgmma = Some((t, (bm, bn, wgn)));
            }
        }
    }
    let (bgmma, bgmma_bn) = (bgmma.map(|(t, _)| t), bgmma.map(|(_, bn)| bn));
    let path = gpu.path(m);
    let layer_t = match path {
        AptPath::Popc(tiles) => time_launches(ctx, flush, runs, || {
            gpu.forward_popc(&xd, m, &mut y, None, Some(tiles))
                .map_err(err)
        })?,
        AptPath::Imma(tiles) => time_launches(ctx, flush, runs, || {
            gpu.forward_imma(&xd, m, &mut y, None, Some(tiles))
                .map_err(err)
        })?,
        AptPath::Fused => fused.expect("timed above"),
        AptPath::Unfused => unfused,
        AptPath::Igmma(cfg) if igmma.is_some() => {
            let mut codes = AptActivations::with_codes(&gpu, m, true).map_err(err)?;
            let mut layer = |dependent: bool| {
                time_launches(ctx, flush, runs, || {
                    gpu.quantize_into(&xd, &mut codes).map_err(err)?;
                    gpu.gemm_igmma_with(&codes, &mut y, None, cfg, dependent)
                        .map_err(err)
                })
            };
            let serial = layer(false)?;
            let t = layer(true)?;
            eprintln!(
                "W{wbits}A{abits} m={m} {n}x{k} layer (igmma {cfg}): {:.1} us dependent, {:.1} us ordinary",
                t.median_us, serial.median_us
            );
            t
        }
        AptPath::Igmma(_) => unfused,
        AptPath::Bgmma(cfg) if bgmma.is_some() => {
            // What the dependent launch gains: the same two launches, the GEMM an ordinary one.
            let serial = time_launches(ctx, flush, runs, || {
                gpu.quantize_into(&xd, &mut act).map_err(err)?;
                gpu.gemm_bgmma_with(&act, &mut y, None, cfg, false)
                    .map_err(err)
            })?;
            let t = time_launches(ctx, flush, runs, || {
                gpu.quantize_into(&xd, &mut act).map_err(err)?;
                gpu.gemm_bgmma_with(&act, &mut y, None, cfg, true)
                    .map_err(err)
            })?;
            // The outputs' other store: the threads' where the rule gives them to the copy
            // engine, else the copy engine's (in boxes of up to 64 columns) where the tiles
            // allow it.
            let (other, by) = if cfg.STORE_BOX > 0 {
                (0, "the threads")
            } else {
                (super::linear::bgmma_store_box(&cfg), "the copy engine")
            };
            let mut line = format!(
                "W{wbits}A{abits} m={m} {n}x{k} layer (bgmma {cfg}): {:.1} us dependent, {:.1} us ordinary",
                t.median_us, serial.median_us
            );
            if other != cfg.STORE_BOX {
                let cfg = super::kernel::apt_gemm_bgmma::Config {
                    STORE_BOX: other,
                    ..cfg
                };
                let o = time_launches(ctx, flush, runs, || {
                    gpu.quantize_into(&xd, &mut act).map_err(err)?;
                    gpu.gemm_bgmma_with(&act, &mut y, None, cfg, true)
                        .map_err(err)
                })?;
                line += &format!(", {:.1} us with the outputs stored by {by}", o.median_us);
            }
            eprintln!("{line}");
            t
        }
        AptPath::Bgmma(_) => unfused,
    };
    let gemm_t = time_launches(ctx, flush, runs, || {
        gpu.gemm_into_tiles(&act, &mut y, None, t).map_err(err)
    })?;
    Ok(Some(AptBenchRow {
        wbits,
        abits,
        m,
        n,
        k,
        layer: layer_t,
        path,
        fused,
        popc,
        imma,
        unfused: Some(unfused),
        igmma,
        bgmma,
        gemm: Some(gemm_t),
        bytes,
        floor_us,
        cublas_us,
        weight_only_us,
        tiles: {
            let gemm = format!(
                "WM={} WN={} FM={} FN={} KT={} STAGES={}",
                t.wm, t.wn, t.fm, t.fn_, t.kt, t.stages
            );
            let fused = layer.gemv_config(m, false).map(|c| {
                format!(
                    "; fused WN={} FN={} KT={} STAGES={} SPLIT={}",
                    c.WN,
                    c.FN,
                    c.KT,
                    stages.unwrap_or(c.STAGES),
                    split.unwrap_or(c.SPLIT)
                )
            });
            let popc = popc.as_ref().map(|(_, p)| format!("; {}", popc_names(p)));
            let igmma = igmma_bn.map(|bn| format!("; igmma BN={bn}"));
            let bgmma = bgmma_bn.map(|(bm, bn, wgn)| format!("; bgmma BM={bm} BN={bn} WGN={wgn}"));
            format!(
                "{gemm}{}{}{}{}{}",
                fused.unwrap_or_default(),
                popc.unwrap_or_default(),
                imma_names(&imma),
                igmma.unwrap_or_default(),
                bgmma.unwrap_or_default()
            )
        },
    }))
}

/// The tiles column's words for the integer-mma decode kernel's best tiles.
fn imma_names(imma: &Option<(Timing, ImmaTiles)>) -> String {
    imma.as_ref().map_or(String::new(), |(_, t)| {
        format!(
            "; imma bn={} bk={} warps={} stages={} split={}",
            t.bn, t.bk, t.warps, t.stages, t.split
        )
    })
}

/// cuBLAS f16 for the same product, median microseconds.
pub fn bench_cublas_f16(
    ctx: &Context,
    flush: &mut L2Flush,
    m: usize,
    n: usize,
    k: usize,
) -> Result<f64, String> {
    let blas = Cublas::new(ctx).map_err(err)?;
    bench_cublas(ctx, &blas, flush, m, n, k).map_err(err)
}

/// The project's weight-only quantized matmul (f16 activations, a `u{wbits}` weight with
/// per-channel scales and zero points) for the same product, median microseconds of the best of
/// three configurations.
pub fn bench_weight_only(
    ctx: &Context,
    flush: &mut L2Flush,
    wbits: u32,
    m: usize,
    n: usize,
    k: usize,
    copy_gbps: f64,
) -> Result<f64, String> {
    use crate::kernels::qmatmul::bench::bench_qmatmul;
    let wdtype = crate::DType::UInt(wbits as u8);
    let row =
        bench_qmatmul::<f16>(ctx, None, flush, wdtype, m, n, k, None, 3, copy_gbps).map_err(err)?;
    Ok(row.timing.median_us)
}

/// The table `tilus bench apt` prints (`bench/torch_apt.py` prints the same columns).
pub fn table(copy_gbps: f64, rows: &[AptBenchRow]) -> String {
    let mut s = format!(
        "tilus apt (quantize + bit-serial GEMM); copy bandwidth {copy_gbps:.0} GB/s; \
         floor = (weight planes + f16 activations + f16 output) / that; L2 flushed; \
         layer = the forward (P: the popc decode kernel, F: the fused decode kernel on BMMA, \
         I: the codes on the integer wgmma, B: the planes on the 1-bit wgmma), fused us = the \
         fused kernel, popc us = the popc kernel (best tiles), imma us = the integer-mma \
         decode kernel (best tiles), 2-launch = quantizer + GEMM on \
         BMMA, igmma = quantizer + GEMM of the code bytes on IGMMA (the faster of 256- and \
         128-column blocks), bgmma = quantizer + GEMM of the planes on BGMMA (the fastest \
         of four tilings)\n\
         w-only = the project's weight-only kernel, u<W> weight, f16 activations\n\
         {:<6} {:>5} {:>12} {:>11} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9} {:>7} {:>8} {:>10} {:>8} {:>9}  tiles\n",
        "WxAy",
        "m",
        "n x k",
        "layer us",
        "fused us",
        "popc us",
        "imma us",
        "2-launch us",
        "igmma us",
        "bgmma us",
        "gemm us",
        "%floor",
        "TOPS",
        "cuBLAS us",
        "vs f16",
        "w-only us"
    );
    for r in rows {
        let cublas = r.cublas_us.map_or("-".to_string(), |c| format!("{c:.1}"));
        let speedup = r.cublas_us.map_or("-".to_string(), |c| {
            format!("{:.2}x", c / r.layer.median_us)
        });
        let opt = |t: Option<&Timing>| t.map_or("-".to_string(), |t| format!("{:.1}", t.median_us));
        s += &format!(
            "{:<6} {:>5} {:>12} {:>11} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9} {:>6.1}% {:>8.1} {:>10} {:>8} {:>9}  {}\n",
            format!("W{}A{}", r.wbits, r.abits),
            r.m,
            format!("{}x{}", r.n, r.k),
            format!(
                "{}{:.1}",
                match path_letter(&r.path) {
                    "" => String::new(),
                    l => format!("{l} "),
                },
                r.layer.median_us
            ),
            opt(r.fused.as_ref()),
            opt(r.popc.as_ref().map(|(t, _)| t)),
            opt(r.imma.as_ref().map(|(t, _)| t)),
            opt(r.unfused.as_ref()),
            opt(r.igmma.as_ref()),
            opt(r.bgmma.as_ref()),
            opt(r.gemm.as_ref()),
            r.percent_of_floor(),
            r.tops(),
            cublas,
            speedup,
            r.weight_only_us
                .map_or("-".to_string(), |w| format!("{w:.1}")),
            r.tiles
        );
    }
    s
}

/// The layer column's letter for a path (none for the quantizer and [`super::kernel::apt_gemm`]).
fn path_letter(path: &AptPath) -> &'static str {
    match path {
        AptPath::Popc(_) => "P",
        AptPath::Imma(_) => "M",
        AptPath::Fused => "F",
        AptPath::Unfused => "",
        AptPath::Igmma(_) => "I",
        AptPath::Bgmma(_) => "B",
    }
}

/// One decoder step of a model's layers at one width ([`bench_step`]).
#[derive(Clone, Debug)]
pub struct AptStepBench {
    pub wbits: u32,
    pub abits: u32,
    pub m: usize,
    /// `(n, k, path, alone)`: each layer's shape, its path at `m`, and its forward timed
    /// alone (the L2 flushed before each run, as [`bench_apt`] times it).
    pub layers: Vec<(usize, usize, AptPath, Timing)>,
    /// The layers' forwards queued back to back, one step per run (the L2 flushed before it).
    pub step: Timing,
    /// The step's floor: the layers' floors ([`bench_apt`]'s bytes) added.
    pub floor_us: f64,
}

/// The forwards ([`super::GpuAptLinear::forward_into`], no allocation) of `shapes` in order, at
/// `m` tokens, as a decode step queues them: each layer's launches start while the previous
/// layer's last blocks finish, and the lone launch's latency (an empty kernel between events
/// takes about 3.5 us on an H200) is paid once a step, not once a layer. Nothing is reused from
/// L2 between layers but what a real step would reuse (each layer's weight is read once; a
/// step of the Llama-70B layers at 2 bits reads 214 MB). Also each layer alone, for the sum.
#[allow(clippy::too_many_arguments)]
pub fn bench_step(
    ctx: &std::sync::Arc<Context>,
    flush: &mut L2Flush,
    wbits: u32,
    abits: u32,
    m: usize,
    shapes: &[(usize, usize)],
    runs: usize,
    copy_gbps: f64,
) -> Result<AptStepBench, String> {
    let mut layers = Vec::new();
    let mut floor_us = 0.0;
    for (i, &(n, k)) in shapes.iter().enumerate() {
        let host = AptLinear::new(&pattern(k * n, 7 + i), k, n, wbits, abits, None).map_err(err)?;
        let gpu = host.to_gpu(ctx).map_err(err)?;
        let x: Vec<f16> = pattern(m * k, 11 + i)
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let x = DeviceBuffer::from_host(ctx, &x).map_err(err)?;
        let y = DeviceBuffer::<f16>::zeros(ctx, m * n).map_err(err)?;
        let bytes = wbits as usize * n * k / 8 + 8 * n + 2 * m * k + 2 * m * n;
        floor_us += bytes as f64 / (copy_gbps * 1e9) * 1e6;
        layers.push((gpu, x, y));
    }
    let mut alone = Vec::new();
    for (gpu, x, y) in &mut layers {
        let t = time_launches(ctx, flush, runs, || gpu.forward_into(x, m, y).map_err(err))?;
        alone.push((gpu.host().n(), gpu.host().k(), gpu.path(m), t));
    }
    let step = time_launches(ctx, flush, runs, || {
        layers
            .iter_mut()
            .try_for_each(|(gpu, x, y)| gpu.forward_into(x, m, y).map_err(err))
    })?;
    Ok(AptStepBench {
        wbits,
        abits,
        m,
        layers: alone,
        step,
        floor_us,
    })
}

/// [`bench_step`]'s rows: per width and `m`, the step's time against its floor, and the sum of
/// the layers' lone times beside it.
pub fn step_table(copy_gbps: f64, rows: &[AptStepBench]) -> String {
    let mut out = format!(
        "tilus apt decode step: the layers' forwards queued back to back (one L2 flush a \
         step); copy bandwidth {copy_gbps:.0} GB/s; floor = the layers' floors added; alone = \
         the layers timed one by one (flushed), added\n"
    );
    out += &format!(
        "{:<6} {:>5} {:>9} {:>9} {:>7} {:>9} {:>7}  layers (path: alone us)\n",
        "WxAy", "m", "step us", "floor us", "%floor", "alone us", "%floor"
    );
    for r in rows {
        let alone: f64 = r.layers.iter().map(|l| l.3.median_us).sum();
        let each = r
            .layers
            .iter()
            .map(|(n, k, p, t)| match path_letter(p) {
                "" => format!("{n}x{k} {:.1}", t.median_us),
                l => format!("{n}x{k} {l} {:.1}", t.median_us),
            })
            .collect::<Vec<_>>()
            .join(", ");
        out += &format!(
            "{:<6} {:>5} {:>9.1} {:>9.1} {:>6.1}% {:>9.1} {:>6.1}%  {each}\n",
            format!("W{}A{}", r.wbits, r.abits),
            r.m,
            r.step.median_us,
            r.floor_us,
            100.0 * r.floor_us / r.step.median_us,
            alone,
            100.0 * r.floor_us / alone,
        );
    }
    out
}
