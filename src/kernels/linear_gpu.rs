//! [`GpuQuantizedLinear`]: a quantized linear layer on the GPU that autotunes its matmul on
//! first use per `m` bucket and validates every input.
//!
//! ```no_run
//! use half::f16;
//! use tilus::kernels::linear::GpuQuantizedLinear;
//! use tilus::quant::Group;
//! use tilus::runtime::{Context, DeviceBuffer};
//! use tilus::DType;
//! let ctx = Context::new(0)?;
//! let (k, n) = (4096, 4096);
//! let w: Vec<f32> = (0..k * n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
//! let layer = GpuQuantizedLinear::<f16>::new(&ctx, &w, k, n, DType::Int(4), Group::Rows(128))?;
//! let x = DeviceBuffer::from_host(&ctx, &vec![f16::from_f32(0.5); 3 * k])?;
//! let y = layer.forward(&x, 3)?; // tunes the m <= 4 bucket on first use: 3 x 4096 f16
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! How it works:
//!
//! * The constructor quantizes on the host (or takes a [`QuantizedLinear`]) and uploads the
//!   weight re-laid-out for the layer's default configuration. Nothing is tuned yet.
//! * The first call with `m` rows in a new bucket ([`super::qmatmul::tune::m_bucket`]) tunes
//!   [`super::qmatmul::tune::candidates`] for that bucket through the context's tuner
//!   (remembered in memory, persisted under `<cache dir>/tune`; a later process reuses the
//!   record without measuring). Candidates are timed on the uploaded weight whatever their
//!   tile layout (timing does not depend on the values).
//! * If the winner reads the weight in another layout ([`WeightLayoutKey`]), the weight is
//!   re-laid-out on the host and uploaded once for that layout; configurations sharing a
//!   layout share the device copy. The layer keeps the default layout (used for tuning) and
//!   the layouts of its buckets' winners.
//! * Every later call in the bucket runs the winner directly.
//! * A layer with an input permutation (GPTQ act-order, [`QuantizedLinear::with_input_perm`])
//!   first gathers `x[:, perm]` into a scratch buffer of the most rows seen
//!   ([`crate::kernels::permute`]), then multiplies that.
//! * Each bucket's kernel owns its split-k workspace and semaphores, made when the bucket is
//!   planned for the bucket's most rows: a forward allocates nothing once its bucket is
//!   planned. [`GpuQuantizedLinear::reserve`] plans every bucket up to `max_m` rows ahead of
//!   time (and the input scratch); after it, [`GpuQuantizedLinear::forward_into`] neither
//!   tunes, allocates nor synchronizes with the host, so it can be captured in a CUDA graph
//!   ([`tilus_runtime::Context::capture`], on a context with its own stream), and a call with
//!   more rows is an error naming `m`. Two layers never share these buffers;
//!   one layer must not run two forwards at once on different streams (they would share its
//!   buffers).

use super::linear::QuantizedLinear;
use super::qmatmul::tune::candidates_up_to;
use super::qmatmul::tune::{m_bucket, tune_qmatmul, WeightLayoutKey};
use super::qmatmul::{prepare, DeviceWeight, GpuQMatmul, QMatmulConfig, QMatmulError};
use crate::element::Activation;
use crate::quant::{Group, QuantizedWeight};
use crate::DType;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tilus_runtime::{Context, DeviceBuffer, DeviceRead, DeviceWrite, Element, TuneSource};

/// What a bucket runs and how that was decided.
#[derive(Clone, Debug)]
pub struct LinearPlan {
    /// The `m` the bucket was tuned at ([`m_bucket`]).
    pub m_bucket: usize,
    /// The winning configuration.
    pub config: QMatmulConfig,
    /// Measured now, or reused from the tuner's memory or the record on disk.
    pub source: TuneSource,
    /// The winner's median time at `m_bucket` rows when it was tuned, in microseconds.
    pub median_us: f64,
    /// How many configurations were (or had been) tuned over.
    pub candidates: usize,
    /// The record file, when tuning results are persisted.
    pub record: Option<PathBuf>,
}

struct Plan<T: Element> {
    info: LinearPlan,
    kernel: GpuQMatmul,
    weight: Arc<DeviceWeight<T>>,
}

struct State<T: Element> {
    /// Device copies of the weight, one per layout in use.
    weights: HashMap<WeightLayoutKey, Arc<DeviceWeight<T>>>,
    /// Per `m` bucket.
    plans: HashMap<usize, Arc<Plan<T>>>,
    /// The permuted input `x[:, perm]` of an act-order layer: one buffer of the most rows
    /// seen (or reserved), of which a call uses the first `m x k` elements.
    scratch: Option<DeviceBuffer<T>>,
    /// Rows reserved by [`GpuQuantizedLinear::reserve`]: a forward with more is an error.
    reserved: Option<usize>,
}

/// A quantized linear layer `y[m, n] = x[m, k] · W[k, n]` on the GPU with activations of type
/// `T` (f16 or bf16). See the module documentation.
pub struct GpuQuantizedLinear<T: Activation> {
    ctx: Arc<Context>,
    quantized: QuantizedWeight,
    /// The layer's default configuration; its layout is the tuning buffer.
    base: QMatmulConfig,
    base_layout: WeightLayoutKey,
    /// The input permutation on the device (act-order checkpoints), as i32.
    input_perm: Option<DeviceBuffer<i32>>,
    state: Mutex<State<T>>,
}

impl<T: Activation> std::fmt::Debug for GpuQuantizedLinear<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuQuantizedLinear")
            .field("k", &self.k())
            .field("n", &self.n())
            .field("wdtype", &self.base.wdtype)
            .field("adtype", &self.base.adtype)
            .field("plans", &self.plans())
            .finish_non_exhaustive()
    }
}

impl QuantizedLinear {
    /// This layer on `ctx`'s GPU, computing in `T` (which must be the layer's activation type;
    /// errors name `T`). Uploads the weight; tuning happens on first use per `m` bucket.
    pub fn to_gpu<T: Activation>(
        &self,
        ctx: &Arc<Context>,
    ) -> Result<GpuQuantizedLinear<T>, QMatmulError> {
        let base = *self.config();
        if T::DTYPE != base.adtype {
            return Err(QMatmulError::Shape {
                arg: "T",
                reason: format!("the layer computes in {}, not {}", base.adtype, T::DTYPE),
            });
        }
        let base_layout = WeightLayoutKey::of(&base)?;
        let weight = Arc::new(DeviceWeight::<T>::upload(ctx, self.prepared())?);
        let input_perm = match self.input_perm() {
            // `with_input_perm` checked that k fits an i32.
            Some(p) => Some(DeviceBuffer::from_host(
                ctx,
                &p.iter().map(|&v| v as i32).collect::<Vec<i32>>(),
            )?),
            None => None,
        };
        Ok(GpuQuantizedLinear {
            ctx: ctx.clone(),
            quantized: self.quantized().clone(),
            base,
            state: Mutex::new(State {
                weights: HashMap::from([(base_layout.clone(), weight)]),
                plans: HashMap::new(),
                scratch: None,
                reserved: None,
            }),
            base_layout,
            input_perm,
        })
    }
}

/// How many configurations a layer's first forward in a bucket measures: its own configuration
/// and the first of [`candidates`](super::qmatmul::tune::candidates), which come in the order
/// they measured best on an H100. All compile in parallel; on a 16-core host this is a few
/// seconds once per bucket (the winner is persisted). `tilus bench tune --points N` explores wider.
pub const LAYER_TUNE_POINTS: usize = 16;

/// The configurations a layer tunes over for `m_bucket` rows: its own configuration first,
/// then the head of [`candidates`](super::qmatmul::tune::candidates) for the bucket, adjusted
/// to the layer's weight (zero points as the weight has them) and kept when they fit the
/// shape (and, in the last, unbounded bucket, when they need no split-k buffers); at most
/// [`LAYER_TUNE_POINTS`].
pub fn layer_candidates(
    base: &QMatmulConfig,
    m_bucket: usize,
    n: usize,
    k: usize,
) -> Vec<QMatmulConfig> {
    let mut out = vec![*base];
    // The last bucket has no most rows to reserve split-k buffers for.
    let unbounded = m_bucket >= super::qmatmul::tune::M_BUCKET_CAP;
    // Twice the points: some of the head may coincide with the layer's own configuration.
    let head = candidates_up_to(
        base.wdtype,
        base.adtype,
        base.group_rows,
        m_bucket,
        n,
        k,
        2 * LAYER_TUNE_POINTS,
    );
    if let Ok(list) = head {
        for c in list {
            let c = QMatmulConfig {
                wdtype: base.wdtype,
                adtype: base.adtype,
                group_rows: base.group_rows,
                has_zeros: base.has_zeros,
                ..c
            };
            if out.len() == LAYER_TUNE_POINTS {
                break;
            }
            if !out.contains(&c)
                && c.check_shape(m_bucket, n, k).is_ok()
                && !(unbounded && c.needs_split_buffers())
            {
                out.push(c);
            }
        }
    }
    out
}

/// Check an input of `len` elements for `m` rows of `k` (errors name `m`, or `arg`).
pub fn check_rows(
    arg: &'static str,
    len: usize,
    m: usize,
    k: usize,
    dtype: DType,
) -> Result<(), QMatmulError> {
    if m == 0 {
        return Err(QMatmulError::Shape {
            arg: "m",
            reason: "must be positive".into(),
        });
    }
    let Some(want) = m.checked_mul(k) else {
        return Err(QMatmulError::Shape {
            arg: "m",
            reason: format!("{m} x {k} elements overflow"),
        });
    };
    if len != want {
        return Err(QMatmulError::Buffer {
            arg,
            expected: want.saturating_mul(2),
            got: len.saturating_mul(2),
            what: format!("{m} x {k} {dtype}"),
        });
    }
    Ok(())
}

impl<T: Activation> GpuQuantizedLinear<T> {
    /// Quantize row-major `weight[k * n]` to `wdtype` with scales in `T` (unsigned types get
    /// zero points), and put the layer on `ctx`'s GPU. Errors name the argument at fault.
    pub fn new(
        ctx: &Arc<Context>,
        weight: &[f32],
        k: usize,
        n: usize,
        wdtype: DType,
        group: Group,
    ) -> Result<GpuQuantizedLinear<T>, QMatmulError> {
        QuantizedLinear::new(weight, k, n, wdtype, group, T::DTYPE)?.to_gpu(ctx)
    }

    /// A layer from an imported checkpoint layer ([`QuantizedLinear::from_imported`]; `T`
    /// must be the weight's scale dtype), on `ctx`'s GPU. An act-order layer permutes its
    /// input with [`crate::kernels::permute`] before the matmul.
    pub fn from_imported(
        ctx: &Arc<Context>,
        layer: crate::checkpoint::ImportedLayer,
    ) -> Result<GpuQuantizedLinear<T>, QMatmulError> {
        QuantizedLinear::from_imported(layer)?.to_gpu(ctx)
    }

    pub fn k(&self) -> usize {
        self.quantized.k
    }

    pub fn n(&self) -> usize {
        self.quantized.n
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The quantized weight: `dequantize()` is exactly what the layer multiplies with.
    pub fn quantized(&self) -> &QuantizedWeight {
        &self.quantized
    }

    /// The configuration the layer starts from (and tunes around).
    pub fn default_config(&self) -> &QMatmulConfig {
        &self.base
    }

    /// The buckets tuned so far, by `m_bucket`.
    pub fn plans(&self) -> Vec<LinearPlan> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<LinearPlan> = state.plans.values().map(|p| p.info.clone()).collect();
        v.sort_by_key(|p| p.m_bucket);
        v
    }

    /// How many device copies of the weight the layer holds (one per layout in use).
    pub fn weight_layouts(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .weights
            .len()
    }

    /// The plan for `m` rows, tuning its bucket now if this layer has not yet (use it to tune
    /// ahead of time).
    pub fn plan(&self, m: usize) -> Result<LinearPlan, QMatmulError> {
        Ok(self.plan_for(m)?.info.clone())
    }

    fn plan_for(&self, m: usize) -> Result<Arc<Plan<T>>, QMatmulError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.plan_locked(&mut state, m)
    }

    /// Plan every bucket of up to `max_m` rows now (tuning those not yet tuned) and make their
    /// split-k buffers and, for an act-order layer, the input scratch, so that later forwards
    /// of up to `max_m` rows allocate nothing, tune nothing and never wait for the GPU: ready
    /// to be captured in a CUDA graph. From then on a forward of more than the largest
    /// `max_m` reserved is an error naming `m` (call `reserve` again to allow more). Errors
    /// name `m`.
    pub fn reserve(&self, max_m: usize) -> Result<(), QMatmulError> {
        if max_m == 0 {
            return Err(QMatmulError::Shape {
                arg: "m",
                reason: "must be positive".into(),
            });
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows = 1;
        loop {
            self.plan_locked(&mut state, rows.min(max_m))?;
            if rows >= max_m {
                break;
            }
            rows *= 2;
        }
        if self.input_perm.is_some() {
            let len = super::qmatmul::size_product("m", &[("m", max_m), ("k", self.k())])?;
            DeviceBuffer::grow_zeroed(&mut state.scratch, &self.ctx, len)?;
        }
        state.reserved = Some(state.reserved.map_or(max_m, |r| r.max(max_m)));
        Ok(())
    }

    /// The rows [`Self::reserve`] made room for, if it was called.
    pub fn reserved_rows(&self) -> Option<usize> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserved
    }

    fn plan_locked(&self, state: &mut State<T>, m: usize) -> Result<Arc<Plan<T>>, QMatmulError> {
        let (n, k) = (self.n(), self.k());
        if m == 0 {
            return Err(QMatmulError::Shape {
                arg: "m",
                reason: "must be positive".into(),
            });
        }
        // Reject shapes no configuration takes before tuning anything.
        self.base.check_shape(m, n, k)?;
        let mb = m_bucket(m);
        if let Some(p) = state.plans.get(&mb) {
            // The last bucket's split-k buffers (none from `layer_candidates`, but a record
            // tuned elsewhere may hold one) grow to the rows asked for.
            if p.info.config.needs_split_buffers() && p.kernel.reserved_rows().is_none_or(|r| r < m)
            {
                p.kernel.reserve(&self.ctx, m, n)?;
            }
            p.kernel.reserve_digits(&self.ctx, m, k)?;
            return Ok(p.clone());
        }
        let sms = self.ctx.device().multiprocessors as usize;
        let cands: Vec<_> = layer_candidates(&self.base, mb, n, k)
            .into_iter()
            .map(|c| c.for_multiprocessors(sms))
            .collect();
        let tuning_weight = state
            .weights
            .get(&self.base_layout)
            .expect("the default layout is uploaded at construction")
            .clone();
        let tuned = tune_qmatmul(&self.ctx, &cands, mb, &tuning_weight)?;
        let layout = WeightLayoutKey::of(&tuned.config)?;
        let weight = match state.weights.get(&layout) {
            Some(w) => w.clone(),
            None => {
                let prepared = prepare(&self.quantized, &tuned.config)?;
                let w = Arc::new(DeviceWeight::<T>::upload(&self.ctx, &prepared)?);
                state.weights.insert(layout, w.clone());
                w
            }
        };
        let plan = Arc::new(Plan {
            info: LinearPlan {
                m_bucket: mb,
                config: tuned.config,
                source: tuned.outcome.source,
                median_us: tuned.outcome.median_us,
                candidates: cands.len(),
                record: tuned.outcome.path.clone(),
            },
            kernel: tuned.kernel,
            weight,
        });
        // Every row count of the bucket runs without allocating (`tune_qmatmul` reserved the
        // bucket's `m`; the last bucket has no most rows: `m` itself).
        plan.kernel.reserve(&self.ctx, mb.max(m), n)?;
        plan.kernel.reserve_digits(&self.ctx, mb.max(m), k)?;
        state.plans.insert(mb, plan.clone());
        Ok(plan)
    }

    /// `y = x · W` for `x` of `m` rows (`m x k` elements, row-major); a new `m x n` buffer.
    /// Tunes `m`'s bucket on first use. Errors name `m` or `x`. Returns when the work is queued.
    pub fn forward(&self, x: &DeviceBuffer<T>, m: usize) -> Result<DeviceBuffer<T>, QMatmulError> {
        check_rows("x", x.len(), m, self.k(), T::DTYPE)?;
        let y_len = super::qmatmul::size_product("m", &[("m", m), ("n", self.n())])?;
        let mut y = DeviceBuffer::zeros(&self.ctx, y_len)?;
        self.forward_into(x, m, &mut y)?;
        Ok(y)
    }

    /// [`Self::forward`] into `y` (`m x n` elements, overwritten). Errors name `m`, `x` or `y`.
    /// `x` and `y` may be views of memory another library owns
    /// ([`tilus_runtime::DeviceView::from_cuda`]); nothing is copied.
    pub fn forward_into(
        &self,
        x: &impl DeviceRead<T>,
        m: usize,
        y: &mut impl DeviceWrite<T>,
    ) -> Result<(), QMatmulError> {
        self.forward_into_with(x, m, y, false)
    }

    /// [`Self::forward_into`] with the matmul launched as a programmatic dependent of the
    /// kernel queued before it on the context's stream (sm_90): its blocks start while that
    /// kernel ends and load their first weight tiles, and wait for it to finish before they
    /// read `x` or write anything. Back to back, one layer's weights then stream in while the
    /// layer before it drains (`tilus bench step`). Where the bucket's kernel cannot overlap
    /// (the gemv, the one-token integer mma and the look-up kernel can), on a device before
    /// sm_90, and on the call that tunes the bucket (its weight upload precedes the launch),
    /// it is an ordinary launch: the result is the same bits either way. Measured on an H100
    /// it does not pay (a Llama-70B step at one token: 0.88-1.00x the time of
    /// [`Self::forward_into`]; docs/benchmarks.md), so prefer `forward_into`; this stays for
    /// measuring the overlap.
    pub fn forward_into_dependent(
        &self,
        x: &impl DeviceRead<T>,
        m: usize,
        y: &mut impl DeviceWrite<T>,
    ) -> Result<(), QMatmulError> {
        self.forward_into_with(x, m, y, true)
    }

    fn forward_into_with(
        &self,
        x: &impl DeviceRead<T>,
        m: usize,
        y: &mut impl DeviceWrite<T>,
        dependent: bool,
    ) -> Result<(), QMatmulError> {
        check_rows("x", DeviceRead::elements(x), m, self.k(), T::DTYPE)?;
        check_rows("y", DeviceWrite::elements(y), m, self.n(), T::DTYPE)?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = state.reserved.filter(|&r| m > r) {
            return Err(QMatmulError::Shape {
                arg: "m",
                reason: format!(
                    "{m} rows exceed the {r} rows reserved with reserve(); reserve({m}) first (a forward after reserve() never tunes or allocates)"
                ),
            });
        }
        let dependent = dependent && state.plans.contains_key(&m_bucket(m));
        let plan = self.plan_locked(&mut state, m)?;
        let Some(perm) = &self.input_perm else {
            drop(state);
            return plan
                .kernel
                .run_with(&self.ctx, m, x, &plan.weight, y, dependent);
        };
        let len = m * self.k(); // checked by check_rows
        let (mi, ki) = match (i32::try_from(m), i32::try_from(len)) {
            (Ok(mi), Ok(_)) => (mi, self.k() as i32),
            _ => {
                return Err(QMatmulError::Shape {
                    arg: "m",
                    reason: format!(
                        "{m} x {} elements: the input permutation indexes x with i32",
                        self.k()
                    ),
                })
            }
        };
        // The scratch stays locked while both launches are queued: another thread's forward
        // cannot overwrite it before this matmul has read it (same stream, in order). It
        // grows to the most rows seen (never past a reservation: checked above).
        let scratch = DeviceBuffer::grow_zeroed(&mut state.scratch, &self.ctx, len)?;
        let mut permuted = scratch.view_mut(0..len)?;
        T::permute_columns(&self.ctx, mi, ki, perm, x, &mut permuted)
            .map_err(|e| QMatmulError::Gpu(e.to_string()))?;
        let permuted = scratch.view(0..len)?;
        plan.kernel
            .run_with(&self.ctx, m, &permuted, &plan.weight, y, dependent)
    }

    /// The input permutation (act-order checkpoints), if the layer has one.
    pub fn has_input_perm(&self) -> bool {
        self.input_perm.is_some()
    }

    /// [`Self::forward`] from and to host memory (copies both ways, waits for the result).
    pub fn forward_host(&self, x: &[T], m: usize) -> Result<Vec<T>, QMatmulError> {
        check_rows("x", x.len(), m, self.k(), T::DTYPE)?;
        let xd = DeviceBuffer::from_host(&self.ctx, x)?;
        Ok(self.forward(&xd, m)?.to_host()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layer_is_send_and_sync() {
        fn check<S: Send + Sync>() {}
        check::<GpuQuantizedLinear<f16>>();
        check::<GpuQuantizedLinear<half::bf16>>();
    }

    #[test]
    fn inputs_are_checked_and_named() {
        let dt = DType::F16;
        assert!(check_rows("x", 12, 3, 4, dt).is_ok());
        let e = check_rows("x", 12, 0, 4, dt).unwrap_err().to_string();
        assert!(e.contains("`m`") && e.contains("positive"), "{e}");
        let e = check_rows("x", 11, 3, 4, dt).unwrap_err().to_string();
        assert!(e.contains("`x`") && e.contains("3 x 4 f16"), "{e}");
        let e = check_rows("y", 0, 3, 4, dt).unwrap_err().to_string();
        assert!(e.contains("`y`"), "{e}");
        let e = check_rows("x", 1, usize::MAX, 2, dt)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`m`") && e.contains("overflow"), "{e}");
    }

    #[test]
    fn layer_candidates_keep_the_layer_weight() {
        let (n, k) = (512, 1024);
        for (w, zeros, group) in [("u4", true, Some(128)), ("i4", false, None)] {
            let wdtype: DType = w.parse().unwrap();
            let base = QMatmulConfig::for_shape(wdtype, DType::BF16, group, zeros, n, k).unwrap();
            for mb in [1, 32, 8192] {
                let c = layer_candidates(&base, mb, n, k);
                assert_eq!(c[0], base);
                assert!(c.len() >= 2, "{w} m={mb}: {c:?}");
                assert!(
                    c.len() <= LAYER_TUNE_POINTS,
                    "{w} m={mb}: {} points",
                    c.len()
                );
                for (i, cfg) in c.iter().enumerate() {
                    assert!(!c[..i].contains(cfg));
                    assert_eq!(
                        (cfg.wdtype, cfg.adtype, cfg.group_rows, cfg.has_zeros),
                        (wdtype, DType::BF16, group, zeros)
                    );
                    cfg.check_shape(mb, n, k).unwrap();
                }
            }
        }
    }
}
