//! Autotuning of one layer's one-token forward (its shape and widths): the kernel, the popc
//! decode kernel ([`PopcTiles`]) or the integer-mma one ([`ImmaTiles`]), and its tiles; and of
//! its multi-token GEMM per token bucket ([`tune_batch`]): the 1-bit or the integer warpgroup
//! MMA and their tiles. This is the paper's "kernel mapping": a per-shape choice by
//! measurement. [`tune`] times every point of [`candidates`] on the GPU (L2 flushed clean
//! before each run) through the runtime's tuner, which remembers the winner per GPU and driver
//! (`Context::tuner`, on disk with the context's cache), so a second call for the same layer
//! launches nothing.
//!
//! The rules ([`one_token_rule`], [`AptLinear::path`]) stay the default: they were fitted to
//! scans of the Llama-70B layers on an H200 (`docs/apt.md`), and tuning costs a compilation
//! per point the first time (and a re-layout and upload of the weight's bytes per integer-mma
//! block shape). Each key names the CUDA of its kernels' rule points, so a changed kernel tunes
//! afresh instead of reusing a winner measured on other code.

use super::kernel::{apt_gemm_bgmma, apt_gemm_igmma, apt_gemv_imma, apt_gemv_popc};
use super::linear::{
    batch_bucket, bgmma_store_box, kernel_err, one_token_rule, AptActivations, DecodeTiles,
    GpuAptLinear,
};
use super::{AptLinear, AptPath, ImmaTiles, PopcTiles};
use crate::apt::AptError;
use crate::kernels::timing::{pattern, time_launches};
use half::f16;
use serde_json::{json, Value};
use tilus_runtime::autotune::TIMED_RUNS;
use tilus_runtime::{DeviceBuffer, L2Flush, L2Mode, TuneCandidate, TuneKey, TuneOutcome};

impl TuneCandidate for DecodeTiles {
    fn to_json(&self) -> Value {
        match self {
            DecodeTiles::Popc(t) => json!({
                "kernel": "popc",
                "warps": t.warps,
                "rows": t.rows,
                "vec": t.vec,
                "per_sm": t.per_sm,
                "stages": t.stages,
                "qsplit": t.qsplit,
            }),
            DecodeTiles::Imma(t) => json!({
                "kernel": "imma",
                "bn": t.bn,
                "bk": t.bk,
                "warps": t.warps,
                "stages": t.stages,
                "split": t.split,
            }),
        }
    }
}

impl std::fmt::Display for DecodeTiles {
    /// `popc ` or `imma ` and the tiles as `tilus bench apt --popc-tiles` or `--imma-tiles`
    /// takes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeTiles::Popc(t) => write!(f, "popc {t}"),
            DecodeTiles::Imma(t) => write!(f, "imma {t}"),
        }
    }
}

impl std::fmt::Display for ImmaTiles {
    /// `BNxBKxWARPSxSTAGESxSPLIT`, as `tilus bench apt --imma-tiles` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{}x{}x{}x{}",
            self.bn, self.bk, self.warps, self.stages, self.split
        )
    }
}

impl std::fmt::Display for PopcTiles {
    /// `WARPSxROWSxVECxPER_SMxSTAGESxQSPLIT`, as `tilus bench apt --popc-tiles` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{}x{}x{}x{}x{}",
            self.warps, self.rows, self.vec, self.per_sm, self.stages, self.qsplit
        )
    }
}

/// The points [`tune`] measures for an `n x k` layer of `wbits`-bit weights and `abits`-bit
/// activations: the layer's rule first ([`one_token_rule`]), then the popc kernel's
/// ([`popc_points`]) and the integer-mma kernel's ([`ImmaTiles::tune_points`]), none twice.
pub fn candidates(n: usize, k: usize, wbits: u32, abits: u32) -> Vec<DecodeTiles> {
    let mut out = vec![one_token_rule(n, k, wbits, abits)];
    let popc = popc_points(n, k, wbits, abits)
        .into_iter()
        .map(DecodeTiles::Popc);
    let imma = ImmaTiles::tune_points(n, k, wbits, abits)
        .into_iter()
        .map(DecodeTiles::Imma);
    for t in popc.chain(imma) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The popc kernel's points: the rule's first, then the tilings the session-50 to -52 scans
/// found within a few percent of the best on some layer (8 or 16 warps of 2 or 4 rows, one or
/// two blocks a multiprocessor, register prefetch or rings of 2 to 4 stages, one or two
/// threads a word of the token), each only if the kernel takes it for this `k` and these
/// widths (shared memory, the prologue's words).
pub fn popc_points(n: usize, k: usize, wbits: u32, abits: u32) -> Vec<PopcTiles> {
    let rule = PopcTiles::for_shape(n, k, wbits);
    let tiles = |warps, rows, per_sm, stages, qsplit| PopcTiles {
        warps,
        rows,
        vec: 4,
        per_sm,
        stages,
        qsplit,
    };
    let mut out = vec![rule];
    for qsplit in [rule.qsplit, 1, 2] {
        for (warps, rows, per_sm) in [(8, 4, 1), (16, 2, 1), (8, 2, 2), (16, 4, 1)] {
            for stages in [0, 2, 3, 4] {
                let t = tiles(warps, rows, per_sm, stages, qsplit);
                if !out.contains(&t) && t.config(k, wbits, abits, false).is_ok() {
                    out.push(t);
                }
            }
        }
    }
    out
}

/// The tuner's key for `layer`: the one-token kernels with a digest of their rule points' CUDA
/// (a changed kernel tunes afresh), and the layer's widths and shape.
fn key(layer: &GpuAptLinear) -> Result<TuneKey, AptError> {
    let h = layer.host();
    let (n, k, wbits, abits) = (h.n(), h.k(), h.wbits(), h.abits());
    let popc = PopcTiles::for_shape(n, k, wbits).config(k, wbits, abits, false)?;
    let mut source = apt_gemv_popc::source(&popc)
        .map_err(kernel_err)?
        .to_string();
    if let Some(t) = ImmaTiles::for_layer(n, k, wbits, abits) {
        let imma = t.config(n, k, wbits, abits, false)?;
        source += apt_gemv_imma::source(&imma).map_err(kernel_err)?;
    }
    Ok(TuneKey::for_device(
        layer.context().device(),
        format!(
            "apt_decode-{}",
            crate::kernels::source_digest([source.as_bytes()])
        ),
        format!("W{wbits}A{abits} n={n} k={k}"),
    ))
}

/// The fastest of [`candidates`] for `layer`'s one-token forward on its GPU (or the point the
/// tuner remembers for these kernels, layer and GPU), and `layer` set to run it
/// ([`GpuAptLinear::with_decode`]). Every point is compiled first, in parallel, then timed on
/// a token of fixed values (the kernels' time does not depend on them); a point that fails to
/// compile or launch is recorded with its reason and skipped. An integer-mma point's first
/// (untimed) launch re-lays the weight out for its blocks; the layer keeps the bytes of the
/// last block shape timed and re-lays them out once more if the winner's differ.
pub fn tune(layer: GpuAptLinear) -> Result<(GpuAptLinear, DecodeTiles, TuneOutcome), AptError> {
    let h = layer.host();
    let (n, k, wbits, abits) = (h.n(), h.k(), h.wbits(), h.abits());
    let candidates = candidates(n, k, wbits, abits);
    let key = key(&layer)?;
    let ctx = layer.context().clone();
    let mut io: Option<(L2Flush, DeviceBuffer<f16>, DeviceBuffer<f16>)> = None;
    let outcome = ctx
        .tuner()
        .tune_with(
            &key,
            &candidates,
            |_, t| -> Result<(), AptError> {
                match *t {
                    DecodeTiles::Popc(t) => {
                        let cfg = t.config(k, wbits, abits, false)?;
                        apt_gemv_popc::instance(&cfg)
                            .and_then(|i| i.kernel(apt_gemv_popc::NAME, &cfg))
                            .map_err(kernel_err)?
                            .load(&ctx)
                            .map_err(kernel_err)
                    }
                    DecodeTiles::Imma(t) => {
                        let cfg = t.config(n, k, wbits, abits, false)?;
                        apt_gemv_imma::instance(&cfg)
                            .and_then(|i| i.kernel(apt_gemv_imma::NAME, &cfg))
                            .map_err(kernel_err)?
                            .load(&ctx)
                            .map_err(kernel_err)
                    }
                }
            },
            |_, t, ()| -> Result<_, AptError> {
                if io.is_none() {
                    let x: Vec<f16> = pattern(k, 3).into_iter().map(f16::from_f32).collect();
                    io = Some((
                        L2Flush::with_mode(&ctx, L2Mode::Clean).map_err(kernel_err)?,
                        DeviceBuffer::from_host(&ctx, &x).map_err(kernel_err)?,
                        DeviceBuffer::zeros(&ctx, n).map_err(kernel_err)?,
                    ));
                }
                let (flush, x, y) = io.as_mut().expect("made above");
                time_launches(&ctx, flush, TIMED_RUNS, || {
                    match *t {
                        DecodeTiles::Popc(t) => layer.forward_popc(x, 1, y, None, Some(t)),
                        DecodeTiles::Imma(t) => layer.forward_imma(x, 1, y, None, Some(t)),
                    }
                    .map_err(|e| e.to_string())
                })
                .map_err(kernel_err)
            },
        )
        .map_err(kernel_err)?;
    let best = candidates[outcome.index];
    Ok((layer.with_decode(best)?, best, outcome))
}

impl TuneCandidate for AptPath {
    fn to_json(&self) -> Value {
        match self {
            AptPath::Bgmma(c) => json!({
                "kernel": "bgmma", "bm": c.BM, "bn": c.BN, "wgn": c.WGN,
                "stages": c.STAGES, "store_box": c.STORE_BOX,
            }),
            AptPath::Igmma(c) => json!({
                "kernel": "igmma", "bm": c.BM, "bn": c.BN, "stages": c.STAGES,
            }),
            other => json!({ "kernel": format!("{other:?}") }),
        }
    }
}

/// The points [`tune_batch`] measures for `m` tokens (at least 2) of `layer`: the rule's GEMM
/// first ([`AptLinear::path`]), then the 1-bit warpgroup MMA in every tiling
/// [`AptLinear::bgmma_tiles`] takes of 64 rows (and 128 from 128 tokens), one or two
/// warpgroups and 8 to 256 columns a plane, the outputs stored as [`AptLinear::bgmma_store`]
/// stores them at `m` and the other way (threads or the copy engine); and from 16 tokens, where
/// `k` is a multiple of 16, the integer warpgroup MMA of the codes in 128- and 256-column
/// blocks. None twice; every point passes
/// [`AptLinear::check_batch_path`].
pub fn batch_candidates(layer: &AptLinear, m: usize) -> Vec<AptPath> {
    let mut out = vec![layer.path(m.max(2))];
    let rows: &[i32] = if m >= 128 { &[64, 128] } else { &[64] };
    for &bm in rows {
        for wgn in [1, 2] {
            for bn in [8, 16, 32, 64, 128, 256] {
                // The outputs stored as the rule stores them at `m`, then the other way where
                // the columns allow boxes (the rule's threshold was measured at 1 and 64 tokens
                // only: H100, session 68, W1A2 at 4096 tokens took 6-26% less with the copy
                // engine's stores, which the rule gives only from 4 plane pairs).
                if let Some(cfg) = layer.bgmma_tiles(bm, bn, wgn, false) {
                    let rule = layer.bgmma_store(cfg, m);
                    out.push(AptPath::Bgmma(rule));
                    let other = if rule.STORE_BOX > 0 {
                        0
                    } else {
                        bgmma_store_box(&cfg)
                    };
                    if other != rule.STORE_BOX {
                        out.push(AptPath::Bgmma(apt_gemm_bgmma::Config {
                            STORE_BOX: other,
                            ..rule
                        }));
                    }
                }
            }
        }
    }
    if m >= 16 && layer.k().is_multiple_of(16) {
        let rule = layer.igmma_config(m, false);
        for bn in [256, 128] {
            out.push(AptPath::Igmma(apt_gemm_igmma::Config { BN: bn, ..rule }));
        }
    }
    let mut unique = Vec::with_capacity(out.len());
    for p in out {
        if !unique.contains(&p) {
            unique.push(p);
        }
    }
    unique
}

/// The tuner's key for `layer`'s GEMM at `m` tokens: the two warpgroup GEMMs with a digest of
/// their rule configurations' CUDA, the widths, the shape and `m`'s bucket ([`batch_bucket`]).
fn batch_key(layer: &GpuAptLinear, m: usize) -> Result<TuneKey, AptError> {
    let h = layer.host();
    let (n, k, wbits, abits) = (h.n(), h.k(), h.wbits(), h.abits());
    let mut source = apt_gemm_bgmma::source(&h.bgmma_config(m, false))
        .map_err(kernel_err)?
        .to_string();
    source += apt_gemm_igmma::source(&h.igmma_config(m, false)).map_err(kernel_err)?;
    Ok(TuneKey::for_device(
        layer.context().device(),
        format!(
            "apt_batch-{}",
            crate::kernels::source_digest([source.as_bytes()])
        ),
        format!("W{wbits}A{abits} n={n} k={k} m<={}", batch_bucket(m)),
    ))
}

/// The fastest of [`batch_candidates`] for `layer`'s forward of `m` tokens (at least 2) on its
/// GPU, the quantizer included (or the point the tuner remembers for these kernels, layer,
/// bucket and GPU), and `layer` set to run it for `m`'s bucket ([`GpuAptLinear::with_batch`]).
/// Every point is compiled first, in parallel, then timed as the forward runs it (the quantizer,
/// then the GEMM as its programmatic dependent) on fixed activations; a point that fails to
/// compile or launch is recorded with its reason and skipped. Needs sm_90a (the warpgroup
/// MMAs); refused, naming `m`, for one token ([`tune`] tunes that).
pub fn tune_batch(
    layer: GpuAptLinear,
    m: usize,
) -> Result<(GpuAptLinear, AptPath, TuneOutcome), AptError> {
    if m < 2 {
        return Err(AptError::Kernel(format!(
            "argument `m`: {m} tokens; tune_batch tunes 2 or more (`tune` tunes one)"
        )));
    }
    let ctx = layer.context().clone();
    if ctx.arch() != "sm_90a" {
        return Err(AptError::Kernel(format!(
            "tune_batch: the warpgroup GEMMs need sm_90a, this device is {}",
            ctx.arch()
        )));
    }
    let h = layer.host();
    let (n, k) = (h.n(), h.k());
    let candidates = batch_candidates(h, m);
    let key = batch_key(&layer, m)?;
    type Io = (L2Flush, DeviceBuffer<f16>, DeviceBuffer<f16>);
    let mut io: Option<(Io, AptActivations, AptActivations)> = None;
    let outcome = ctx
        .tuner()
        .tune_with(
            &key,
            &candidates,
            |_, p| -> Result<(), AptError> {
                match *p {
                    AptPath::Bgmma(cfg) => apt_gemm_bgmma::instance(&cfg)
                        .and_then(|i| i.kernel(apt_gemm_bgmma::NAME, &cfg))
                        .map_err(kernel_err)?
                        .load(&ctx)
                        .map_err(kernel_err),
                    AptPath::Igmma(cfg) => apt_gemm_igmma::instance(&cfg)
                        .and_then(|i| i.kernel(apt_gemm_igmma::NAME, &cfg))
                        .map_err(kernel_err)?
                        .load(&ctx)
                        .map_err(kernel_err),
                    other => Err(AptError::Kernel(format!("not a batch GEMM: {other:?}"))),
                }
            },
            |_, p, ()| -> Result<_, AptError> {
                if io.is_none() {
                    let x: Vec<f16> = pattern(m * k, 3).into_iter().map(f16::from_f32).collect();
                    let buffers = (
                        L2Flush::with_mode(&ctx, L2Mode::Clean).map_err(kernel_err)?,
                        DeviceBuffer::from_host(&ctx, &x).map_err(kernel_err)?,
                        DeviceBuffer::zeros(&ctx, m * n).map_err(kernel_err)?,
                    );
                    let planes = AptActivations::new(&layer, m)?;
                    let codes = AptActivations::with_codes(&layer, m, true)?;
                    io = Some((buffers, planes, codes));
                }
                let ((flush, x, y), planes, codes) = io.as_mut().expect("made above");
                time_launches(&ctx, flush, TIMED_RUNS, || {
                    match *p {
                        AptPath::Bgmma(cfg) => layer
                            .quantize_into(x, planes)
                            .and_then(|()| layer.gemm_bgmma_with(planes, y, None, cfg, true)),
                        AptPath::Igmma(cfg) => layer
                            .quantize_into(x, codes)
                            .and_then(|()| layer.gemm_igmma_with(codes, y, None, cfg, true)),
                        other => Err(AptError::Kernel(format!("not a batch GEMM: {other:?}"))),
                    }
                    .map_err(|e| e.to_string())
                })
                .map_err(kernel_err)
            },
        )
        .map_err(kernel_err)?;
    drop(io);
    let best = candidates[outcome.index];
    Ok((layer.with_batch(m, best)?, best, outcome))
}
