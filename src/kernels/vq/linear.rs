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

use super::gemm::{gemm_bm, gemm_config, gemm_refusal, gemm_stages, vq_gemm, GemmCodes};
use super::kernel::{vq_dequant, vq_finalize, vq_gemv, vq_gemv_gc};
use super::lut::{self, lut_applies, vq_lut_gemv, vq_lut_table, LutTiling};
use crate::kernels::REFERENCE_MULTIPROCESSORS;
use crate::vq::{arg_err, e8p, CodebookScope, VqConfig, VqError, VqWeight};
use half::f16;
use std::sync::{Arc, Mutex};
use tilus_core::interp::BlockOrder;
use tilus_runtime::{Context, Cublas, DeviceBuffer};

/// Output channels per block of the GC kernel and of [`vq_dequant`].
pub const BN: usize = 32;
/// k per step of the GC kernel, and the columns of a [`vq_dequant`] block.
pub const BK: usize = 64;
/// Shared memory the codebook buffers of [`vq_gemv`] may take.
pub const CODEBOOK_SHARED_BYTES: usize = 160 * 1024;

/// How [`vq_gemv`] keeps the codebook: every entry in shared memory, stored `replicas` times
/// (1, or 16 for 4-value vectors: conflict-free look-ups, module docs of `kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VqCache {
    pub replicas: usize,
}

/// Warps of [`vq_gemv`] by default. A single codebook (or E8P table) of 8-value vectors too
/// large for two blocks a multiprocessor (AQLM-3's 128 KiB, QuiP#-4's 96 KiB) leaves one block
/// there, which takes 16 warps to hide its latency, unless 8-warp blocks fill the waves of
/// [`REFERENCE_MULTIPROCESSORS`] multiprocessors by a tenth more (10240 x 8192: 160 blocks of
/// 16 warps make 61% of two waves, 320 of 8 warps 81% of three; H200, QuiP#-4 1.20x at one
/// token and 1.14x at 16, perf note 46). Everything else takes 8: two such blocks share a
/// multiprocessor (AQLM-2x8's 64 KiB: 1.01-1.33x over 16 warps at 16 tokens on the
/// Llama-70B layers). Then halved until `32 · warps` output channels divide the codebook
/// tile's rows and `n`.
pub fn warps_for(c: VqConfig, n: usize, k: usize) -> usize {
    let (rows, _) = c.tile(n, k);
    let fits = |w: usize| rows.is_multiple_of(32 * w) && n.is_multiple_of(32 * w);
    let alone = (rows, c.vector_size) == (n, 8)
        && 2 * codebook_bytes(c, default_cache(c), n, k) > CODEBOOK_SHARED_BYTES;
    let mut w = if alone && fits(16) && wave_fill(c, 8, n, k) < wave_fill(c, 16, n, k) + 0.1 {
        16
    } else {
        8
    };
    while w > 1 && !fits(w) {
        w /= 2;
    }
    w
}

/// The share of its last wave's slots that one token's launch of `warps`-warp blocks fills,
/// one block per multiprocessor of [`REFERENCE_MULTIPROCESSORS`], with [`split_for`]'s split.
fn wave_fill(c: VqConfig, warps: usize, n: usize, k: usize) -> f64 {
    let blocks = n / (32 * warps) * split_for(c, warps, 1, (n, k));
    let slots = blocks.div_ceil(REFERENCE_MULTIPROCESSORS).max(1) * REFERENCE_MULTIPROCESSORS;
    blocks as f64 / slots as f64
}

/// Whether `warps` (a power of two, 1..=16) suits a format's tiles: `32 · warps` output
/// channels divide the codebook tile's rows and `n`, and the codebook rows split evenly over
/// the threads.
pub(super) fn warps_ok(c: VqConfig, n: usize, k: usize, warps: usize) -> bool {
    let (rows, _) = c.tile(n, k);
    warps.is_power_of_two()
        && warps <= 16
        && rows.is_multiple_of(32 * warps)
        && n.is_multiple_of(32 * warps)
        && (c.residuals * book_entries(c)).is_multiple_of(32 * warps)
}

/// k per step of [`vq_gemv`]: 128 where the codebook tiles allow, else 64. E8P formats take 64:
/// at 128 the 16-token product holds two residual stages' 64-register weight fragments under
/// 16 warps' cap of 128 registers and spills in its main loop (ptxas for sm_90a: 8 bytes with
/// the atomic split, 28 with two token tiles); at 64 it uses 88.
fn step_k(c: VqConfig, n: usize, k: usize) -> usize {
    let (_, cols) = c.tile(n, k);
    if cols.is_multiple_of(128) && !c.e8p {
        128
    } else {
        64
    }
}

/// The default cache of a format: 16 copies where they are useful (4-value vectors) and fit
/// ([`CODEBOOK_SHARED_BYTES`] over two buffers); 8 of the E8P table and of one codebook of
/// 8-value vectors that fit half of it (`LDS.128` serves 8 lanes per cycle: 8 copies make the
/// look-ups conflict-free; 96 KiB for the E8P table, 64 KiB for AQLM-2x8's), else one.
pub fn default_cache(c: VqConfig) -> VqCache {
    let bytes = |rep: usize| c.residuals * c.entries() * rep * c.vector_size * 2;
    let one = matches!(c.scope, CodebookScope::Matrix);
    let replicas = if c.e8p || (c.vector_size == 8 && one && bytes(8) <= CODEBOOK_SHARED_BYTES / 2)
    {
        8
    } else if c.vector_size == 4 && 2 * bytes(16) <= CODEBOOK_SHARED_BYTES / 2 {
        16
    } else {
        1
    };
    VqCache { replicas }
}

/// Stages of [`vq_gemv`]'s cp.async ring of activations and codes by default.
pub const STAGES: usize = 3;

/// Blocks the split-k choice aims for: four per multiprocessor.
pub const TARGET_BLOCKS: usize = 4 * REFERENCE_MULTIPROCESSORS;

/// Whether the format has one codebook for the whole matrix: the host makes its copies
/// ([`kernel_codebooks`]) and each block takes them once by `cp.async`.
fn one_codebook(c: VqConfig, n: usize, k: usize) -> bool {
    c.tile(n, k) == (n, k)
}

/// The codebooks [`vq_gemv`] reads: per codebook tile the f16 rows of `weight`, `[stage,
/// entry]`; for one codebook ([`one_codebook`]) each row stored `replicas` times in a row, as
/// the kernel keeps it in shared memory (`[stage, entry, copy]`); for an E8P format the table
/// it decodes from.
fn kernel_codebooks(weight: &VqWeight, cache: VqCache) -> Vec<f16> {
    let c = weight.config;
    if c.e8p {
        return e8p::kernel_table(c.residuals, cache.replicas);
    }
    let copies = if one_codebook(c, weight.n, weight.k) {
        cache.replicas
    } else {
        1
    };
    weight
        .codebooks
        .chunks(c.vector_size)
        .flat_map(|row| std::iter::repeat_n(row, copies).flatten())
        .map(|&x| f16::from_f32(x))
        .collect()
}

/// The product [`vq_gemv`] runs for `m` tokens of format `c` (its `TR`): 0 for `y = x · Wᵀ` on
/// 16-token tiles, 1 or 2 for the transposed `yᵀ = W · xᵀ` (the weight as the mma's A) on 8 or
/// 16 tokens per block, 3 for the paired transposed product on 4 (vectors of 4). At m <= 8 the
/// transposed one does half the mma and activation loads (H100, GPTVQ-2 at 57344 x 8192, m =
/// 1: 88.6 against 103.7 us); on 16 tokens both take the same time (113.8 and 111.8 us at m =
/// 16), so 0 serves m > 8. Up to 4 tokens of a format with vectors of 4, the paired product
/// lands each look-up in the mma's registers without moves, by one `PRMT` (H100, session 63,
/// GPTVQ-2: 57344 x 8192 72.6-73.0 against 81.6-82.9 us at m = 1, 74.2 against 82.4 at m = 4;
/// 1.07-1.13x on every Llama-70B layer).
pub fn product_for(c: VqConfig, m: usize) -> usize {
    if m <= 4 && c.vector_size == 4 && !c.e8p {
        3
    } else if m <= 8 {
        1
    } else {
        0
    }
}

/// Tokens per block of product `p`.
fn product_rows(p: usize) -> usize {
    match p {
        0 => 16,
        3 => 4,
        _ => 8 * p,
    }
}

/// The k split for `m` tokens: 1 where `cdiv(m, 8 or 16) · n / (32 · warps)` blocks reach
/// [`TARGET_BLOCKS`], else the smallest power of two (up to 8) that reaches it and leaves each
/// block whole codebook tiles (or any part of a single codebook).
pub fn split_for(c: VqConfig, warps: usize, m: usize, (n, k): (usize, usize)) -> usize {
    let blocks = m.div_ceil(product_rows(product_for(c, m))) * (n / (32 * warps));
    let mut s = 1;
    while s < 8 && blocks * s < TARGET_BLOCKS && split_ok(c, n, k, 2 * s) {
        s *= 2;
    }
    s
}

/// Whether [`vq_gemv`] can split k in `split` slices.
pub(super) fn split_ok(c: VqConfig, n: usize, k: usize, split: usize) -> bool {
    let steps = k / step_k(c, n, k);
    let (_, cols) = c.tile(n, k);
    let tile_steps = cols / step_k(c, n, k);
    steps.is_multiple_of(split)
        && (one_codebook(c, n, k) || (steps / split).is_multiple_of(tile_steps))
}

/// Elements of [`vq_gemv`]'s split-k buffers for a launch (one-element placeholders where the
/// launch does not view them). The two ways of adding the partials keep separate buffers,
/// because their invariants differ: `ORDERED = 1` stores `[SPLIT, m, n]` partials (left as they
/// are) and counts on the semaphores (left zero); `ORDERED = 0` adds into an `[m, n]` sum that
/// must be zero before the launch ([`vq_finalize`] zeroes it again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SplitLens {
    partials: usize,
    sum: usize,
    semaphores: usize,
}

impl SplitLens {
    /// What a launch of `cfg` for `m` tokens of an `n`-column layer needs.
    fn of(cfg: &vq_gemv::Config, m: usize, n: usize) -> SplitLens {
        let mut lens = SplitLens {
            partials: 1,
            sum: 1,
            semaphores: 1,
        };
        if cfg.SPLIT > 1 && cfg.ORDERED == 1 {
            let tiles_m = m.div_ceil(product_rows(cfg.TR as usize));
            let tiles_n = n / (32 * cfg.WN as usize);
            lens.partials = cfg.SPLIT as usize * m * n;
            lens.semaphores = tiles_m * tiles_n;
        } else if cfg.SPLIT > 1 {
            lens.sum = m * n;
        }
        lens
    }

    fn max(self, o: SplitLens) -> SplitLens {
        SplitLens {
            partials: self.partials.max(o.partials),
            sum: self.sum.max(o.sum),
            semaphores: self.semaphores.max(o.semaphores),
        }
    }
}

/// How a split k adds its partial sums for `m` tokens: in split order in one launch
/// ([`vq_gemv`]'s `ORDERED = 1`: the same bits in every run), or by atomics and a second launch,
/// [`vq_finalize`] (`ORDERED = 0`). Measured on an H200 (GPTVQ-2, `tilus bench vq --reduce`,
/// docs/perf-notes.md entry 26): at m = 1 the single launch wins (8192 x 8192: 18.3 against
/// 19.5 us, 8192 x 28672: 46.3 against 47.9); at m = 16 each block's wait on the semaphore costs
/// more than the launch (24.2 against 27.4 us, 57.8 against 66.2, 110.5 against 114.8 at
/// 57344 x 8192).
pub fn ordered_for(m: usize) -> bool {
    m <= 8
}

/// [`vq_gemv`]'s configuration for a format, a cache, `warps`, the shape, a ring of `stages`
/// (2..=8), a k split and the product ([`product_for`]).
pub fn kernel_config(
    c: VqConfig,
    cache: VqCache,
    warps: usize,
    (n, k): (usize, usize),
    (stages, split): (usize, usize),
    product: usize,
    ordered: bool,
) -> vq_gemv::Config {
    vq_gemv::Config {
        WN: warps as i32,
        BK: step_k(c, n, k) as i32,
        SPLIT: split as i32,
        STAGES: stages as i32,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        E: book_entries(c) as i32,
        HB: high_bits(c) as i32,
        REP: cache.replicas as i32,
        ONE: one_codebook(c, n, k) as i32,
        SCALE: c.channel_scale as i32,
        TR: product as i32,
        ORDERED: ordered as i32,
        LAT: c.e8p as i32,
    }
}

/// Rows per stage of the codebook [`vq_gemv`] keeps in shared memory: every entry, or the 256
/// absolute vectors of an E8P format ([`crate::vq::e8p`]).
fn book_entries(c: VqConfig) -> usize {
    if c.e8p {
        256
    } else {
        c.entries()
    }
}

/// Bits of each code beyond its low byte, as [`vq_gemv`] stores them: 0, 4 (up to 12-bit
/// codes) or 8.
pub(super) fn high_bits(c: VqConfig) -> usize {
    match c.log2_entries {
        0..=8 => 0,
        9..=12 => 4,
        _ => 8,
    }
}

/// The codes as [`vq_gemv`] reads them (its module docs): for each block of `32 · warps`
/// channels, each k step of `bk` and each thread, the low bytes of its codes of every residual
/// stage in the order of the index layout `..local(bk / (4 V), 4).column_spatial(4, 8)`
/// (local `4 kr + f` is vector `4 kr + t` of channel `32 w + 8 f + g`, lane `t + 4 g` of warp
/// `w`), then their high nibbles or bytes.
pub fn relayout_codes(w: &VqWeight, warps: usize, bk: usize) -> Vec<u8> {
    let c = w.config;
    let (n, k, v, r) = (w.n, w.k, c.vector_size, c.residuals);
    let threads = 32 * warps;
    let runs = bk / (4 * v);
    let lo = runs * 4;
    let hb = high_bits(c);
    let hi = lo * hb / 8;
    let per_thread = r * (lo + hi);
    let (kv, steps) = (k / v, k / bk);
    let mut out = vec![0u8; n * k / v * r * (8 + hb) / 8];
    for bj in 0..n / threads {
        for kt in 0..steps {
            for thread in 0..threads {
                let base = ((bj * steps + kt) * threads + thread) * per_thread;
                let (warp, lane) = (thread / 32, thread % 32);
                let (t, g) = (lane % 4, lane / 4);
                for kr in 0..runs {
                    for f in 0..4 {
                        let l = kr * 4 + f;
                        let row = bj * threads + warp * 32 + f * 8 + g;
                        let vec = kt * (bk / v) + kr * 4 + t;
                        for s in 0..r {
                            let code = w.codes[(s * n + row) * kv + vec] as usize;
                            out[base + s * lo + l] = code as u8;
                            match hb {
                                4 => {
                                    out[base + r * lo + s * hi + l / 2] |=
                                        ((code >> 8) as u8 & 0xF) << (4 * (l % 2))
                                }
                                8 => out[base + r * lo + s * hi + l] = (code >> 8) as u8,
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Bytes of a code in its original order (`VqLinear`'s `code_bytes`, the `CB` of
/// [`vq_gemv_gc`] and [`vq_dequant`]): one up to 8 bits, else two (u16 little-endian).
fn original_code_bytes(c: VqConfig) -> usize {
    if c.log2_entries <= 8 {
        1
    } else {
        2
    }
}

/// [`vq_dequant`]'s configuration for a format (codes and codebooks as [`vq_gemv_gc`] reads
/// them).
pub fn dequant_config(c: VqConfig) -> vq_dequant::Config {
    vq_dequant::Config {
        BN: BN as i32,
        BK: BK as i32,
        WN: 4,
        V: c.vector_size as i32,
        R: c.residuals as i32,
        CB: original_code_bytes(c) as i32,
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
        CB: original_code_bytes(c) as i32,
        SCALE: c.channel_scale as i32,
    }
}

/// A VQ linear layer; see the module documentation.
#[derive(Clone, Debug)]
pub struct VqLinear {
    /// The weight and its codes in the kernels' layouts are shared (`Arc`) by the clones a knob
    /// or [`VqLinear::to_gpu`] makes (a 57344 x 8192 AQLM-3 layer's codes are 235 MB as u16,
    /// and it keeps three re-laid copies besides).
    weight: Arc<VqWeight>,
    /// The codes as [`vq_gemv`] reads them ([`relayout_codes`]).
    kernel_codes: Arc<Vec<u8>>,
    /// The codes in their original order for the GC kernel: u8, or u16 little-endian above 8
    /// bits.
    code_bytes: Arc<Vec<u8>>,
    /// What [`vq_gemv`] reads: the codebooks in f16, or for an E8P format the table it decodes
    /// them from ([`e8p::kernel_table`]).
    codebooks: Vec<f16>,
    /// `[n]`, or one unused value when the format has no scales.
    scales: Vec<f16>,
    cache: VqCache,
    /// Warps per block (`32 ·` this output channels); `kernel_codes` are laid out for it.
    warps: usize,
    /// Stages of the kernel's ring of activations and codes.
    stages: usize,
    /// The k split, or `None` for [`split_for`]'s choice per `m`.
    split: Option<usize>,
    /// The product, or `None` for [`product_for`]'s choice per `m`.
    product: Option<usize>,
    /// How a split k adds its partials, or `None` for [`ordered_for`]'s choice per `m`.
    ordered: Option<bool>,
    /// The table path's tiling, and its codes and codebook rows, for formats it takes
    /// ([`lut_applies`]).
    lut: Option<(LutTiling, Arc<LutParts>)>,
    /// Whether one token takes the table path where the format allows: `None` for
    /// [`lut_for`]'s rule.
    use_lut: Option<bool>,
    /// The fewest tokens a forward leaves the direct kernel at for prefill's paths: `None` for
    /// [`prefill_from`]'s rule.
    prefill_from: Option<usize>,
    /// The fewest tokens prefill takes the dense weight and cuBLAS at instead of the fused
    /// [`vq_gemm`]: `None` for [`dense_from`]'s rule.
    dense_from: Option<usize>,
}

/// What the table path ([`super::lut`]) reads besides the scales (shared by the layers that
/// differ only in their knobs).
#[derive(Debug)]
struct LutParts {
    codes: Vec<u8>,
    book: Vec<f16>,
}

/// Whether `m` tokens take the table path ([`super::lut`]) where the format allows: one token
/// (the tables are per token).
pub fn lut_for(m: usize) -> bool {
    m == 1
}

/// The fewest tokens an `[n, k]` layer of format `c` leaves the direct kernel at, for the
/// fused [`vq_gemm`] where the format has one ([`gemm_refusal`]), else for the dense weight and
/// cuBLAS ([`GpuVqLinear::forward_dense_into`]). The direct kernel's time grows by its 16-token
/// time for every 16 tokens; the two prefill paths are nearly flat up to 64 (fused) or 256
/// (dense) tokens. Measured on the H100 (docs/vq.md), the direct kernel and the fused GEMM
/// cross at 25-44 tokens on the 57344-wide layer; on the 8192-wide ones the GEMM's blocks of
/// 128 rows and 64 tokens do not fill the multiprocessors (64 blocks), and the crossing moves
/// to 70-110 tokens (40-43 for AQLM-3, whose direct kernel is slow): the rule takes 48 where
/// `n` makes two blocks a multiprocessor, else 96 (48 for 4096 entries). At 96 tokens of the
/// 8192-row layers the two measured within 8% for GPTVQ-2 (264.5 against 244.4 us) and the
/// fused GEMM 1.18-1.25x faster for AQLM-2x8. Without the fused
/// GEMM the dense path crosses at 83-90 tokens for QuiP#-4 (session 71), 166-195 for vectors
/// of 4 and 64-73 for AQLM-3, rounded up to 16.
pub fn prefill_from(c: VqConfig, n: usize) -> usize {
    if gemm_refusal(c, (n, 128)).is_none() {
        let wide = n / 128 >= 2 * REFERENCE_MULTIPROCESSORS;
        if wide || c.entries() > 256 {
            48
        } else {
            96
        }
    } else if c.vector_size == 4 {
        192
    } else if c.e8p {
        96
    } else {
        80
    }
}

/// The fewest tokens prefill takes the dense weight and cuBLAS at instead of the fused
/// [`vq_gemm`], for a format it serves. The dense path pays a fixed write of the weight
/// (230-650 us at 57344 x 8192) and then runs at cuBLAS's speed, the fused GEMM at 0.73-0.80x
/// of it for 256-entry formats and 0.48-0.50x for AQLM-3: measured on the H100 (docs/vq.md) they cross at 1195-1600 tokens for 256-entry
/// formats and at 510-590 for AQLM-3 (4096 entries: two 128-KiB codebooks and two look-ups a
/// weight, on blocks of 128 tokens), rounded down to a multiple of 128.
pub fn dense_from(c: VqConfig) -> usize {
    if c.entries() > 256 {
        512
    } else {
        1280
    }
}

pub(crate) fn kernel_err(e: impl std::fmt::Display) -> VqError {
    VqError::Arg {
        arg: "kernel",
        msg: e.to_string(),
    }
}

impl VqLinear {
    /// The layer for `weight` with the default cache ([`default_cache`]). The kernels need
    /// vectors of 4 or 8 values, `k` and the codebook tile's columns multiples of 64, `n` and
    /// the tile's rows multiples of 32, and the codebook buffers within
    /// [`CODEBOOK_SHARED_BYTES`] (CQ's per-channel-group codebooks, for the KV cache, are
    /// refused).
    pub fn new(weight: VqWeight) -> Result<VqLinear, VqError> {
        let c = weight.config;
        let (n, k, v) = (weight.n, weight.k, c.vector_size);
        let (rows, cols) = c.tile(n, k);
        if v != 4 && v != 8 {
            return Err(arg_err(
                "weight",
                format!("vector_size {v}: the kernels take vectors of 4 or 8 values"),
            ));
        }
        if !n.is_multiple_of(32) || !rows.is_multiple_of(32) {
            return Err(arg_err(
                "weight",
                format!("n = {n} and the codebook tile's {rows} rows must be multiples of 32"),
            ));
        }
        if !k.is_multiple_of(64) || !cols.is_multiple_of(64) {
            return Err(arg_err(
                "weight",
                format!("k = {k} and the codebook tile's {cols} columns must be multiples of 64"),
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
        let cache = default_cache(c);
        let shared = codebook_bytes(c, cache, n, k);
        if shared > CODEBOOK_SHARED_BYTES {
            return Err(arg_err(
                "weight",
                format!(
                    "its codebook buffers need {} KiB of shared memory, more than {} KiB",
                    shared / 1024,
                    CODEBOOK_SHARED_BYTES / 1024
                ),
            ));
        }
        let code_bytes = if original_code_bytes(c) == 1 {
            weight.codes.iter().map(|&c| c as u8).collect()
        } else {
            weight.codes.iter().flat_map(|c| c.to_le_bytes()).collect()
        };
        let codebooks = kernel_codebooks(&weight, cache);
        let scales = match &weight.scales {
            Some(s) => s.iter().map(|&x| f16::from_f32(x)).collect(),
            None => vec![f16::ONE],
        };
        let warps = warps_for(c, n, k);
        let kernel_codes = relayout_codes(&weight, warps, step_k(c, n, k));
        let lut = match LutTiling::for_shape(c, n, k) {
            Some(tiling) if lut_applies(c) => Some((
                tiling,
                Arc::new(LutParts {
                    codes: lut::lut_codes(&weight),
                    book: lut::lut_book(&weight),
                }),
            )),
            _ => None,
        };
        Ok(VqLinear {
            weight: Arc::new(weight),
            kernel_codes: Arc::new(kernel_codes),
            code_bytes: Arc::new(code_bytes),
            codebooks,
            scales,
            cache,
            warps,
            stages: STAGES,
            split: None,
            product: None,
            ordered: None,
            lut,
            use_lut: None,
            prefill_from: None,
            dense_from: None,
        })
    }

    /// Whether the table path serves one token ([`lut_for`]), `false` to keep the direct
    /// kernel; an error names `lut` when the format has no table path.
    pub fn with_lut(mut self, on: bool) -> Result<VqLinear, VqError> {
        if on && self.lut.is_none() {
            return Err(arg_err(
                "lut",
                format!(
                    "{} at {} x {} has no table path: it takes one codebook per matrix, vectors \
                     of 8, one or two stages, 256 to 4096 entries, n a multiple of 128",
                    self.weight.config.name,
                    self.n(),
                    self.k()
                ),
            ));
        }
        self.use_lut = Some(on);
        Ok(self)
    }

    /// The table path with `tiling` instead of [`LutTiling::for_shape`]'s; errors name `lut`.
    pub fn with_lut_tiling(mut self, tiling: LutTiling) -> Result<VqLinear, VqError> {
        let c = self.weight.config;
        tiling.check(c, self.n(), self.k())?;
        match &mut self.lut {
            Some((t, _)) => *t = tiling,
            None => return self.with_lut(true),
        }
        Ok(self)
    }

    /// Sets the fewest tokens a forward on the GPU leaves the direct kernel at for prefill's
    /// paths, instead of [`prefill_from`]'s rule; `usize::MAX` keeps every forward on the
    /// direct kernel. An error names `m` below 2 (one token is the direct kernel's or the
    /// tables').
    pub fn with_prefill_from(mut self, m: usize) -> Result<VqLinear, VqError> {
        if m < 2 {
            return Err(arg_err(
                "m",
                format!("{m}: prefill's paths start at 2 tokens or more"),
            ));
        }
        self.prefill_from = Some(m);
        Ok(self)
    }

    /// Sets the fewest tokens prefill takes the dense weight and one cuBLAS GEMM at
    /// ([`GpuVqLinear::forward_dense_into`]) instead of the fused [`vq_gemm`] (`dense_from`'s
    /// rule; 0: always the dense weight, `usize::MAX`: always the fused GEMM where the format
    /// has one).
    pub fn with_dense_from(mut self, m: usize) -> VqLinear {
        self.dense_from = Some(m);
        self
    }

    /// Whether a forward of `m` tokens on the GPU takes one of prefill's paths
    /// ([`Self::with_prefill_from`]).
    pub fn takes_prefill(&self, m: usize) -> bool {
        m >= self.prefill_start()
    }

    fn prefill_start(&self) -> usize {
        self.prefill_from
            .unwrap_or_else(|| prefill_from(self.weight.config, self.n()))
    }

    /// Whether `m` tokens take the fused [`vq_gemm`]: prefill's token counts of a format it
    /// serves, below [`Self::with_dense_from`]'s count.
    pub fn takes_fused(&self, m: usize) -> bool {
        let dense = self
            .dense_from
            .unwrap_or_else(|| dense_from(self.weight.config));
        self.takes_prefill(m)
            && m < dense
            && gemm_refusal(self.weight.config, (self.n(), self.k())).is_none()
    }

    /// Whether `m` tokens take the dense weight and one cuBLAS GEMM: prefill's token counts
    /// that do not take the fused GEMM.
    pub fn takes_dense(&self, m: usize) -> bool {
        self.takes_prefill(m) && !self.takes_fused(m)
    }

    /// The table path's tiling when `m` tokens take it.
    pub fn lut_tiling(&self, m: usize) -> Option<LutTiling> {
        let on = self.use_lut.unwrap_or_else(|| lut_for(m)) && m == 1;
        self.lut.as_ref().filter(|_| on).map(|(t, _)| *t)
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
    pub fn warps(&self) -> usize {
        self.warps
    }

    /// Sets the warps per block (a power of two up to 16 whose `32 ·` output channels divide
    /// the codebook tile's rows and `n`); re-lays the codes out for it.
    pub fn with_warps(mut self, warps: usize) -> Result<VqLinear, VqError> {
        let w = &self.weight;
        if !warps_ok(w.config, w.n, w.k, warps) {
            return Err(arg_err(
                "warps",
                format!(
                    "{warps}: must be a power of two up to 16 with 32·warps dividing n = {} and \
                     the codebook tile's rows",
                    w.n
                ),
            ));
        }
        self.kernel_codes = Arc::new(relayout_codes(w, warps, step_k(w.config, w.n, w.k)));
        self.warps = warps;
        Ok(self)
    }

    /// Sets the stages of the kernel's cp.async ring (2..=8).
    pub fn with_stages(mut self, stages: usize) -> Result<VqLinear, VqError> {
        if !(2..=8).contains(&stages) {
            return Err(arg_err("stages", format!("{stages}: must lie in 2..=8")));
        }
        self.stages = stages;
        Ok(self)
    }

    /// Sets the codebook's copies in shared memory: 1, or 16 for vectors of 4, or 8 for vectors
    /// of 8 with one codebook for the matrix or the E8P table (within [`CODEBOOK_SHARED_BYTES`]
    /// over its buffers).
    pub fn with_cache(mut self, cache: VqCache) -> Result<VqLinear, VqError> {
        let c = self.weight.config;
        let (n, k) = (self.weight.n, self.weight.k);
        if !cache_ok(c, cache, n, k) {
            return Err(arg_err(
                "cache",
                format!(
                    "{cache:?}: replicas must be 1, or 16 for vectors of 4, or 8 for vectors of \
                     8 with one codebook, and the codebook buffers ({} KiB) fit {} KiB",
                    codebook_bytes(c, cache, n, k) / 1024,
                    CODEBOOK_SHARED_BYTES / 1024
                ),
            ));
        }
        self.codebooks = kernel_codebooks(&self.weight, cache);
        self.cache = cache;
        Ok(self)
    }

    /// Sets the k split of the kernel (a power of two up to 8 dividing its k steps into whole
    /// codebook tiles per slice), instead of [`split_for`]'s choice per `m`.
    pub fn with_split(mut self, split: usize) -> Result<VqLinear, VqError> {
        let w = &self.weight;
        if !split.is_power_of_two() || split > 8 || !split_ok(w.config, w.n, w.k, split) {
            let steps = w.k / step_k(w.config, w.n, w.k);
            return Err(arg_err(
                "split",
                format!(
                    "{split}: must be a power of two up to 8 dividing the {steps} k steps into \
                     whole codebook tiles"
                ),
            ));
        }
        self.split = Some(split);
        Ok(self)
    }

    /// Sets how a split k adds its partial sums (`true`: in split order in one launch, the same
    /// bits in every run; `false`: by atomics, then [`vq_finalize`]) instead of
    /// [`ordered_for`]'s choice per `m`.
    pub fn with_ordered_split(mut self, ordered: bool) -> VqLinear {
        self.ordered = Some(ordered);
        self
    }

    /// Sets the product (0: `y = x · Wᵀ` on 16 tokens; 1, 2: `yᵀ = W · xᵀ` on 8 or 16 tokens;
    /// 3: the paired transposed product on 4 tokens, vectors of 4 only) instead of
    /// [`product_for`]'s choice per `m`.
    pub fn with_product(mut self, product: usize) -> Result<VqLinear, VqError> {
        if product > 3 {
            return Err(arg_err(
                "product",
                format!("{product}: must be 0, 1, 2 or 3"),
            ));
        }
        let c = self.weight.config;
        if product == 3 && (c.vector_size != 4 || c.e8p) {
            return Err(arg_err(
                "product",
                format!(
                    "3 (the paired product) takes vectors of 4 values; {} has {}",
                    c.name, c.vector_size
                ),
            ));
        }
        self.product = Some(product);
        Ok(self)
    }

    /// The kernel's configuration for `m` tokens.
    pub fn config(&self, m: usize) -> vq_gemv::Config {
        let w = &self.weight;
        let split = self
            .split
            .unwrap_or_else(|| split_for(w.config, self.warps, m, (w.n, w.k)));
        kernel_config(
            w.config,
            self.cache,
            self.warps,
            (w.n, w.k),
            (self.stages, split),
            self.product.unwrap_or_else(|| product_for(w.config, m)),
            self.ordered.unwrap_or_else(|| ordered_for(m)),
        )
    }

    /// The naive kernel's configuration.
    pub fn gc_config(&self) -> vq_gemv_gc::Config {
        gc_config(self.weight.config)
    }

    /// The codebooks the naive kernel gathers from: [`vq_gemv`]'s without copies, or the
    /// weight's rows in f16 where it has them copied, or for an E8P format the expanded lattice
    /// (`[residuals, 2^16, 8]`, 2 MiB in f16 for two stages).
    fn gc_codebooks(&self) -> std::borrow::Cow<'_, [f16]> {
        let w = &self.weight;
        if w.config.e8p || (self.cache.replicas > 1 && one_codebook(w.config, w.n, w.k)) {
            let book = self.weight.codebooks.iter().map(|&x| f16::from_f32(x));
            std::borrow::Cow::Owned(book.collect())
        } else {
            std::borrow::Cow::Borrowed(&self.codebooks)
        }
    }

    fn dims(&self) -> (i32, i32, i32, i32) {
        let w = &self.weight;
        let (rows, cols) = w.config.tile(w.n, w.k);
        (w.n as i32, w.k as i32, rows as i32, cols as i32)
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

    /// `y[m, n]` for `x[m, k]` (row-major f16) on the CPU interpreter, through [`vq_gemv`].
    pub fn forward_cpu(&self, x: &[f16], m: usize) -> Result<Vec<f16>, VqError> {
        self.forward_cpu_ordered(x, m, &BlockOrder::Launch)
    }

    /// [`forward_cpu`](Self::forward_cpu) with the kernel's blocks run in `order`: with k split,
    /// the same bits in every order (the last block of a tile adds the partials in split order).
    pub fn forward_cpu_ordered(
        &self,
        x: &[f16],
        m: usize,
        order: &BlockOrder,
    ) -> Result<Vec<f16>, VqError> {
        let lens = SplitLens::of(&self.config(m), m, self.n());
        self.forward_cpu_split(x, m, order, &mut HostSplit::new(lens))
    }

    /// The interpreter's forward with the split-k buffers `bufs` (grown as needed, kept between
    /// calls as a [`GpuVqLinear`] keeps its own).
    fn forward_cpu_split(
        &self,
        x: &[f16],
        m: usize,
        order: &BlockOrder,
        bufs: &mut HostSplit,
    ) -> Result<Vec<f16>, VqError> {
        let mi = self.check_x(x.len(), m)?;
        let (n, k, tr, tc) = self.dims();
        let mut y = vec![f16::NAN; m * self.n()];
        if let (Some(tiling), Some((_, parts))) = (self.lut_tiling(m), &self.lut) {
            let c = self.weight.config;
            let chunks = lut::chunks(c, self.k());
            let mut table = vec![f16::NAN; chunks * c.entries() * 8];
            vq_lut_table::interpret(
                &lut::table_config(c, self.k()),
                chunks as i32,
                x,
                &parts.book,
                &mut table,
            )
            .map_err(kernel_err)?;
            let mut sum = vec![0f32; self.n()];
            vq_lut_gemv::interpret_ordered(
                &tiling.gemv_config(c),
                order,
                n,
                chunks as i32,
                tiling.per as i32,
                &table,
                &parts.codes,
                &self.scales,
                &mut sum,
            )
            .map_err(kernel_err)?;
            vq_finalize::interpret(&vq_finalize::SPACE[0], n, &mut sum, &mut y)
                .map_err(kernel_err)?;
            return Ok(y);
        }
        let cfg = self.config(m);
        bufs.grow(SplitLens::of(&cfg, m, self.n()));
        let (workspace, semaphores) = bufs.launch_args(&cfg);
        vq_gemv::interpret_ordered(
            &cfg,
            order,
            mi,
            n,
            k,
            tr,
            tc,
            x,
            &self.kernel_codes,
            &self.codebooks,
            &self.scales,
            &mut y,
            workspace,
            semaphores,
        )
        .map_err(kernel_err)?;
        if cfg.SPLIT > 1 && cfg.ORDERED == 0 {
            vq_finalize::interpret(
                &vq_finalize::SPACE[0],
                (m * self.n()) as i32,
                &mut bufs.sum,
                &mut y,
            )
            .map_err(kernel_err)?;
        }
        debug_assert!(
            bufs.sum.iter().all(|&v| v == 0.0),
            "the atomics' sum is zero between launches"
        );
        debug_assert!(
            bufs.semaphores.iter().all(|&c| c == 0),
            "the last block of each tile resets its semaphore"
        );
        Ok(y)
    }

    /// The same through the naive [`vq_gemv_gc`].
    pub fn forward_cpu_gc(&self, x: &[f16], m: usize) -> Result<Vec<f16>, VqError> {
        let mi = self.check_x(x.len(), m)?;
        let (n, k, tr, tc) = self.dims();
        let e = self.weight.config.entries() as i32;
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
            &self.gc_codebooks(),
            &self.scales,
            &mut y,
        )
        .map_err(kernel_err)?;
        Ok(y)
    }

    /// Why the fused [`vq_gemm`] cannot serve this layer (an error naming `weight`), or its
    /// configuration for blocks of `bm` tokens (`None`: [`gemm_bm`]'s for `m`).
    pub fn gemm_config(&self, m: usize, bm: Option<usize>) -> Result<vq_gemm::Config, VqError> {
        let c = self.weight.config;
        if let Some(why) = gemm_refusal(c, (self.n(), self.k())) {
            return Err(arg_err("weight", format!("no fused VQ-GEMM: {why}")));
        }
        let bm = bm.unwrap_or_else(|| gemm_bm(c, m, self.n()));
        if ![64, 128, 256].contains(&bm) || gemm_stages(c, bm).is_none() {
            return Err(arg_err(
                "bm",
                format!("{bm} tokens a block: 64, 128 or 256 whose shared memory fits"),
            ));
        }
        Ok(gemm_config(c, bm))
    }

    /// The codes as [`vq_gemm`] reads them ([`GemmCodes`]), as many bytes as the codes.
    pub fn gemm_codes(&self) -> Result<GemmCodes, VqError> {
        self.gemm_config(1 << 20, Some(64))?;
        let c = self.weight.config;
        Ok(GemmCodes::new(
            &self.weight.codes,
            (self.n(), self.k()),
            c.vector_size,
            c.residuals,
            c.entries() > 256,
        ))
    }

    /// `y[m, n]` for `x[m, k]` on the CPU interpreter through the fused [`vq_gemm`] (blocks
    /// of `bm` tokens, `None` for the rule's).
    pub fn forward_cpu_gemm(
        &self,
        x: &[f16],
        m: usize,
        bm: Option<usize>,
    ) -> Result<Vec<f16>, VqError> {
        let mi = self.check_x(x.len(), m)?;
        let cfg = self.gemm_config(m, bm)?;
        let codes = self.gemm_codes()?;
        let (n, k, tr, tc) = self.dims();
        let mut y = vec![f16::NAN; m * self.n()];
        vq_gemm::interpret(
            &cfg,
            mi,
            n,
            k,
            tr,
            tc,
            x,
            &codes.bytes,
            &self.gc_codebooks(),
            &self.scales,
            &mut y,
        )
        .map_err(kernel_err)?;
        Ok(y)
    }

    /// The dense weight `w[n, k]` (f16, row-major) on the CPU interpreter, through
    /// [`vq_dequant`]: each value the f32 sum of its residual stages' f16 codebook values, times
    /// its row's f16 scale, rounded once. [`GpuVqLinear::forward_dense_into`] multiplies it.
    pub fn dense_cpu(&self) -> Result<Vec<f16>, VqError> {
        let (n, k, tr, tc) = self.dims();
        let e = self.weight.config.entries() as i32;
        let mut w = vec![f16::NAN; self.n() * self.k()];
        vq_dequant::interpret(
            &dequant_config(self.weight.config),
            n,
            k,
            e,
            tr,
            tc,
            &self.code_bytes,
            &self.gc_codebooks(),
            &self.scales,
            &mut w,
        )
        .map_err(kernel_err)?;
        Ok(w)
    }

    /// This layer on `ctx`'s GPU: uploads the kernel's codes, the codebooks and scales (the
    /// GC kernel's codes on its first use). A layer whose one token takes the tables uploads
    /// their codes instead, and the direct kernel's on the first forward of more tokens (or
    /// [`GpuVqLinear::reserve`] of more): one copy of the codes on the device for decoding
    /// one token at a time, where both copies would double the weight's memory.
    pub fn to_gpu(&self, ctx: &Arc<Context>) -> Result<GpuVqLinear, VqError> {
        let codes = match self.lut_tiling(1) {
            Some(_) => None,
            None => Some(DeviceBuffer::from_host(ctx, &self.kernel_codes).map_err(kernel_err)?),
        };
        Ok(GpuVqLinear {
            ctx: ctx.clone(),
            split: Mutex::new(DeviceSplit::default()),
            gc_codes: Mutex::new(None),
            codes: Mutex::new(codes),
            gemm: Mutex::new(None),
            codebooks: DeviceBuffer::from_host(ctx, &self.codebooks).map_err(kernel_err)?,
            scales: DeviceBuffer::from_host(ctx, &self.scales).map_err(kernel_err)?,
            lut: match &self.lut {
                Some((_, p)) => Some(GpuLut {
                    codes: DeviceBuffer::from_host(ctx, &p.codes).map_err(kernel_err)?,
                    book: DeviceBuffer::from_host(ctx, &p.book).map_err(kernel_err)?,
                    scratch: VqLutScratch::new(ctx),
                }),
                None => None,
            },
            prefill: VqPrefill::new(ctx),
            host: self.clone(),
        })
    }
}

/// Whether [`vq_gemv`] keeps the codebook of an `[n, k]` weight so: 1 copy, 16 for vectors
/// of 4, 8 for vectors of 8 with one codebook or the E8P table, within
/// [`CODEBOOK_SHARED_BYTES`].
pub(super) fn cache_ok(c: VqConfig, cache: VqCache, n: usize, k: usize) -> bool {
    let copies = cache.replicas == 1
        || (cache.replicas == 16 && c.vector_size == 4)
        || (cache.replicas == 8 && c.vector_size == 8 && (c.e8p || one_codebook(c, n, k)));
    copies && codebook_bytes(c, cache, n, k) <= CODEBOOK_SHARED_BYTES
}

/// Shared memory of [`vq_gemv`]'s codebook buffers.
fn codebook_bytes(c: VqConfig, cache: VqCache, n: usize, k: usize) -> usize {
    if c.e8p {
        return e8p::kernel_table_rows(c.residuals, cache.replicas) * 16;
    }
    let bufs = if one_codebook(c, n, k) { 1 } else { 2 };
    bufs * c.residuals * c.entries() * cache.replicas * c.vector_size * 2
}

/// The naive kernel's codes on a device, and for an E8P format the expanded codebooks it
/// gathers from (the other formats' are [`GpuVqLinear`]'s own).
type GcBuffers = (DeviceBuffer<u8>, Option<DeviceBuffer<f16>>);

/// The fused GEMM's codes on a device, and its plain codebooks where the layer's hold copies.
type GemmBuffers = (DeviceBuffer<u8>, Option<DeviceBuffer<f16>>);

/// The split-k buffers of a layer ([`SplitLens`]), on the host (`Vec`s, for the interpreter) or
/// on a device: the ordered partials, the atomics' sum (zero between launches) and one counter
/// per output tile (zero between launches: the last block of a tile resets its own, so no
/// launch needs a memset).
#[derive(Default)]
struct SplitBuffers<F, I> {
    partials: F,
    sum: F,
    semaphores: I,
}

impl<F, I> SplitBuffers<F, I> {
    /// The buffers a launch of `cfg` takes as its `workspace` and `semaphores`.
    fn launch_args(&mut self, cfg: &vq_gemv::Config) -> (&mut F, &mut I) {
        let workspace = if cfg.ORDERED == 1 {
            &mut self.partials
        } else {
            &mut self.sum
        };
        (workspace, &mut self.semaphores)
    }
}

type HostSplit = SplitBuffers<Vec<f32>, Vec<i32>>;
/// A device's split-k buffers, each `None` until a split first needs it.
type DeviceSplit = SplitBuffers<Option<DeviceBuffer<f32>>, Option<DeviceBuffer<i32>>>;

impl DeviceSplit {
    /// The buffers, those shorter than `lens` asks first grown with zeros
    /// ([`DeviceBuffer::grow_zeroed`]: the others, and their contents, stay).
    fn grow(
        &mut self,
        ctx: &Context,
        lens: SplitLens,
    ) -> Result<SplitBuffers<&mut DeviceBuffer<f32>, &mut DeviceBuffer<i32>>, VqError> {
        Ok(SplitBuffers {
            partials: DeviceBuffer::grow_zeroed(&mut self.partials, ctx, lens.partials)
                .map_err(kernel_err)?,
            sum: DeviceBuffer::grow_zeroed(&mut self.sum, ctx, lens.sum).map_err(kernel_err)?,
            semaphores: DeviceBuffer::grow_zeroed(&mut self.semaphores, ctx, lens.semaphores)
                .map_err(kernel_err)?,
        })
    }
}

impl HostSplit {
    /// Zeroed buffers of `lens`.
    fn new(lens: SplitLens) -> HostSplit {
        SplitBuffers {
            partials: vec![0.0; lens.partials],
            sum: vec![0.0; lens.sum],
            semaphores: vec![0; lens.semaphores],
        }
    }

    /// Lengthen the buffers shorter than `lens` asks, with zeros (as the device's are remade).
    fn grow(&mut self, lens: SplitLens) {
        for (buf, len) in [
            (&mut self.partials, lens.partials),
            (&mut self.sum, lens.sum),
        ] {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        }
        if self.semaphores.len() < lens.semaphores {
            self.semaphores.resize(lens.semaphores, 0);
        }
    }
}

/// [`VqLinear`] on a GPU.
///
/// A forward is one launch (two with k split at more than 8 tokens, see [`ordered_for`]; three
/// for one token by tables, [`super::lut`]: the table, the look-ups, the finalize). With
/// k split it uses the layer's split-k buffers, made by
/// [`GpuVqLinear::reserve`] or grown by a forward that needs more; after `reserve(max_m)` no
/// forward of up to `max_m` tokens allocates (the tables' scratch included), so it can be
/// captured in a CUDA graph (with
/// [`GpuVqLinear::forward_into`], which takes the output buffer). Two forwards of one layer
/// must not be in flight at once on different streams: they would share the semaphores. The
/// tables' scratch can be shared by the layers of a model ([`VqLutScratch`],
/// [`GpuVqLinear::with_lut_scratch`]).
pub struct GpuVqLinear {
    ctx: Arc<Context>,
    split: Mutex<DeviceSplit>,
    /// The GC kernel's codes, and for an E8P format its expanded codebooks, uploaded on its
    /// first use.
    gc_codes: Mutex<Option<GcBuffers>>,
    /// The direct kernel's codes: uploaded by `to_gpu`, or where one token takes the tables,
    /// by the first forward or `reserve` of more tokens.
    codes: Mutex<Option<DeviceBuffer<u8>>>,
    /// The fused GEMM's codes ([`GemmCodes`]) and, where the layer's codebooks hold copies,
    /// the plain ones: uploaded by the first forward that takes the GEMM (or `reserve`).
    gemm: Mutex<Option<GemmBuffers>>,
    codebooks: DeviceBuffer<f16>,
    scales: DeviceBuffer<f16>,
    /// The table path's codes and codebook rows, and its table and sum (made by the first
    /// forward that takes the path, or by [`GpuVqLinear::reserve`]).
    lut: Option<GpuLut>,
    /// Prefill's cuBLAS handle and dense weight: the layer's own, or shared with other layers
    /// ([`VqPrefill`]).
    prefill: VqPrefill,
    host: VqLinear,
}

/// The device side of the table path ([`super::lut`]).
struct GpuLut {
    codes: DeviceBuffer<u8>,
    book: DeviceBuffer<f16>,
    /// The token's table and sum: the layer's own, or one shared with other layers.
    scratch: VqLutScratch,
}

/// The token's table `[chunks · entries, 8]` f16 and the `[n]` f32 sum (zero between launches:
/// `vq_finalize` zeroes it), each grown on demand ([`DeviceBuffer::grow_zeroed`]).
#[derive(Default)]
struct LutScratch {
    table: Option<DeviceBuffer<f16>>,
    sum: Option<DeviceBuffer<f32>>,
}

/// The table path's device scratch (the token's table and the look-ups' sum), which the layers
/// of a model on one context can share instead of keeping one each: 16.8 MB per AQLM-3 layer
/// at k = 8192 and 58.7 MB at k = 28672, about 8.7 GB for the 320 linears of Llama-3-70B, where
/// one shared scratch is 58.7 MB.
///
/// A clone is a handle to the same buffers. The buffers grow to the largest layer that uses them
/// (made by that layer's first forward or [`GpuVqLinear::reserve`]). The layers' forwards are
/// ordered by the context's one stream, so they never use the buffers at once; a scratch of
/// another context is refused ([`GpuVqLinear::with_lut_scratch`]).
#[derive(Clone)]
pub struct VqLutScratch {
    ctx: Arc<Context>,
    buffers: Arc<Mutex<LutScratch>>,
}

impl VqLutScratch {
    /// An empty scratch on `ctx` (nothing allocated until a layer needs it).
    pub fn new(ctx: &Arc<Context>) -> VqLutScratch {
        VqLutScratch {
            ctx: ctx.clone(),
            buffers: Arc::default(),
        }
    }

    /// Bytes allocated on the device now.
    pub fn bytes(&self) -> usize {
        let b = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        b.table.as_ref().map_or(0, |t| t.size_bytes())
            + b.sum.as_ref().map_or(0, |s| s.size_bytes())
    }

    /// `launch` on the buffers, grown to a table of `table` values and a sum of `sum` (zeroed
    /// where remade: a sum that serves stays zero between launches), locked while it queues.
    fn with<R>(
        &self,
        table: usize,
        sum: usize,
        launch: impl FnOnce(&mut DeviceBuffer<f16>, &mut DeviceBuffer<f32>) -> Result<R, VqError>,
    ) -> Result<R, VqError> {
        let mut b = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let LutScratch { table: t, sum: s } = &mut *b;
        let t = DeviceBuffer::grow_zeroed(t, &self.ctx, table).map_err(kernel_err)?;
        let s = DeviceBuffer::grow_zeroed(s, &self.ctx, sum).map_err(kernel_err)?;
        launch(t, s)
    }
}

/// Prefill's device scratch ([`GpuVqLinear::forward_dense_into`]): a cuBLAS handle and one
/// dense f16 weight, which the layers of a model on one context can share instead of keeping
/// one each: a 57344 x 8192 layer's dense weight is 940 MB, as much as the f16 layer, where its
/// 2-bit codes are 117 MB.
///
/// A clone is a handle to the same buffers. The dense weight grows to the largest layer that
/// uses it (made by that layer's first forward of [`VqLinear::takes_dense`] tokens, or by
/// [`GpuVqLinear::reserve`]); the layers' forwards are ordered by the context's one stream, so
/// they never use it at once; a scratch of another context is refused
/// ([`GpuVqLinear::with_prefill`]).
#[derive(Clone)]
pub struct VqPrefill {
    ctx: Arc<Context>,
    buffers: Arc<Mutex<PrefillBuffers>>,
}

#[derive(Default)]
struct PrefillBuffers {
    blas: Option<Cublas>,
    dense: Option<DeviceBuffer<f16>>,
}

impl VqPrefill {
    /// An empty scratch on `ctx` (nothing made until a layer needs it).
    pub fn new(ctx: &Arc<Context>) -> VqPrefill {
        VqPrefill {
            ctx: ctx.clone(),
            buffers: Arc::default(),
        }
    }

    /// Bytes of the dense weight allocated on the device now.
    pub fn bytes(&self) -> usize {
        let b = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        b.dense.as_ref().map_or(0, |d| d.size_bytes())
    }

    /// `launch` on the handle and a dense weight of at least `len` values (made or grown
    /// first), locked while it queues.
    fn with<R>(
        &self,
        len: usize,
        launch: impl FnOnce(&Cublas, &mut DeviceBuffer<f16>) -> Result<R, VqError>,
    ) -> Result<R, VqError> {
        let mut b = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let PrefillBuffers { blas, dense } = &mut *b;
        if blas.is_none() {
            *blas = Some(Cublas::new(&self.ctx).map_err(kernel_err)?);
        }
        if dense.as_ref().is_none_or(|d| d.len() < len) {
            // The old weight goes first: two of the largest need not fit at once.
            *dense = None;
            *dense = Some(DeviceBuffer::zeros(&self.ctx, len).map_err(kernel_err)?);
        }
        launch(
            blas.as_ref().expect("made above"),
            dense.as_mut().expect("made above"),
        )
    }
}

impl GpuVqLinear {
    pub fn host(&self) -> &VqLinear {
        &self.host
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Make the split-k buffers for forwards of up to `max_m` tokens (zeroed), keeping the ones
    /// there are when they already suffice, the tables' scratch where one token takes them, the
    /// direct kernel's codes where more tokens do, and prefill's codes and dense weight where
    /// `max_m` takes that path (whose tokens need no split buffers); an error names `m`.
    /// Afterwards no [`forward_into`](Self::forward_into) of up to `max_m` tokens allocates.
    pub fn reserve(&self, max_m: usize) -> Result<(), VqError> {
        if max_m == 0 || max_m > 1 << 20 {
            return Err(arg_err("m", format!("{max_m}: must lie in 1..=2^20")));
        }
        let n = self.host.n();
        // Only the direct kernel's token counts: prefill's path uses no split buffers.
        let lens = (1..=max_m)
            .filter(|&m| !self.host.takes_prefill(m))
            .map(|m| SplitLens::of(&self.host.config(m), m, n))
            .fold(SplitLens::of(&self.host.config(1), 1, n), SplitLens::max);
        let mut split = self.split.lock().unwrap_or_else(|p| p.into_inner());
        split.grow(&self.ctx, lens)?;
        drop(split);
        if self.host.lut_tiling(1).is_some() {
            self.with_lut_scratch_buffers(|_, _| Ok(()))?;
        }
        if max_m > 1 || self.host.lut_tiling(1).is_none() {
            drop(self.direct_codes()?);
        }
        // The fused GEMM's token counts, if any, start where prefill's do.
        if self.host.takes_fused(max_m.min(self.host.prefill_start())) {
            drop(self.gemm_buffers()?);
        }
        if self.host.takes_dense(max_m) {
            drop(self.gc_buffers()?);
            self.prefill
                .with(self.host.n() * self.host.k(), |_, _| Ok(()))?;
        }
        Ok(())
    }

    /// The direct kernel's codes, uploaded on first use.
    fn direct_codes(&self) -> Result<std::sync::MutexGuard<'_, Option<DeviceBuffer<u8>>>, VqError> {
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        if codes.is_none() {
            *codes = Some(
                DeviceBuffer::from_host(&self.ctx, &self.host.kernel_codes).map_err(kernel_err)?,
            );
        }
        Ok(codes)
    }

    /// Bytes of this layer's codes on the device now (the direct kernel's, the tables', the
    /// GC kernel's), which [`VqLinear::to_gpu`] and first uses upload.
    pub fn code_bytes_on_device(&self) -> usize {
        let len = |b: &Mutex<Option<DeviceBuffer<u8>>>| {
            let b = b.lock().unwrap_or_else(|p| p.into_inner());
            b.as_ref().map_or(0, |b| b.len())
        };
        let gc = self.gc_codes.lock().unwrap_or_else(|p| p.into_inner());
        let gc = gc.as_ref().map_or(0, |(codes, _)| codes.len());
        len(&self.codes) + gc + self.lut.as_ref().map_or(0, |l| l.codes.len())
    }

    /// `launch` on the table path's table and sum, made or grown on first use.
    fn with_lut_scratch_buffers<R>(
        &self,
        launch: impl FnOnce(&mut DeviceBuffer<f16>, &mut DeviceBuffer<f32>) -> Result<R, VqError>,
    ) -> Result<R, VqError> {
        let lut = self.lut.as_ref().expect("the layer has a table path");
        let c = self.host.weight.config;
        let table = lut::chunks(c, self.host.k()) * c.entries() * 8;
        lut.scratch.with(table, self.host.n(), launch)
    }

    /// Take the table path's scratch from `scratch`, shared with the other layers given it,
    /// instead of keeping one of this layer's own ([`VqLutScratch`]); a layer without a table
    /// path is returned as it is. An error names `scratch` when it belongs to another context.
    pub fn with_lut_scratch(mut self, scratch: &VqLutScratch) -> Result<GpuVqLinear, VqError> {
        if !Arc::ptr_eq(&scratch.ctx, &self.ctx) {
            return Err(arg_err(
                "scratch",
                "made on another context: layers share a scratch only on one context (one \
                 stream orders their forwards)",
            ));
        }
        if let Some(lut) = &mut self.lut {
            lut.scratch = scratch.clone();
        }
        Ok(self)
    }

    /// The table path's scratch (`None` without a table path): shared, when
    /// [`with_lut_scratch`](Self::with_lut_scratch) gave it, or the layer's own.
    pub fn lut_scratch_handle(&self) -> Option<&VqLutScratch> {
        self.lut.as_ref().map(|l| &l.scratch)
    }

    /// Take prefill's cuBLAS handle and dense weight from `prefill`, shared with the other
    /// layers given it, instead of keeping ones of this layer's own ([`VqPrefill`]). An error
    /// names `prefill` when it belongs to another context.
    pub fn with_prefill(mut self, prefill: &VqPrefill) -> Result<GpuVqLinear, VqError> {
        if !Arc::ptr_eq(&prefill.ctx, &self.ctx) {
            return Err(arg_err(
                "prefill",
                "made on another context: layers share prefill's scratch only on one context \
                 (one stream orders their forwards)",
            ));
        }
        self.prefill = prefill.clone();
        Ok(self)
    }

    /// Prefill's scratch: shared, when [`with_prefill`](Self::with_prefill) gave it, or the
    /// layer's own.
    pub fn prefill_handle(&self) -> &VqPrefill {
        &self.prefill
    }

    /// The naive kernel's codes in their original order, and for an E8P format or a
    /// replicated whole-matrix codebook its codebooks ([`VqLinear::gc_codebooks`]), uploaded on
    /// the first call: what [`vq_gemv_gc`] and [`vq_dequant`] read.
    fn gc_buffers(&self) -> Result<std::sync::MutexGuard<'_, Option<GcBuffers>>, VqError> {
        let h = &self.host;
        let mut gc = self.gc_codes.lock().unwrap_or_else(|p| p.into_inner());
        if gc.is_none() {
            let codes = DeviceBuffer::from_host(&self.ctx, &h.code_bytes).map_err(kernel_err)?;
            *gc = Some((codes, self.plain_codebooks()?));
        }
        Ok(gc)
    }

    /// The codebooks without copies ([`VqLinear::gc_codebooks`]) on the device where they differ
    /// from the layer's own (`None`: the layer's serve).
    fn plain_codebooks(&self) -> Result<Option<DeviceBuffer<f16>>, VqError> {
        match self.host.gc_codebooks() {
            std::borrow::Cow::Owned(b) => Ok(Some(
                DeviceBuffer::from_host(&self.ctx, &b).map_err(kernel_err)?,
            )),
            std::borrow::Cow::Borrowed(_) => Ok(None),
        }
    }

    fn gemm_buffers(&self) -> Result<std::sync::MutexGuard<'_, Option<GemmBuffers>>, VqError> {
        let h = &self.host;
        let mut gemm = self.gemm.lock().unwrap_or_else(|p| p.into_inner());
        if gemm.is_none() {
            let codes = h.gemm_codes()?;
            let codes = DeviceBuffer::from_host(&self.ctx, &codes.bytes).map_err(kernel_err)?;
            *gemm = Some((codes, self.plain_codebooks()?));
        }
        Ok(gemm)
    }

    /// Prefill through the fused [`vq_gemm`] (blocks of `bm` tokens, `None` for
    /// [`gemm_bm`]'s): `y = x · Wᵀ` in one launch, the codes read once per block of tokens and
    /// looked up into the tensor cores' operand, no dense weight. The first call uploads the
    /// GEMM's codes (as many bytes as the codes); an error names `weight` where the format has
    /// no fused GEMM ([`gemm_refusal`]).
    pub fn forward_gemm_into(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        bm: Option<usize>,
    ) -> Result<(), VqError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        if y.len() != m * h.n() {
            return Err(arg_err(
                "y",
                format!("{} values, expected m·n = {}", y.len(), m * h.n()),
            ));
        }
        let cfg = h.gemm_config(m, bm)?;
        let (n, k, tr, tc) = h.dims();
        let gemm = self.gemm_buffers()?;
        let (codes, book) = gemm.as_ref().expect("uploaded by gemm_buffers");
        vq_gemm::launch(
            &self.ctx,
            &cfg,
            mi,
            n,
            k,
            tr,
            tc,
            x,
            codes,
            book.as_ref().unwrap_or(&self.codebooks),
            &self.scales,
            y,
        )
        .map_err(kernel_err)
    }

    /// The dense weight `w[n, k]` (f16, row-major) into the first `n·k` values of `w` on the
    /// device: one launch of [`vq_dequant`], the same values as [`VqLinear::dense_cpu`]. The
    /// first call uploads the codes in their original order (as many bytes as the direct
    /// kernel's codes), which later calls and the naive kernel share.
    pub fn dense_into(&self, w: &mut DeviceBuffer<f16>) -> Result<(), VqError> {
        let h = &self.host;
        let len = h.n() * h.k();
        if w.len() < len {
            return Err(arg_err(
                "w",
                format!("{} values, fewer than n·k = {len}", w.len()),
            ));
        }
        let (n, k, tr, tc) = h.dims();
        let gc = self.gc_buffers()?;
        let (codes, book) = gc.as_ref().expect("uploaded by gc_buffers");
        let mut dense = w.view_mut(0..len).map_err(kernel_err)?;
        vq_dequant::launch(
            &self.ctx,
            &dequant_config(h.weight.config),
            n,
            k,
            h.weight.config.entries() as i32,
            tr,
            tc,
            codes,
            book.as_ref().unwrap_or(&self.codebooks),
            &self.scales,
            &mut dense,
        )
        .map_err(kernel_err)
    }

    /// Prefill: `y = x · Wᵀ` (`x [m, k]`, `y [m, n]`, f16) as [`Self::dense_into`] into
    /// `dense`, then one GEMM on it by `blas` (cuBLAS, f16 with f32 accumulation): the codes
    /// are read once, where [`Self::forward_into`] reads them again for every 16 tokens. The
    /// scale multiplies the weight before the GEMM, where the direct kernel scales its f32
    /// sums: the results differ by f16 roundings. `dense` holds at least `n·k` values; layers
    /// run one after another may share one buffer of the largest (a 57344 x 8192 layer's is
    /// 940 MB). Nothing is allocated here once the naive kernel's codes are on the device.
    pub fn forward_dense_into(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        dense: &mut DeviceBuffer<f16>,
        blas: &Cublas,
    ) -> Result<(), VqError> {
        let h = &self.host;
        h.check_x(x.len(), m)?;
        if y.len() != m * h.n() {
            return Err(arg_err(
                "y",
                format!("{} values, expected m·n = {}", y.len(), m * h.n()),
            ));
        }
        self.dense_into(dense)?;
        let w = dense.view(0..h.n() * h.k()).map_err(kernel_err)?;
        blas.gemm_nt(m, h.n(), h.k(), x, &w, y).map_err(kernel_err)
    }

    /// `y[m, n]` for `x[m, k]` on the device (f16).
    pub fn forward(&self, x: &DeviceBuffer<f16>, m: usize) -> Result<DeviceBuffer<f16>, VqError> {
        let mut y = DeviceBuffer::zeros(&self.ctx, m * self.host.n()).map_err(kernel_err)?;
        self.forward_into(x, m, &mut y, false)?;
        Ok(y)
    }

    /// `y = x · Wᵀ` into `y` (`[m, n]`): [`vq_gemv`] (one token: the tables, where the format
    /// takes them; [`VqLinear::takes_dense`] tokens: prefill's path on the layer's
    /// [`VqPrefill`]), or with `naive` the GC kernel.
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
        if !naive && h.takes_fused(m) {
            return self.forward_gemm_into(x, m, y, None);
        }
        if !naive && h.takes_dense(m) {
            return self.prefill.with(h.n() * h.k(), |blas, dense| {
                self.forward_dense_into(x, m, y, dense, blas)
            });
        }
        let (n, k, tr, tc) = h.dims();
        if let (false, Some(tiling), Some(parts)) = (naive, h.lut_tiling(m), &self.lut) {
            let c = h.weight.config;
            let chunks = lut::chunks(c, h.k()) as i32;
            return self.with_lut_scratch_buffers(|table, sum| {
                vq_lut_table::launch(
                    &self.ctx,
                    &lut::table_config(c, h.k()),
                    chunks,
                    x,
                    &parts.book,
                    table,
                )
                .map_err(kernel_err)?;
                vq_lut_gemv::launch(
                    &self.ctx,
                    &tiling.gemv_config(c),
                    n,
                    chunks,
                    tiling.per as i32,
                    &*table,
                    &parts.codes,
                    &self.scales,
                    sum,
                )
                .map_err(kernel_err)?;
                vq_finalize::launch(&self.ctx, &vq_finalize::SPACE[0], n, sum, y)
                    .map_err(kernel_err)
            });
        }
        if naive {
            let gc = self.gc_buffers()?;
            let (codes, book) = gc.as_ref().expect("uploaded by gc_buffers");
            vq_gemv_gc::launch(
                &self.ctx,
                &h.gc_config(),
                mi,
                n,
                k,
                h.weight.config.entries() as i32,
                tr,
                tc,
                x,
                codes,
                book.as_ref().unwrap_or(&self.codebooks),
                &self.scales,
                y,
            )
            .map_err(kernel_err)
        } else {
            let cfg = h.config(m);
            let lens = SplitLens::of(&cfg, m, h.n());
            let mut split = self.split.lock().unwrap_or_else(|p| p.into_inner());
            let mut bufs = split.grow(&self.ctx, lens)?;
            let (workspace, semaphores) = bufs.launch_args(&cfg);
            let codes = self.direct_codes()?;
            vq_gemv::launch(
                &self.ctx,
                &cfg,
                mi,
                n,
                k,
                tr,
                tc,
                x,
                codes.as_ref().expect("uploaded above"),
                &self.codebooks,
                &self.scales,
                y,
                &mut **workspace,
                &mut **semaphores,
            )
            .map_err(kernel_err)?;
            if cfg.SPLIT > 1 && cfg.ORDERED == 0 {
                vq_finalize::launch(
                    &self.ctx,
                    &vq_finalize::SPACE[0],
                    (m * h.n()) as i32,
                    &mut *bufs.sum,
                    y,
                )
                .map_err(kernel_err)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A layer's split-k buffers live from call to call, as a [`GpuVqLinear`]'s do: a call that
    /// adds its partials by atomics after ordered calls (whose partials stay in their buffer)
    /// must still start from a zero sum, and an ordered call after atomic ones from zero
    /// semaphores. Each call with kept buffers gives the bits of one with fresh buffers.
    #[test]
    fn kept_split_buffers_serve_both_ways_of_adding() {
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (n, k) = (512, 1024);
        let w = VqWeight::random(VqConfig::GPTVQ_2, n, k, rng.random(), true).unwrap();
        let layer = VqLinear::new(w).unwrap().with_split(4).unwrap();
        let mut kept = HostSplit::new(SplitLens::of(&layer.config(1), 1, n));
        let mut both = [false, false];
        for m in [1, 3, 16, 9, 2, 16, 1] {
            let cfg = layer.config(m);
            both[cfg.ORDERED as usize] = true;
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let got = layer
                .forward_cpu_split(&x, m, &BlockOrder::Launch, &mut kept)
                .unwrap();
            let fresh = layer.forward_cpu(&x, m).unwrap();
            if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != fresh[i].to_bits()) {
                panic!(
                    "m = {m}, ordered = {}, seed {seed}: y[{i}] = {} with kept buffers, {} with fresh ones",
                    cfg.ORDERED, got[i], fresh[i]
                );
            }
        }
        assert_eq!(both, [true, true], "both ways of adding were run");
    }
}
