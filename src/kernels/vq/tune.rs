//! Autotuning of [`vq_gemv`](super::kernel::vq_gemv)'s knobs for one layer and token count: the
//! codebook's copies in shared memory (the cache's shared tier; the codebook is always wholly
//! in shared memory, so no entry is left to a global tier), warps, the ring's stages, the k
//! split and, for 9 to 16 tokens, the product. [`tune`] times every valid combination on the
//! GPU (L2 flushed before each run) through the runtime's tuner, which remembers the winner
//! per GPU and driver (`Context::tuner`: on disk with the context's cache), so a second call
//! for the same layer shape launches nothing.
//!
//! [`tune_tiers`] does the same for the three-tier codebook cache's two knobs (entries in
//! registers and in shared memory, [`CacheTiers`]) on
//! [`vq_gemv_cached`](super::cache::vq_gemv_cached).
//!
//! The rules ([`default_cache`](super::linear::default_cache),
//! [`warps_for`](super::linear::warps_for), [`split_for`](super::linear::split_for), ...) stay
//! the defaults: tuning costs a second or more per layer shape, and the rules were measured on
//! the Llama-70B layers (`docs/vq.md`), where they are within a few percent of the best point.

use super::cache::{CacheTiers, CachedWeight};
use super::linear::{cache_ok, product_for, split_ok, warps_ok, VqCache, VqLinear};
use crate::kernels::timing::time_fallible;
use crate::vq::{arg_err, VqError};
use half::f16;
use serde_json::{json, Value};
use std::sync::Arc;
use tilus_runtime::autotune::{TIMED_RUNS, WARMUP_RUNS};
use tilus_runtime::{Context, DeviceBuffer, L2Flush, L2Mode, TuneCandidate, TuneKey, TuneOutcome};

/// One point of the direct kernel's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VqTuning {
    /// Copies of the codebook in shared memory ([`VqCache::replicas`]).
    pub replicas: usize,
    pub warps: usize,
    pub stages: usize,
    pub split: usize,
    /// 0: `y = x · Wᵀ` on 16 tokens; 1, 2: the transposed product on 8 or 16; 3: the paired
    /// transposed product on 4.
    pub product: usize,
}

impl TuneCandidate for VqTuning {
    fn to_json(&self) -> Value {
        json!({
            "replicas": self.replicas,
            "warps": self.warps,
            "stages": self.stages,
            "split": self.split,
            "product": self.product,
        })
    }
}

impl std::fmt::Display for VqTuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "x{} w{} t{} s{} k/{}",
            self.replicas, self.warps, self.product, self.stages, self.split
        )
    }
}

impl VqTuning {
    /// `layer` with these knobs (its warps first: re-laying the codes out is the costly step,
    /// skipped when they are the layer's already).
    pub fn apply(self, layer: VqLinear) -> Result<VqLinear, VqError> {
        let layer = if layer.warps() == self.warps {
            layer
        } else {
            layer.with_warps(self.warps)?
        };
        layer
            .with_cache(VqCache {
                replicas: self.replicas,
            })?
            .with_stages(self.stages)?
            .with_product(self.product)?
            .with_split(self.split)
    }
}

/// The points [`tune`] measures for `layer` at `m` tokens: the layer's copies and the other
/// count the format allows (16 or 8, or one), 8 and 16 warps, rings of 2 and 3, k split in 1,
/// 2, 4 or 8, and the product of the rule ([`product_for`]), with the transposed 8-token one
/// too where the rule pairs rows (up to 4 tokens of vectors of 4) and the 16-token one for 9 to
/// 16 tokens; only the combinations the kernel takes.
pub fn candidates(layer: &VqLinear, m: usize) -> Vec<VqTuning> {
    let w = layer.weight();
    let (c, n, k) = (w.config, w.n, w.k);
    let mut copies = vec![layer.cache().replicas];
    for other in [1, 8, 16] {
        let cache = VqCache { replicas: other };
        if !copies.contains(&other) && cache_ok(c, cache, n, k) {
            copies.push(other);
        }
    }
    let mut products = vec![product_for(c, m)];
    if products[0] == 3 {
        products.push(1);
    }
    if (9..=16).contains(&m) {
        products.push(2);
    }
    let mut out = Vec::new();
    for &replicas in &copies {
        for warps in [16, 8] {
            if !warps_ok(c, n, k, warps) {
                continue;
            }
            for stages in [3, 2] {
                for split in [1, 2, 4, 8] {
                    if !split_ok(c, n, k, split) {
                        continue;
                    }
                    for &product in &products {
                        out.push(VqTuning {
                            replicas,
                            warps,
                            stages,
                            split,
                            product,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The fastest of [`candidates`] for `layer` at `m` tokens on `ctx`'s GPU (or the one the
/// tuner remembers for this format, shape, `m` and GPU), and `layer` set to it. The table path
/// for one token and prefill's path for many are left as the layer has them: the knobs are
/// the direct kernel's, which serves the `m` between. A point the kernel cannot run (e.g.
/// shared memory beyond the device's) is recorded as failed and skipped; the error names `m`
/// outside 1..=2^20.
pub fn tune(
    ctx: &Arc<Context>,
    layer: &VqLinear,
    m: usize,
) -> Result<(VqLinear, VqTuning, TuneOutcome), VqError> {
    // The layer's own bound on m, checked before the activations are made.
    if m == 0 || m > 1 << 20 {
        return Err(arg_err("m", format!("{m}: must lie in 1..=2^20")));
    }
    let candidates = candidates(layer, m);
    let w = layer.weight();
    let key = TuneKey::for_device(
        ctx.device(),
        "vq_gemv",
        format!("{} n={} k={} m={m}", w.config.name, w.n, w.k),
    );
    // The knobs are the direct kernel's: the tables and prefill's path are left out.
    let direct = layer
        .clone()
        .with_lut(false)?
        .with_prefill_from(usize::MAX)?;
    // The codes laid out once per warp count, shared by that count's points.
    let mut layouts = Vec::new();
    for warps in [16, 8] {
        if candidates.iter().any(|t| t.warps == warps) {
            layouts.push(if direct.warps() == warps {
                direct.clone()
            } else {
                direct.clone().with_warps(warps)?
            });
        }
    }
    let mut io: Option<(L2Flush, DeviceBuffer<f16>, DeviceBuffer<f16>)> = None;
    let outcome = ctx
        .tuner()
        .tune_with(
            &key,
            &candidates,
            |_, t| {
                let base = layouts
                    .iter()
                    .find(|l| l.warps() == t.warps)
                    .expect("a layout per warp count of the candidates");
                t.apply(base.clone())
            },
            |_, _, host| -> Result<_, VqError> {
                let gpu = host.to_gpu(ctx)?;
                if io.is_none() {
                    let x: Vec<f16> = (0..m * w.k)
                        .map(|i| f16::from_f32((i % 251) as f32 / 251.0 - 0.5))
                        .collect();
                    io = Some((
                        L2Flush::with_mode(ctx, L2Mode::Clean).map_err(tune_err)?,
                        DeviceBuffer::from_host(ctx, &x).map_err(tune_err)?,
                        DeviceBuffer::zeros(ctx, m * w.n).map_err(tune_err)?,
                    ));
                }
                let (flush, x, y) = io.as_mut().expect("made above");
                // The first launch compiles the kernel and makes the split buffers.
                gpu.forward_into(x, m, y, false)?;
                time_fallible(
                    ctx,
                    WARMUP_RUNS,
                    TIMED_RUNS,
                    Some(flush),
                    || gpu.forward_into(x, m, y, false),
                    tune_err,
                )
            },
        )
        .map_err(tune_err)?;
    let best = candidates[outcome.index];
    Ok((best.apply(layer.clone())?, best, outcome))
}

fn tune_err(e: impl std::fmt::Display) -> VqError {
    arg_err("tune", e.to_string())
}

/// The fastest tiers of the codebook cache ([`CacheTiers::candidates`]) for `weight` at `m`
/// tokens with [`vq_gemv_cached`](super::cache::vq_gemv_cached) on `ctx`'s GPU (or the ones
/// the tuner remembers for this format, shape, `m` and GPU), and the outcome with every
/// point's time. The codes are uploaded once; each point uploads only its two tiers.
pub fn tune_tiers(
    ctx: &Arc<Context>,
    weight: &CachedWeight,
    m: usize,
) -> Result<(CacheTiers, TuneOutcome), VqError> {
    if m == 0 || m > 65535 {
        return Err(arg_err("m", format!("{m}: must lie in 1..=65535")));
    }
    let c = weight.config;
    let candidates = CacheTiers::candidates(c);
    let key = TuneKey::for_device(
        ctx.device(),
        "vq_gemv_cached",
        format!("{} n={} k={} m={m}", c.name, weight.n, weight.k),
    );
    let base = weight.to_gpu(ctx)?;
    let x: Vec<f16> = (0..m * weight.k)
        .map(|i| f16::from_f32((i % 251) as f32 / 251.0 - 0.5))
        .collect();
    let x = DeviceBuffer::from_host(ctx, &x).map_err(tune_err)?;
    let mut y = DeviceBuffer::zeros(ctx, m * weight.n).map_err(tune_err)?;
    let mut flush = L2Flush::with_mode(ctx, L2Mode::Clean).map_err(tune_err)?;
    let outcome = ctx
        .tuner()
        .tune_with(
            &key,
            &candidates,
            |_, t| Ok::<_, VqError>(*t),
            |_, _, t| -> Result<_, VqError> {
                let gpu = base.with_tiers(t)?;
                // The first launch compiles the kernel.
                gpu.forward_into(&x, m, &mut y)?;
                time_fallible(
                    ctx,
                    WARMUP_RUNS,
                    TIMED_RUNS,
                    Some(&mut flush),
                    || gpu.forward_into(&x, m, &mut y),
                    tune_err,
                )
            },
        )
        .map_err(tune_err)?;
    Ok((candidates[outcome.index], outcome))
}
