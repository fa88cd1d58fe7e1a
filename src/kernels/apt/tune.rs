//! Autotuning of the popc decode kernel's tiles ([`PopcTiles`]) for one layer: its shape and
//! widths. [`tune`] times every point of [`candidates`] on the GPU (L2 flushed clean before each
//! run) through the runtime's tuner, which remembers the winner per GPU and driver
//! (`Context::tuner`, on disk with the context's cache), so a second call for the same layer
//! launches nothing.
//!
//! The rule ([`PopcTiles::for_shape`]) stays the default: it was fitted to scans of the
//! Llama-70B layers on an H200 (`docs/apt.md`), and tuning costs a compilation per point the
//! first time. The key names the CUDA of the rule's point, so a changed kernel tunes afresh
//! instead of reusing a winner measured on other code.

use super::kernel::apt_gemv_popc;
use super::linear::{kernel_err, GpuAptLinear};
use super::PopcTiles;
use crate::apt::AptError;
use crate::kernels::timing::{pattern, time_launches};
use half::f16;
use serde_json::{json, Value};
use tilus_runtime::autotune::TIMED_RUNS;
use tilus_runtime::{DeviceBuffer, L2Flush, L2Mode, TuneCandidate, TuneKey, TuneOutcome};

impl TuneCandidate for PopcTiles {
    fn to_json(&self) -> Value {
        json!({
            "warps": self.warps,
            "rows": self.rows,
            "vec": self.vec,
            "per_sm": self.per_sm,
            "stages": self.stages,
            "qsplit": self.qsplit,
        })
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
/// activations: the rule's first, then the tilings the session-50 to -52 scans found within a
/// few percent of the best on some layer (8 or 16 warps of 2 or 4 rows, one or two blocks a
/// multiprocessor, register prefetch or rings of 2 to 4 stages, one or two threads a word of
/// the token), each only if the kernel takes it for this `k` and these widths (shared memory,
/// the prologue's words).
pub fn candidates(n: usize, k: usize, wbits: u32, abits: u32) -> Vec<PopcTiles> {
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

/// The tuner's key for `layer`: the kernel with a digest of the rule's CUDA (a changed kernel
/// tunes afresh), and the layer's widths and shape.
fn key(layer: &GpuAptLinear) -> Result<TuneKey, AptError> {
    use sha2::{Digest, Sha256};
    let h = layer.host();
    let rule = PopcTiles::for_shape(h.n(), h.k(), h.wbits());
    let cfg = rule.config(h.k(), h.wbits(), h.abits(), false)?;
    let source = apt_gemv_popc::source(&cfg).map_err(kernel_err)?;
    let digest = Sha256::digest(source.as_bytes());
    let print: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(TuneKey::for_device(
        layer.context().device(),
        format!("apt_gemv_popc-{print}"),
        format!("W{}A{} n={} k={}", h.wbits(), h.abits(), h.n(), h.k()),
    ))
}

/// The fastest of [`candidates`] for `layer`'s one-token forward on its GPU (or the point the
/// tuner remembers for this kernel, layer and GPU), and `layer` set to run it
/// ([`GpuAptLinear::with_popc_tiles`]). Every point is compiled first, in parallel, then timed
/// on a token of fixed values (the kernel's time does not depend on them); a point that fails
/// to compile or launch is recorded with its reason and skipped.
pub fn tune(layer: GpuAptLinear) -> Result<(GpuAptLinear, PopcTiles, TuneOutcome), AptError> {
    let h = layer.host();
    let candidates = candidates(h.n(), h.k(), h.wbits(), h.abits());
    let key = key(&layer)?;
    let ctx = layer.context().clone();
    let (n, k) = (h.n(), h.k());
    let mut io: Option<(L2Flush, DeviceBuffer<f16>, DeviceBuffer<f16>)> = None;
    let outcome = ctx
        .tuner()
        .tune_with(
            &key,
            &candidates,
            |_, t| -> Result<(), AptError> {
                let cfg = t.config(k, h.wbits(), h.abits(), false)?;
                apt_gemv_popc::instance(&cfg)
                    .and_then(|i| i.kernel(apt_gemv_popc::NAME, &cfg))
                    .map_err(kernel_err)?
                    .load(&ctx)
                    .map_err(kernel_err)
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
                    layer
                        .forward_popc(x, 1, y, None, Some(*t))
                        .map_err(|e| e.to_string())
                })
                .map_err(kernel_err)
            },
        )
        .map_err(kernel_err)?;
    let best = candidates[outcome.index];
    Ok((layer.with_popc_tiles(best)?, best, outcome))
}
