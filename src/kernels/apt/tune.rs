//! Autotuning of one layer's one-token forward (its shape and widths): the kernel, the popc
//! decode kernel ([`PopcTiles`]) or the integer-mma one ([`ImmaTiles`]), and its tiles. This is
//! the paper's "kernel mapping": a per-shape choice by measurement. [`tune`] times every point
//! of [`candidates`] on the GPU (L2 flushed clean before each run) through the runtime's tuner,
//! which remembers the winner per GPU and driver (`Context::tuner`, on disk with the context's
//! cache), so a second call for the same layer launches nothing.
//!
//! The rule ([`one_token_rule`]) stays the default: it was fitted to scans of the Llama-70B
//! layers on an H200 (`docs/apt.md`), and tuning costs a compilation per point the first time
//! (and a re-layout and upload of the weight's bytes per integer-mma block shape). The key
//! names the CUDA of both kernels' rule points, so a changed kernel tunes afresh instead of
//! reusing a winner measured on other code.

use super::kernel::{apt_gemv_imma, apt_gemv_popc};
use super::linear::{kernel_err, one_token_rule, DecodeTiles, GpuAptLinear};
use super::{ImmaTiles, PopcTiles};
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
    use sha2::{Digest, Sha256};
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
    let digest = Sha256::digest(source.as_bytes());
    let print: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(TuneKey::for_device(
        layer.context().device(),
        format!("apt_decode-{print}"),
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
