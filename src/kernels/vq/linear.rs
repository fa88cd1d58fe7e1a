//! [`VqLinear`]: a linear layer `y[m, n] = x[m, k] · W[n, k]ᵀ` over a vector-quantized weight
//! ([`VqWeight`]), run by [`vq_gemv`] (with the codebook cache) or the naive [`vq_gemv_gc`];
//! on the CPU interpreter ([`VqLinear::forward_cpu`]) or on the GPU ([`GpuVqLinear`]).
//!
//! ```no_run
//! use half::f16;
//! use tilus::kernels::vq::VqLinear;
//! use tilus::vq::{kmeans::KmeansOptions, VqConfig, VqWeight};
//! let (n, k) = (256, 512);
//! let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
//! let q = VqWeight::quantize(&w, n, k, VqConfig::GPTVQ_2, KmeansOptions::default())?;
//! let layer = VqLinear::new(q)?;
//! let x = vec![f16::from_f32(0.5); 3 * k];
//! let y = layer.forward_cpu(&x, 3)?; // 3 x 256 f16, on the interpreter
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::kernel::{vq_finalize, vq_gemv, vq_gemv_gc};
use crate::vq::{arg_err, VqConfig, VqError, VqWeight};
use half::f16;
use std::sync::{Arc, Mutex};
use tilus_runtime::{Context, DeviceBuffer};

/// Output channels per block.
pub const BN: usize = 32;
/// k per step of the GC kernel (and the smallest of the cached one).
pub const BK: usize = 64;
/// Shared memory the cache's shared tier may take by default.
pub const CACHE_SHARED_BYTES: usize = 64 * 1024;

/// The codebook cache's tiers: entries `[0, n_reg)` in registers, `[n_reg, n_reg + n_shared)`
/// in shared memory, the rest in global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VqCache {
    pub n_reg: usize,
    pub n_shared: usize,
}

/// The default cache of a format for `k` input channels: no register tier (each register
/// entry costs `V / 2` selects per pair of elements), as many entries in shared memory as
/// [`CACHE_SHARED_BYTES`] holds (over the buffers [`kernel_config`] uses).
pub fn default_cache(c: VqConfig, k: usize) -> VqCache {
    let bufs = codebook_buffers(c, k, STAGES);
    VqCache {
        n_reg: 0,
        n_shared: c
            .entries()
            .min(CACHE_SHARED_BYTES / (bufs * 2 * c.residuals * c.vector_size)),
    }
}

/// Stages of the cached kernel's cp.async ring of codes by default.
pub const STAGES: usize = 4;

/// k per step of the cached kernel: 128 where the codebook tiles allow, else 64.
fn step_k(c: VqConfig, k: usize) -> usize {
    let (_, cols) = c.tile(BN, k);
    if cols.is_multiple_of(128) {
        128
    } else {
        BK
    }
}

/// Shared buffers of the cache's shared tier for a ring of `stages`: one for a codebook that
/// spans k, else enough that a buffer is refilled only after its tile is done:
/// `(buffers - 1) · steps per tile >= stages - 1`.
fn codebook_buffers(c: VqConfig, k: usize, stages: usize) -> usize {
    let (_, cols) = c.tile(BN, k);
    if cols == k {
        1
    } else {
        1 + (stages - 1).div_ceil(cols / step_k(c, k)).max(1)
    }
}

/// Blocks the split-k choice aims for: four per SM of a 132-SM H100.
pub const TARGET_BLOCKS: usize = 4 * 132;

/// The k split for `m` tokens of a `[n, k]` weight: 1 where `cdiv(m, 16) · n / BN` blocks
/// reach [`TARGET_BLOCKS`] or k has fewer than 64 steps, else the smallest power of two (up to
/// 8) that reaches it and divides the steps.
pub fn split_for(c: VqConfig, m: usize, n: usize, k: usize) -> usize {
    let blocks = m.div_ceil(16) * (n / BN);
    let steps = k / step_k(c, k);
    if blocks >= TARGET_BLOCKS || steps < 64 {
        return 1;
    }
    let mut s = 1;
    while s < 8 && blocks * s < TARGET_BLOCKS && steps.is_multiple_of(2 * s) {
        s *= 2;
    }
    s
}

/// [`vq_gemv`]'s configuration for a format, a cache, `k`, a ring of `stages` (2..=8) and a
/// k split (dividing `k / BK`).
pub fn kernel_config(
    c: VqConfig,
    cache: VqCache,
    k: usize,
    stages: usize,
    split: usize,
) -> vq_gemv::Config {
    vq_gemv::Config {
        BN: BN as i32,
        WN: 4,
        BK: step_k(c, k) as i32,
        SPLIT: split as i32,
        STAGES: stages as i32,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        CB: if c.log2_entries <= 8 { 1 } else { 2 },
        NR: cache.n_reg as i32,
        NS: cache.n_shared as i32,
        CBUF: codebook_buffers(c, k, stages) as i32,
        SCALE: c.channel_scale as i32,
    }
}

/// [`vq_gemv_gc`]'s configuration for a format.
pub fn gc_config(c: VqConfig) -> vq_gemv_gc::Config {
    vq_gemv_gc::Config {
        BN: BN as i32,
        WN: 4,
        BK: BK as i32,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        CB: if c.log2_entries <= 8 { 1 } else { 2 },
        SCALE: c.channel_scale as i32,
    }
}

/// A VQ linear layer; see the module documentation.
#[derive(Clone, Debug)]
pub struct VqLinear {
    weight: VqWeight,
    /// The codes as the kernels read them: u8, or u16 little-endian above 8 bits.
    code_bytes: Vec<u8>,
    codebooks: Vec<f16>,
    /// `[n]`, or one unused value when the format has no scales.
    scales: Vec<f16>,
    cache: VqCache,
    /// Stages of the cached kernel's ring of codes.
    stages: usize,
    /// The k split, or `None` for [`split_for`]'s choice per `m`.
    split: Option<usize>,
}

fn kernel_err(e: impl std::fmt::Display) -> VqError {
    VqError::Arg {
        arg: "kernel",
        msg: e.to_string(),
    }
}

impl VqLinear {
    /// The layer for `weight` with the default cache: no register tier, as many entries in
    /// shared memory as [`CACHE_SHARED_BYTES`] holds. The kernels need `k` a multiple of 64
    /// with codebook tiles of a multiple of 64 columns, `n` a multiple of 32 with tiles of a
    /// multiple of 32 rows, and `vector_size` a divisor of 64 (CQ's per-channel-group
    /// codebooks, for the KV cache, are refused).
    pub fn new(weight: VqWeight) -> Result<VqLinear, VqError> {
        let c = weight.config;
        let (n, k, v) = (weight.n, weight.k, c.vector_size);
        let (rows, cols) = c.tile(n, k);
        if !n.is_multiple_of(BN) || !rows.is_multiple_of(BN) {
            return Err(arg_err(
                "weight",
                format!("n = {n} and the codebook tile's {rows} rows must be multiples of {BN}"),
            ));
        }
        if !k.is_multiple_of(BK) || !cols.is_multiple_of(BK) || !BK.is_multiple_of(v) || v % 2 != 0
        {
            return Err(arg_err(
                "weight",
                format!(
                    "k = {k} and the codebook tile's {cols} columns must be multiples of {BK}, \
                     and vector_size {v} must be even and divide {BK}"
                ),
            ));
        }
        if i32::try_from(weight.codebooks.len()).is_err()
            || i32::try_from(weight.codes.len()).is_err()
            || i32::try_from(n * k).is_err()
        {
            return Err(arg_err(
                "weight",
                "the codes, codebooks or n·k do not fit i32 indices",
            ));
        }
        let code_bytes = if c.log2_entries <= 8 {
            weight.codes.iter().map(|&c| c as u8).collect()
        } else {
            weight.codes.iter().flat_map(|c| c.to_le_bytes()).collect()
        };
        let codebooks = weight.codebooks.iter().map(|&x| f16::from_f32(x)).collect();
        let scales = match &weight.scales {
            Some(s) => s.iter().map(|&x| f16::from_f32(x)).collect(),
            None => vec![f16::ONE],
        };
        let cache = default_cache(c, k);
        Ok(VqLinear {
            weight,
            code_bytes,
            codebooks,
            scales,
            cache,
            stages: STAGES,
            split: None,
        })
    }

    pub fn weight(&self) -> &VqWeight {
        &self.weight
    }
    pub fn n(&self) -> usize {
        self.weight.n
    }
    pub fn k(&self) -> usize {
        self.weight.k
    }
    pub fn cache(&self) -> VqCache {
        self.cache
    }
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// Sets the stages of the cached kernel's cp.async ring of codes (2..=8; the shared
    /// tier's buffers follow, so check the cache again with [`Self::with_cache`] after).
    pub fn with_stages(mut self, stages: usize) -> Result<VqLinear, VqError> {
        if !(2..=8).contains(&stages) {
            return Err(arg_err("stages", format!("{stages}: must lie in 2..=8")));
        }
        self.stages = stages;
        Ok(self)
    }

    /// Sets the cache tiers (`n_reg + n_shared <= entries`; `n_reg <= 8`, each register entry
    /// costs `V / 2` selects per pair of elements; the shared tier, `2 · residuals · V ·
    /// n_shared` bytes per buffer, at most 160 KiB).
    pub fn with_cache(mut self, cache: VqCache) -> Result<VqLinear, VqError> {
        let c = self.weight.config;
        let bufs = codebook_buffers(c, self.weight.k, self.stages);
        if cache.n_reg > 8
            || cache.n_reg + cache.n_shared > c.entries()
            || bufs * 2 * c.residuals * c.vector_size * cache.n_shared > 160 * 1024
        {
            return Err(arg_err(
                "cache",
                format!(
                    "{cache:?}: needs n_reg <= 8, n_reg + n_shared <= {} entries and the shared \
                     tier ({bufs} buffer(s) of 2·residuals·V·n_shared bytes) within 160 KiB",
                    c.entries()
                ),
            ));
        }
        self.cache = cache;
        Ok(self)
    }

    /// Sets the k split of the cached kernel (a power of two up to 8 dividing its k steps),
    /// instead of [`split_for`]'s choice per `m`.
    pub fn with_split(mut self, split: usize) -> Result<VqLinear, VqError> {
        let steps = self.weight.k / step_k(self.weight.config, self.weight.k);
        if !split.is_power_of_two() || split > 8 || !steps.is_multiple_of(split) {
            return Err(arg_err(
                "split",
                format!("{split}: must be a power of two up to 8 dividing the {steps} k steps"),
            ));
        }
        self.split = Some(split);
        Ok(self)
    }

    /// The cached kernel's configuration for `m` tokens.
    pub fn config(&self, m: usize) -> vq_gemv::Config {
        let w = &self.weight;
        let split = self
            .split
            .unwrap_or_else(|| split_for(w.config, m, w.n, w.k));
        kernel_config(w.config, self.cache, w.k, self.stages, split)
    }

    /// The naive kernel's configuration.
    pub fn gc_config(&self) -> vq_gemv_gc::Config {
        gc_config(self.weight.config)
    }

    fn dims(&self) -> (i32, i32, i32, i32, i32) {
        let w = &self.weight;
        let (rows, cols) = w.config.tile(w.n, w.k);
        (
            w.n as i32,
            w.k as i32,
            w.config.entries() as i32,
            rows as i32,
            cols as i32,
        )
    }

    fn check_x(&self, len: usize, m: usize) -> Result<i32, VqError> {
        if m == 0 || m > 1 << 20 {
            return Err(arg_err("m", format!("{m}: must lie in 1..=2^20")));
        }
        if len != m * self.k() {
            return Err(arg_err(
                "x",
                format!("{len} values, expected m·k = {}", m * self.k()),
            ));
        }
        Ok(m as i32)
    }

    /// `y[m, n]` for `x[m, k]` (row-major f16) on the CPU interpreter, through [`vq_gemv`]
    /// (and [`vq_finalize`] when k is split).
    pub fn forward_cpu(&self, x: &[f16], m: usize) -> Result<Vec<f16>, VqError> {
        let mi = self.check_x(x.len(), m)?;
        let (n, k, e, tr, tc) = self.dims();
        let mut y = vec![f16::NAN; m * self.n()];
        let cfg = self.config(m);
        let mut part = vec![0f32; if cfg.SPLIT > 1 { m * self.n() } else { 1 }];
        vq_gemv::interpret(
            &cfg,
            mi,
            n,
            k,
            e,
            tr,
            tc,
            x,
            &self.code_bytes,
            &self.codebooks,
            &self.scales,
            &mut y,
            &mut part,
        )
        .map_err(kernel_err)?;
        if cfg.SPLIT > 1 {
            vq_finalize::interpret(
                &vq_finalize::SPACE[0],
                (m * self.n()) as i32,
                &mut part,
                &mut y,
            )
            .map_err(kernel_err)?;
            debug_assert!(part.iter().all(|&v| v == 0.0));
        }
        Ok(y)
    }

    /// The same through the naive [`vq_gemv_gc`].
    pub fn forward_cpu_gc(&self, x: &[f16], m: usize) -> Result<Vec<f16>, VqError> {
        let mi = self.check_x(x.len(), m)?;
        let (n, k, e, tr, tc) = self.dims();
        let mut y = vec![f16::NAN; m * self.n()];
        vq_gemv_gc::interpret(
            &self.gc_config(),
            mi,
            n,
            k,
            e,
            tr,
            tc,
            x,
            &self.code_bytes,
            &self.codebooks,
            &self.scales,
            &mut y,
        )
        .map_err(kernel_err)?;
        Ok(y)
    }

    /// This layer on `ctx`'s GPU: uploads the codes, codebooks and scales.
    pub fn to_gpu(&self, ctx: &Arc<Context>) -> Result<GpuVqLinear, VqError> {
        Ok(GpuVqLinear {
            ctx: ctx.clone(),
            part: Mutex::new(None),
            codes: DeviceBuffer::from_host(ctx, &self.code_bytes).map_err(kernel_err)?,
            codebooks: DeviceBuffer::from_host(ctx, &self.codebooks).map_err(kernel_err)?,
            scales: DeviceBuffer::from_host(ctx, &self.scales).map_err(kernel_err)?,
            host: self.clone(),
        })
    }
}

/// [`VqLinear`] on a GPU.
pub struct GpuVqLinear {
    ctx: Arc<Context>,
    /// The split-k workspace, zero between launches, grown to the largest `m · n` seen.
    part: Mutex<Option<DeviceBuffer<f32>>>,
    codes: DeviceBuffer<u8>,
    codebooks: DeviceBuffer<f16>,
    scales: DeviceBuffer<f16>,
    host: VqLinear,
}

impl GpuVqLinear {
    pub fn host(&self) -> &VqLinear {
        &self.host
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// `y[m, n]` for `x[m, k]` on the device (f16), with the codebook cache.
    pub fn forward(&self, x: &DeviceBuffer<f16>, m: usize) -> Result<DeviceBuffer<f16>, VqError> {
        let mut y = DeviceBuffer::zeros(&self.ctx, m * self.host.n()).map_err(kernel_err)?;
        self.forward_into(x, m, &mut y, false)?;
        Ok(y)
    }

    /// `y = x · Wᵀ` into `y` (`[m, n]`): the cached kernel, or with `naive` the GC kernel.
    pub fn forward_into(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        naive: bool,
    ) -> Result<(), VqError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        if y.len() != m * h.n() {
            return Err(arg_err(
                "y",
                format!("{} values, expected m·n = {}", y.len(), m * h.n()),
            ));
        }
        let (n, k, e, tr, tc) = h.dims();
        if naive {
            vq_gemv_gc::launch(
                &self.ctx,
                &h.gc_config(),
                mi,
                n,
                k,
                e,
                tr,
                tc,
                x,
                &self.codes,
                &self.codebooks,
                &self.scales,
                y,
            )
            .map_err(kernel_err)
        } else {
            let cfg = h.config(m);
            let mut guard = self.part.lock().unwrap_or_else(|p| p.into_inner());
            let len = if cfg.SPLIT > 1 { m * h.n() } else { 1 };
            if guard.as_ref().is_none_or(|p| p.len() < len) {
                *guard = Some(DeviceBuffer::zeros(&self.ctx, len).map_err(kernel_err)?);
            }
            let part = guard.as_mut().expect("allocated above");
            vq_gemv::launch(
                &self.ctx,
                &cfg,
                mi,
                n,
                k,
                e,
                tr,
                tc,
                x,
                &self.codes,
                &self.codebooks,
                &self.scales,
                y,
                part,
            )
            .map_err(kernel_err)?;
            if cfg.SPLIT > 1 {
                vq_finalize::launch(
                    &self.ctx,
                    &vq_finalize::SPACE[0],
                    (m * h.n()) as i32,
                    part,
                    y,
                )
                .map_err(kernel_err)?;
            }
            Ok(())
        }
    }
}
