//! Decode attention: one new query token per sequence against its KV cache, on the GPU and on
//! the CPU interpreter, through the `#[kernel]` programs of [`super::kernel`].
//!
//! A [`DecodeAttention`] is made once per shape (heads, head dim, cache layout, dtypes) and run
//! every step; it keeps the split-KV workspace between runs, so a step allocates nothing after
//! the first. The number of splits is chosen on the host from `max_seq_len` and the GPU's
//! multiprocessor count (the sequence lengths themselves live on the device and are only read
//! by the kernel, which handles any length up to the cache's capacity: the split is a work
//! division, never a limit).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tilus::kernels::attention::decode::{
//!     CacheLayout, DecodeAttention, DecodeShape, KvCache, KvFormat,
//! };
//! use tilus::runtime::{half::f16, Context, DeviceBuffer};
//! let ctx = Context::new(0)?;
//! let shape = DecodeShape {
//!     batch: 2,
//!     q_heads: 8,
//!     kv_heads: 2,
//!     head_dim: 128,
//!     cache: CacheLayout::Paged { pages: 64, page_size: 32, max_pages: 32 },
//!     kv: KvFormat::Activation,
//! };
//! let attn = DecodeAttention::new(shape.clone(), 0.125, None, 1024)?;
//! let q = DeviceBuffer::<f16>::zeros(&ctx, shape.q_len())?;
//! let k = DeviceBuffer::<f16>::zeros(&ctx, shape.cache_len())?;
//! let v = DeviceBuffer::<f16>::zeros(&ctx, shape.cache_len())?;
//! let table = DeviceBuffer::<i32>::zeros(&ctx, 2 * 32)?;
//! let lens = DeviceBuffer::from_host(&ctx, &[1000i32, 17])?;
//! let mut out = DeviceBuffer::<f16>::zeros(&ctx, shape.q_len())?;
//! // Without a quantized cache's `meta`, its buffer type is named for the compiler.
//! let cache: KvCache<'_, _, DeviceBuffer<f32>, _> =
//!     KvCache { k: &k, v: &v, meta: None, block_table: Some(&table), seq_lens: &lens };
//! attn.run(&ctx, &q, &cache, &mut out)?;
//! # Ok(()) }
//! ```

use std::sync::Mutex;

use super::kernel::{attention_combine, attention_decode};
pub use super::kv::KvFormat;
use crate::element::Activation;
use crate::gpu::GpuArg;
use crate::macro_support::KernelError;
use tilus_core::DType;
use tilus_runtime::{
    Context, DeviceBuffer, DeviceRead, DeviceWrite, HostElement, KernelArg, KernelArgMut,
};

/// Where the keys and values of a sequence live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLayout {
    /// `[batch, max_len, kv_heads, head_dim]`: sequence `b`'s token `t` at row `b · max_len + t`.
    Contiguous { max_len: usize },
    /// `[pages, page_size, kv_heads, head_dim]` with a block table `[batch, max_pages]` of page
    /// indices: sequence `b`'s token `t` is in page `table[b][t / page_size]`, slot
    /// `t % page_size`. Page sizes 16, 32 and 64.
    Paged {
        pages: usize,
        page_size: usize,
        max_pages: usize,
    },
}

/// The shape of a decode step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    pub batch: usize,
    /// Query heads, a multiple of `kv_heads` (grouped-query attention).
    pub q_heads: usize,
    pub kv_heads: usize,
    /// 64 or 128.
    pub head_dim: usize,
    pub cache: CacheLayout,
    pub kv: KvFormat,
}

impl DecodeShape {
    /// Elements of `q` and `out`: `[batch, q_heads, head_dim]`.
    pub fn q_len(&self) -> usize {
        self.batch * self.q_heads * self.head_dim
    }

    /// Rows of the cache (tokens of all sequences or pages).
    pub fn cache_rows(&self) -> usize {
        match self.cache {
            CacheLayout::Contiguous { max_len } => self.batch * max_len,
            CacheLayout::Paged {
                pages, page_size, ..
            } => pages * page_size,
        }
    }

    /// Elements of each of the K and V caches.
    pub fn cache_len(&self) -> usize {
        self.cache_rows() * self.kv_heads * self.head_dim
    }

    /// Bytes of each of the K and V caches, with `activation` the activation type.
    pub fn cache_bytes(&self, activation: DType) -> usize {
        (self.cache_len() * self.kv.bits(activation)).div_ceil(8)
    }

    /// Elements of each of `k_meta` and `v_meta` (quantized caches): `[kv_heads, rows, 2]`.
    pub fn meta_len(&self) -> usize {
        self.kv_heads * self.cache_rows() * 2
    }

    /// The most tokens one sequence can hold.
    pub fn capacity(&self) -> usize {
        match self.cache {
            CacheLayout::Contiguous { max_len } => max_len,
            CacheLayout::Paged {
                page_size,
                max_pages,
                ..
            } => page_size * max_pages,
        }
    }
}

/// The fewest tokens a split is given (below that the combine step costs more than it saves).
const MIN_SPLIT_TOKENS: usize = 256;

/// The tile and schedule parameters of the decode kernel ([`DecodeTuning::default_for`] is
/// what [`DecodeAttention::new`] uses; `tilus bench attention --sweep` measures others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeTuning {
    /// Tokens per tile (at most the page size; 16 or 32).
    pub tile: usize,
    /// Warps per block: each computes the whole score tile and `head_dim / warps` output
    /// columns.
    pub warps: usize,
    /// Depth of the K/V `cp.async` pipeline.
    pub stages: usize,
    /// Blocks resident per multiprocessor: the register limit asked of the compiler (1: none)
    /// and the occupancy the split count is planned for.
    pub blocks_per_sm: usize,
    /// Waves of resident blocks the splits should fill.
    pub waves: usize,
}

impl DecodeTuning {
    /// Measured on the H100 (docs/perf-notes.md): for a cache of the activation type, four
    /// warps and two blocks per multiprocessor; for a quantized cache, whose tiles are
    /// dequantized in shared memory and arrive twice as fast, two warps (half the redundant
    /// score work) and four blocks.
    pub fn default_for(shape: &DecodeShape) -> DecodeTuning {
        let quantized = shape.kv != KvFormat::Activation;
        DecodeTuning {
            tile: 32,
            warps: if quantized { 2 } else { 4 },
            stages: if quantized { 4 } else { 3 },
            blocks_per_sm: match (quantized, shape.head_dim) {
                (true, _) => 4,
                (false, 128) => 2,
                (false, _) => 3,
            },
            waves: 1,
        }
    }

    fn validate(&self, shape: &DecodeShape) -> Result<(), KernelError> {
        let head_dim = shape.head_dim;
        if ![16, 32].contains(&self.tile) {
            return Err(bad("tile", format!("{} is not 16 or 32", self.tile)));
        }
        if ![1, 2, 4, 8].contains(&self.warps) || !(head_dim / 8).is_multiple_of(self.warps) {
            return Err(bad(
                "warps",
                format!("{} does not divide head_dim / 8 (1, 2, 4 or 8)", self.warps),
            ));
        }
        if !(2..=8).contains(&self.stages) {
            return Err(bad("stages", format!("{} is not in 2..=8", self.stages)));
        }
        if !(1..=8).contains(&self.blocks_per_sm) || self.waves == 0 || self.waves > 8 {
            return Err(bad(
                "blocks_per_sm",
                "blocks_per_sm and waves must lie in 1..=8",
            ));
        }
        Ok(())
    }
}

fn bad(arg: &str, message: impl std::fmt::Display) -> KernelError {
    KernelError::BadArgument {
        kernel: attention_decode::NAME,
        config: "-".to_string(),
        message: format!("{arg}: {message}"),
    }
}

/// The activation type of the attention kernels: f16 or bf16.
pub(crate) fn check_activation(dtype: DType) -> Result<(), KernelError> {
    if dtype != DType::F16 && dtype != DType::BF16 {
        return Err(bad("dtype", format!("{dtype} is not f16 or bf16")));
    }
    Ok(())
}

/// `have` at least `need` (of `unit`), or an error naming `arg`.
fn want(arg: &str, have: usize, need: usize, unit: &str) -> Result<(), KernelError> {
    if have < need {
        Err(bad(
            arg,
            format!("holds {have} {unit}, the shape needs {need}"),
        ))
    } else {
        Ok(())
    }
}

fn as_i32(arg: &str, v: usize) -> Result<i32, KernelError> {
    i32::try_from(v).map_err(|_| bad(arg, format!("{v} does not fit an i32")))
}

impl DecodeShape {
    /// Check a cache's buffers (decode reads them, appends write them): `k` and `v` in bytes
    /// against the format, with elements of `cache` (the activation type or bytes for an
    /// activation-type cache), and the metadata a quantized cache needs.
    pub(crate) fn check_cache(
        &self,
        activation: DType,
        cache: DType,
        k: usize,
        v: usize,
        meta: Option<(usize, usize)>,
    ) -> Result<(), KernelError> {
        if self.kv == KvFormat::Activation && cache != activation && cache != DType::UInt(8) {
            return Err(bad(
                "k_cache",
                format!(
                    "a cache of the activation type holds {activation} (or its bytes), not {cache}"
                ),
            ));
        }
        want("k_cache", k, self.cache_bytes(activation), "bytes")?;
        want("v_cache", v, self.cache_bytes(activation), "bytes")?;
        match (self.kv, meta) {
            (KvFormat::Quantized(_), Some((km, vm))) => {
                want("k_meta", km, self.meta_len(), "elements")?;
                want("v_meta", vm, self.meta_len(), "elements")
            }
            (KvFormat::Quantized(t), None) => Err(bad(
                "meta",
                format!("a {t} cache needs its scales and zero points (k_meta, v_meta)"),
            )),
            (KvFormat::Activation, Some(_)) => Err(bad(
                "meta",
                "a cache of the activation type has no scales (pass None)",
            )),
            (KvFormat::Activation, None) => Ok(()),
        }
    }

    /// Check the shape, naming the argument at fault.
    pub fn validate(&self) -> Result<(), KernelError> {
        if self.batch == 0 {
            return Err(bad("batch", "must be at least 1"));
        }
        if self.kv_heads == 0 {
            return Err(bad("kv_heads", "must be at least 1"));
        }
        if self.q_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(bad(
                "q_heads",
                format!(
                    "{} is not a positive multiple of kv_heads = {}",
                    self.q_heads, self.kv_heads
                ),
            ));
        }
        if self.q_heads / self.kv_heads > 16 {
            return Err(bad(
                "q_heads",
                format!(
                    "{} query heads per KV head; at most 16 are supported",
                    self.q_heads / self.kv_heads
                ),
            ));
        }
        if self.head_dim != 64 && self.head_dim != 128 {
            return Err(bad(
                "head_dim",
                format!("{} is not supported (64 or 128)", self.head_dim),
            ));
        }
        match self.cache {
            CacheLayout::Contiguous { max_len: 0 } => {
                return Err(bad("max_len", "must be at least 1"))
            }
            CacheLayout::Paged {
                pages,
                page_size,
                max_pages,
            } => {
                if ![16, 32, 64].contains(&page_size) {
                    return Err(bad(
                        "page_size",
                        format!("{page_size} is not supported (16, 32 or 64)"),
                    ));
                }
                if pages == 0 || max_pages == 0 {
                    return Err(bad("pages", "the cache and the block table need a page"));
                }
            }
            _ => {}
        }
        if let KvFormat::Quantized(t) = self.kv {
            let whole = (self.head_dim * t.bits() as usize).is_multiple_of(8);
            if t.bits() > 8 || matches!(t, DType::F16 | DType::BF16 | DType::F32) || !whole {
                return Err(bad(
                    "kv",
                    format!(
                        "{t} is not a cache code type (an integer or float of 8 bits or fewer)"
                    ),
                ));
            }
        }
        // Extents are i32; cache rows are addressed with 64-bit offsets, so the cache itself
        // may pass 2^31 elements.
        as_i32("batch", self.batch * self.q_heads * self.head_dim)?;
        as_i32("cache", self.cache_rows() * self.kv_heads)?;
        as_i32("capacity", self.capacity())?;
        Ok(())
    }
}

/// The configurations of one decode shape.
#[derive(Clone, Debug)]
pub struct DecodePlan {
    pub main: attention_decode::Config,
    /// With more than one split: the combine step.
    pub combine: Option<attention_combine::Config>,
    pub splits: usize,
}

/// Choose the split count: `waves` waves of resident blocks over all (sequence, KV head)
/// pairs (a partial last wave leaves multiprocessors idle), but no split shorter than
/// [`MIN_SPLIT_TOKENS`].
pub fn choose_splits(
    shape: &DecodeShape,
    tuning: &DecodeTuning,
    max_seq_len: usize,
    multiprocessors: usize,
) -> usize {
    let blocks = shape.batch * shape.kv_heads;
    let resident = multiprocessors * tuning.blocks_per_sm.max(1) * tuning.waves.max(1);
    let target = (resident / blocks.max(1)).max(1);
    let longest = max_seq_len.div_ceil(MIN_SPLIT_TOKENS).max(1);
    target.clamp(1, longest).min(1024)
}

/// The plan for `shape` with `splits` splits of each sequence.
pub fn plan(
    shape: &DecodeShape,
    tuning: &DecodeTuning,
    dtype: DType,
    splits: usize,
) -> Result<DecodePlan, KernelError> {
    shape.validate()?;
    tuning.validate(shape)?;
    check_activation(dtype)?;
    if splits == 0 {
        return Err(bad("splits", "must be at least 1"));
    }
    as_i32(
        "splits",
        splits * shape.batch * shape.q_heads * shape.head_dim,
    )?;
    let tile = tuning.tile as i32;
    let (paged, page) = match shape.cache {
        CacheLayout::Contiguous { .. } => (0, tile),
        CacheLayout::Paged { page_size, .. } => (1, page_size as i32),
    };
    let d = shape.head_dim as i32;
    let main = attention_decode::Config {
        D: d,
        // A tile never straddles a page.
        BT: tile.min(page),
        NW: tuning.warps as i32,
        STAGES: tuning.stages as i32,
        OCC: tuning.blocks_per_sm as i32,
        PAGED: paged,
        P: page,
        PART: i32::from(splits > 1),
        QUANT: i32::from(shape.kv != KvFormat::Activation),
        A: dtype,
        KV: match shape.kv {
            KvFormat::Activation => DType::Int(8),
            KvFormat::Quantized(t) => t,
        },
    };
    let combine = (splits > 1).then_some(attention_combine::Config { D: d, A: dtype });
    Ok(DecodePlan {
        main,
        combine,
        splits,
    })
}

/// Decode attention for one shape: `out[b, i] = softmax(scale · q[b, i] · Kᵀ) · V` over the
/// tokens `0..seq_lens[b]` of sequence `b` (the last `window` of them with a window), query
/// head `i` reading KV head `i / (q_heads / kv_heads)`.
pub struct DecodeAttention {
    shape: DecodeShape,
    scale: f32,
    window: usize,
    max_seq_len: usize,
    tuning: DecodeTuning,
    /// Per multiprocessor count: the GPU plan.
    plans: Mutex<Option<(usize, DecodePlan)>>,
    /// The split-KV partial outputs and statistics, kept between runs.
    workspace: Mutex<Workspace>,
}

impl DecodeAttention {
    /// `scale` multiplies the scores (usually `1 / sqrt(head_dim)`); `window` keeps only the
    /// last `window` tokens of each sequence (sliding-window attention); `max_seq_len` is the
    /// longest sequence expected, used only to divide the work (any length up to the cache's
    /// capacity is computed correctly).
    pub fn new(
        shape: DecodeShape,
        scale: f32,
        window: Option<usize>,
        max_seq_len: usize,
    ) -> Result<DecodeAttention, KernelError> {
        shape.validate()?;
        if !scale.is_finite() {
            return Err(bad("scale", format!("{scale} is not finite")));
        }
        let window = match window {
            Some(0) => return Err(bad("window", "must be at least 1 token")),
            Some(w) => as_i32("window", w)? as usize,
            None => 0,
        };
        Ok(DecodeAttention {
            tuning: DecodeTuning::default_for(&shape),
            shape,
            scale,
            window,
            max_seq_len: max_seq_len.clamp(1, i32::MAX as usize),
            plans: Mutex::new(None),
            workspace: Mutex::new(Workspace::default()),
        })
    }

    pub fn shape(&self) -> &DecodeShape {
        &self.shape
    }

    /// Use `tuning` instead of [`DecodeTuning::default_for`] (checked here).
    pub fn with_tuning(mut self, tuning: DecodeTuning) -> Result<DecodeAttention, KernelError> {
        tuning.validate(&self.shape)?;
        self.tuning = tuning;
        self.plans = Mutex::new(None);
        Ok(self)
    }

    pub fn tuning(&self) -> &DecodeTuning {
        &self.tuning
    }

    /// The plan used on a GPU with `multiprocessors` multiprocessors.
    pub fn plan_for<T: Activation>(
        &self,
        multiprocessors: usize,
    ) -> Result<DecodePlan, KernelError> {
        let mut cached = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((sms, p)) = cached.as_ref() {
            if *sms == multiprocessors && p.main.A == T::DTYPE {
                return Ok(p.clone());
            }
        }
        let splits = choose_splits(&self.shape, &self.tuning, self.max_seq_len, multiprocessors);
        let p = plan(&self.shape, &self.tuning, T::DTYPE, splits)?;
        *cached = Some((multiprocessors, p.clone()));
        Ok(p)
    }

    /// Check every buffer of a run against the shape, naming the one at fault. `k` and `v`
    /// are in bytes; `activation` is the activation type, `cache` the cache's element type.
    #[allow(clippy::too_many_arguments)]
    fn check_lengths(
        &self,
        activation: DType,
        cache: DType,
        q: usize,
        k: usize,
        v: usize,
        meta: Option<(usize, usize)>,
        table: Option<usize>,
        lens: usize,
        out: usize,
    ) -> Result<(), KernelError> {
        let s = &self.shape;
        want("q", q, s.q_len(), "elements")?;
        s.check_cache(activation, cache, k, v, meta)?;
        want("seq_lens", lens, s.batch, "elements")?;
        want("out", out, s.q_len(), "elements")?;
        match (s.cache, table) {
            (CacheLayout::Paged { max_pages, .. }, Some(t)) => {
                want("block_table", t, s.batch * max_pages, "elements")
            }
            (CacheLayout::Paged { .. }, None) => {
                Err(bad("block_table", "a paged cache needs a block table"))
            }
            (CacheLayout::Contiguous { .. }, Some(_)) => Err(bad(
                "block_table",
                "a contiguous cache has no block table (pass None)",
            )),
            (CacheLayout::Contiguous { .. }, None) => Ok(()),
        }
    }

    /// The scalar arguments of the main kernel (the combine step takes the first four).
    fn scalars(&self, splits: usize) -> Scalars {
        let s = &self.shape;
        let stride = match s.cache {
            CacheLayout::Contiguous { max_len } => max_len,
            CacheLayout::Paged { max_pages, .. } => max_pages,
        };
        Scalars {
            batch: s.batch as i32,
            kv_heads: s.kv_heads as i32,
            group: (s.q_heads / s.kv_heads) as i32,
            splits: splits as i32,
            rows: s.cache_rows() as i32,
            stride: stride as i32,
            scale_log2: self.scale * std::f32::consts::LOG2_E,
            window: self.window as i32,
        }
    }

    /// Run on `ctx`'s stream. `q` and `out` are `[batch, q_heads, head_dim]`; `cache` as
    /// [`CacheLayout`] and [`KvFormat`] say, with `seq_lens` `[batch]` (each at most the cache's
    /// capacity; a length of 0 gives zeros). Lengths are checked before anything is launched;
    /// page indices and sequence lengths on the device are only ever used to read inside the
    /// cache (a bad one reads zeros, never out of bounds). Returns when the work is queued.
    ///
    /// Every operand may be a view of memory another library owns (candle's tensors,
    /// [`tilus_runtime::DeviceView::from_cuda`]).
    pub fn run<T, C, KB, MB, IB>(
        &self,
        ctx: &Context,
        q: &impl DeviceRead<T>,
        cache: &KvCache<'_, KB, MB, IB>,
        out: &mut impl DeviceWrite<T>,
    ) -> Result<(), KernelError>
    where
        T: Activation,
        C: HostElement,
        KB: DeviceRead<C>,
        MB: DeviceRead<f32>,
        IB: DeviceRead<i32>,
    {
        self.check_lengths(
            T::DTYPE,
            C::DTYPE,
            DeviceRead::elements(q),
            cache.k.size_bytes(),
            cache.v.size_bytes(),
            cache.meta.map(|(k, v)| (k.elements(), v.elements())),
            cache.block_table.map(|t| t.elements()),
            cache.seq_lens.elements(),
            DeviceWrite::elements(out),
        )?;
        let sms = ctx.device().multiprocessors as usize;
        let plan = self.plan_for::<T>(sms)?;
        let s = &self.shape;
        let parts = plan.splits * s.batch * s.q_heads;
        let mut ws = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
        let ws = &mut *ws;
        let part_o = DeviceBuffer::grow_zeroed(&mut ws.part_o, ctx, (parts * s.head_dim).max(1))?;
        let part_ml = DeviceBuffer::grow_zeroed(&mut ws.part_ml, ctx, (parts * 2).max(1))?;
        let unused = DeviceBuffer::grow_zeroed(&mut ws.unused, ctx, 1)?;
        let main =
            attention_decode::instance(&plan.main)?.kernel(attention_decode::NAME, &plan.main)?;
        let sc = self.scalars(plan.splits);
        let mut args = vec![
            GpuArg::I32(sc.batch),
            GpuArg::I32(sc.kv_heads),
            GpuArg::I32(sc.group),
            GpuArg::I32(sc.splits),
            GpuArg::I32(sc.rows),
            GpuArg::I32(sc.stride),
            GpuArg::F32(sc.scale_log2),
            GpuArg::I32(sc.window),
        ];
        // Parameters a configuration does not use get a buffer of the right type, unread.
        let (k_meta, v_meta): (&dyn KernelArg, &dyn KernelArg) = match cache.meta {
            Some((k, v)) => (k, v),
            None => (&*unused, &*unused),
        };
        let table: &dyn KernelArg = match cache.block_table {
            Some(t) => t,
            None => cache.seq_lens,
        };
        args.extend([
            GpuArg::InBytes(q),
            GpuArg::InBytes(cache.k),
            GpuArg::InBytes(cache.v),
            GpuArg::In(k_meta),
            GpuArg::In(v_meta),
            GpuArg::In(table),
            GpuArg::In(cache.seq_lens),
        ]);
        if plan.combine.is_none() {
            let (po, pm): (&mut dyn KernelArgMut, &mut dyn KernelArgMut) = (part_o, part_ml);
            args.extend([GpuArg::OutBytes(out), GpuArg::Out(po), GpuArg::Out(pm)]);
            return main
                .launch(ctx, args)
                .map_err(|e| KernelError::launch(attention_decode::NAME, &plan.main, e));
        }
        // With splits the main kernel writes the partials, and the combine step `out`.
        args.extend([
            GpuArg::OutBytes(&mut *out),
            GpuArg::Out(&mut *part_o),
            GpuArg::Out(&mut *part_ml),
        ]);
        main.launch(ctx, args)
            .map_err(|e| KernelError::launch(attention_decode::NAME, &plan.main, e))?;
        let combine_cfg = plan.combine.as_ref().expect("checked above");
        let combine = attention_combine::instance(combine_cfg)?
            .kernel(attention_combine::NAME, combine_cfg)?;
        let args = vec![
            GpuArg::I32(sc.batch),
            GpuArg::I32(sc.kv_heads),
            GpuArg::I32(sc.group),
            GpuArg::I32(sc.splits),
            GpuArg::In(&*part_o),
            GpuArg::In(&*part_ml),
            GpuArg::OutBytes(out),
        ];
        combine
            .launch(ctx, args)
            .map_err(|e| KernelError::launch(attention_combine::NAME, combine_cfg, e))
    }

    /// [`run`](Self::run) on the CPU interpreter, with `splits` splits (the GPU picks its own
    /// from the multiprocessor count; any split count computes the same attention).
    pub fn run_cpu<T: Activation, C: HostElement>(
        &self,
        splits: usize,
        q: &[T],
        cache: &KvCache<'_, [C], [f32], [i32]>,
        out: &mut [T],
    ) -> Result<(), KernelError> {
        self.check_lengths(
            T::DTYPE,
            C::DTYPE,
            q.len(),
            std::mem::size_of_val(cache.k),
            std::mem::size_of_val(cache.v),
            cache.meta.map(|(k, v)| (k.len(), v.len())),
            cache.block_table.map(|t| t.len()),
            cache.seq_lens.len(),
            out.len(),
        )?;
        let plan = plan(&self.shape, &self.tuning, T::DTYPE, splits)?;
        let s = &self.shape;
        let sc = self.scalars(splits);
        let parts = splits * s.batch * s.q_heads;
        let mut part_o = vec![f32::NAN; (parts * s.head_dim).max(1)];
        let mut part_ml = vec![f32::NAN; (parts * 2).max(1)];
        let (qb, kb, vb) = (T::to_bytes(q), C::to_bytes(cache.k), C::to_bytes(cache.v));
        let mut ob = T::to_bytes(out);
        let none = [0.0f32];
        let (k_meta, v_meta) = cache.meta.unwrap_or((&none, &none));
        let table = cache.block_table.unwrap_or(cache.seq_lens);
        attention_decode::interpret(
            &plan.main,
            sc.batch,
            sc.kv_heads,
            sc.group,
            sc.splits,
            sc.rows,
            sc.stride,
            sc.scale_log2,
            sc.window,
            &qb,
            &kb,
            &vb,
            k_meta,
            v_meta,
            table,
            cache.seq_lens,
            &mut ob,
            &mut part_o,
            &mut part_ml,
        )?;
        if let Some(cfg) = &plan.combine {
            let (b, h, g, n) = (sc.batch, sc.kv_heads, sc.group, sc.splits);
            attention_combine::interpret(cfg, b, h, g, n, &part_o, &part_ml, &mut ob)?;
        }
        T::copy_from_bytes(&ob, out);
        Ok(())
    }
}

/// The KV cache of a run: device buffers or views for [`DecodeAttention::run`], host slices for
/// [`DecodeAttention::run_cpu`]. With `meta: None` the type `M` is not inferred: write
/// `KvCache<'_, _, DeviceBuffer<f32>, _>` (any [`DeviceRead<f32>`] type will do).
pub struct KvCache<'a, K: ?Sized, M: ?Sized, I: ?Sized> {
    /// Keys: `[rows, kv_heads, head_dim]` of the activation type, or packed codes (bytes).
    pub k: &'a K,
    /// Values, like `k`.
    pub v: &'a K,
    /// With a quantized cache: `k_meta`, `v_meta`, `(scale, zero)` f32 `[kv_heads, rows, 2]`.
    pub meta: Option<(&'a M, &'a M)>,
    /// With a paged cache: `[batch, max_pages]` page indices.
    pub block_table: Option<&'a I>,
    /// `[batch]` tokens per sequence.
    pub seq_lens: &'a I,
}

/// The device buffers a [`DecodeAttention`] keeps between runs, each made by the first run
/// that needs it and grown by one that needs more ([`DeviceBuffer::grow_zeroed`]).
#[derive(Default)]
struct Workspace {
    /// Split-KV partial outputs `[batch · q_heads · splits, head_dim]` (padded per KV head).
    part_o: Option<DeviceBuffer<f32>>,
    /// Their `(m, l)` statistics.
    part_ml: Option<DeviceBuffer<f32>>,
    /// One element, passed for parameters a configuration does not read.
    unused: Option<DeviceBuffer<f32>>,
}

/// The scalar arguments of the main kernel, shared by the GPU and CPU paths.
struct Scalars {
    batch: i32,
    kv_heads: i32,
    group: i32,
    splits: i32,
    rows: i32,
    stride: i32,
    scale_log2: f32,
    window: i32,
}

/// The attention of one decode step in f64, for tests: `q` `[batch, q_heads, d]`, the caches
/// and block table as [`CacheLayout`] says, all as f64.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    shape: &DecodeShape,
    scale: f64,
    window: Option<usize>,
    q: &[f64],
    k_cache: &[f64],
    v_cache: &[f64],
    block_table: Option<&[i32]>,
    seq_lens: &[i32],
) -> Vec<f64> {
    let s = shape;
    let (d, g) = (s.head_dim, s.q_heads / s.kv_heads);
    let mut out = vec![0.0; s.q_len()];
    for b in 0..s.batch {
        let len = seq_lens[b].max(0) as usize;
        let first = window.map_or(0, |w| len.saturating_sub(w));
        let row = |t: usize| match s.cache {
            CacheLayout::Contiguous { max_len } => b * max_len + t,
            CacheLayout::Paged {
                page_size,
                max_pages,
                ..
            } => {
                let page = block_table.expect("paged")[b * max_pages + t / page_size] as usize;
                page * page_size + t % page_size
            }
        };
        for qh in 0..s.q_heads {
            let h = qh / g;
            let qv = &q[(b * s.q_heads + qh) * d..][..d];
            let at = |t: usize| (row(t) * s.kv_heads + h) * d;
            let scores: Vec<f64> = (first..len)
                .map(|t| scale * (0..d).map(|i| qv[i] * k_cache[at(t) + i]).sum::<f64>())
                .collect();
            if scores.is_empty() {
                continue;
            }
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let total: f64 = w.iter().sum();
            let o = &mut out[(b * s.q_heads + qh) * d..][..d];
            for (j, t) in (first..len).enumerate() {
                for i in 0..d {
                    o[i] += w[j] / total * v_cache[at(t) + i];
                }
            }
        }
    }
    out
}
