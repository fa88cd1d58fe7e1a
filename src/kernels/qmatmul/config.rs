//! The tile configuration of the quantized matmul, its validation and the quantities derived
//! from it (warp grid, fragment repeats, bytes per thread).

use crate::quant::QuantError;
use crate::DType;
use tilus_core::interp::InterpError;
use tilus_core::verify::{max_register_words, MAX_BLOCK_REGISTERS};

/// Bad configuration, problem size or buffer: every variant names the field or argument.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QMatmulError {
    #[error("config field `{field}`: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("argument `{arg}`: {reason}")]
    Shape { arg: &'static str, reason: String },
    #[error("argument `{arg}`: expected {expected} bytes ({what}), got {got}")]
    Buffer {
        arg: &'static str,
        expected: usize,
        got: usize,
        what: String,
    },
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// A generated program failed the verifier: a bug in this module, reported instead of run.
    #[error("the generated `{program}` program does not verify: {diagnostics}")]
    Verify {
        program: String,
        diagnostics: String,
    },
    #[error("interpreter: {0}")]
    Interp(#[from] InterpError),
    /// Code generation, compilation or launch on the GPU failed (the message names the
    /// argument for launch checks).
    #[error("GPU: {0}")]
    Gpu(String),
}

impl From<crate::gpu::GpuError> for QMatmulError {
    fn from(e: crate::gpu::GpuError) -> Self {
        QMatmulError::Gpu(e.to_string())
    }
}

impl From<tilus_runtime::RuntimeError> for QMatmulError {
    fn from(e: tilus_runtime::RuntimeError) -> Self {
        QMatmulError::Gpu(e.to_string())
    }
}

pub(crate) fn config_err(field: &'static str, reason: impl Into<String>) -> QMatmulError {
    QMatmulError::Config {
        field,
        reason: reason.into(),
    }
}

/// The product of named sizes, or an error naming `arg`. Checked in release builds too: a
/// wrapped product would allocate, or check a buffer against, the wrong length.
pub(crate) fn size_product(
    arg: &'static str,
    factors: &[(&str, usize)],
) -> Result<usize, QMatmulError> {
    factors
        .iter()
        .try_fold(1usize, |acc, &(_, v)| acc.checked_mul(v))
        .ok_or_else(|| {
            let names: Vec<&str> = factors.iter().map(|f| f.0).collect();
            let values: Vec<String> = factors.iter().map(|f| f.1.to_string()).collect();
            shape_err(
                arg,
                format!(
                    "{} = {} overflows usize",
                    names.join(" * "),
                    values.join(" * ")
                ),
            )
        })
}

/// Bytes of `k x n` packed `dtype` codes, or an error naming `arg`.
pub(crate) fn packed_bytes(
    arg: &'static str,
    dtype: DType,
    k: usize,
    n: usize,
) -> Result<usize, QMatmulError> {
    let len = size_product(arg, &[("k", k), ("n", n)])?;
    tilus_core::storage::try_packed_len(dtype, len).map_err(|e| shape_err(arg, e.to_string()))
}

pub(crate) fn shape_err(arg: &'static str, reason: impl Into<String>) -> QMatmulError {
    QMatmulError::Shape {
        arg,
        reason: reason.into(),
    }
}

/// One member of the quantized matmul family: `C[m, n] = A[m, k] · dequant(W)[k, n]`.
///
/// `bm x bn x bk` is the block tile; `warps` warps are arranged as a `warps_m x warps_n` grid
/// with `warps_m = gcd(warps, bm / 16)` (see [`Tiling`]). `stages` is the depth of the
/// cp.async pipeline (at least 2). `split_k > 1` splits the reduction over `split_k` blocks
/// that write f32 partial sums to a workspace; the last of them to finish (counted on a
/// per-tile semaphore) sums them in split order, in the same launch
/// ([`QMatmulConfig::split_buffers`] sizes the two buffers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QMatmulConfig {
    /// The weight type: `u1..u8`, `i2..i8`, or a float of 3 to 8 bits.
    pub wdtype: DType,
    /// The activation (and output, scale, zero point) type: f16 or bf16.
    pub adtype: DType,
    /// Rows of `k` per scale group; `None` for one scale per output channel.
    pub group_rows: Option<usize>,
    /// Whether zero points are subtracted (unsigned weight types only). `QuantizedWeight::quantize`
    /// gives every unsigned weight zero points (per group, or the fixed midpoint), so this is
    /// `true` exactly for unsigned weights from it; [`super::prepare`] checks the match.
    pub has_zeros: bool,
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub warps: usize,
    pub stages: usize,
    pub split_k: usize,
    /// How the product is computed; see [`QMatmulMethod`].
    pub method: QMatmulMethod,
    /// Stream-k workers per block row (0: off; [`QMatmulMethod::GemvWgmma`] with
    /// `split_k = 1` and `bn <= 256`): the `(column tile, k tile)` iterations are shared out
    /// equally among this many blocks, which may start and end inside a column tile; the
    /// partial sums of a tile's workers are added by the last of them, in the same launch.
    /// Against a grid of whole tiles, no multiprocessor idles at the end of the launch.
    ///
    /// With [`QMatmulMethod::GemvImma`] at one token (1-, 2- and 4-bit codes): persistent
    /// workers that claim units of one column tile and `k / split_k` rows (at most
    /// [`MAX_CHUNK`](super::imma::MAX_CHUNK), at least `stages` tiles) from a counter as they
    /// go, the chunks of a column added in chunk order. Correct, but measured slower than
    /// the grid of fixed work on every Llama-70B layer (perf note 83), so no tuning list
    /// holds it.
    pub stream_k: usize,
    /// Blocks the kernel is compiled to fit on one multiprocessor (`__launch_bounds__`'s
    /// minimum: ptxas then caps each thread at `65536 / (32 · warps · blocks_per_sm)`
    /// registers). Taken by [`QMatmulMethod::Lut`], whose 8-warp blocks run two to a
    /// multiprocessor (perf note 37: two blocks' tables hide each other's barriers and
    /// latencies better than one block's ILP does), [`QMatmulMethod::GemvWgmma`] (note 58) and
    /// [`QMatmulMethod::GemvImma`] (three 8-warp blocks for 4-bit weights, note 62); 1 for the
    /// other methods.
    pub blocks_per_sm: usize,
    /// Warp-specialized ([`QMatmulMethod::GemvWgmma`] on the copy engine, one pass, no
    /// split): one more warpgroup fills the ring while the `warps` multiply (`specialize!`;
    /// the producer's registers go to them), with no block barrier in the k loop; may run
    /// `blocks_per_sm` = 2.
    pub specialize: bool,
    /// k tiles of 64 rows in one ring stage of [`QMatmulMethod::GemvWgmma`] (1 or 2; 1 for
    /// every other method): with 2, the stage's barrier, bookkeeping and scale loads are paid
    /// once per 128 rows of k (perf note 58). Stream-k workers only (in one pass ptxas
    /// serializes the wgmmas), scale groups spanning whole stages; the weight's layout does
    /// not change (its tiles stay `bk = 64` rows).
    pub stage_tiles: usize,
}

/// The two ways to compute `A · dequant(W)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QMatmulMethod {
    /// One kernel: the pipelined template dequantizes each weight tile in registers right
    /// before its mma (decode shapes: the weight is read once, at the speed of memory).
    #[default]
    Fused,
    /// Prefill shapes: a kernel dequantizes the whole weight to a dense `[k, n]` matrix of the
    /// activation type (tiles as in the fused kernel), then cuBLAS multiplies. The extra
    /// `2 k n` bytes written and read again are small next to a GEMM with many rows, and
    /// cuBLAS uses the GPU's newest tensor-core instructions. On the CPU runner the GEMM is a
    /// host loop with f32 accumulation.
    DequantizeThenGemm,
    /// Decode and small-batch shapes: the fused pipeline computing the transposed product
    /// `Cᵀ = dequant(W)ᵀ · Aᵀ`, the weight as the mma's A operand (16 output columns by 16 k
    /// per fragment) and the activations as B, in token tiles of 8 rows (`bm` a multiple of
    /// 8). Each mma then consumes 256 weights instead of 128, and the accumulator of a
    /// `bn`-wide tile is half as large, so the same weight tile costs half the mma and
    /// accumulator instructions and fewer registers; with `bm > 8` each dequantized fragment
    /// feeds `bm / 8` mmas. Scale groups must span whole k tiles (or be per channel).
    Gemv,
    /// [`QMatmulMethod::Gemv`] on Hopper's warpgroup MMA (sm_90a only): the dequantized weight
    /// in wgmma's register operand (`m64`: four warps' 16-row fragments), the activations
    /// read by the wgmma straight from the shared ring (`n = bm` tokens, 8 to 256), one
    /// instruction per 64 x bm x 16. Whole warpgroups (`warps` a multiple of 4), `bk = 64`.
    GemvWgmma,
    /// One token (`bm = 1`, a block per token) of an integer weight by look-up tables of its
    /// activations' partial sums: per k tile of 256 the block builds 32 tables of 256 entries
    /// in shared memory (entry `b` of table `T`: the sum of the activations `8T + j` whose bit
    /// `j` of `b` is set), and each byte of a bit plane of the weight, re-laid offline, is one
    /// look-up instead of a conversion and 8 multiply-adds per weight. A `b`-bit code is `b`
    /// planes. `bk = 512` (two table tiles, built and read in turn), `stages = 2`, groups of
    /// 32 to 256 rows, 4, 8 or 16 warps; `bn` a multiple of `warps x group_rows / 8`.
    Lut,
    /// One token (`bm = 1`) of a 1- to 5-bit integer weight on the integer tensor cores
    /// (`mma.m16n8k32 .s32.u8.s8`, sm_80+): a code masked in place in its byte is an exact u8
    /// weight, four to a `lop3` (3- and 5-bit codes: a 2- or 4-bit plane's field and a 1-bit
    /// plane's bit, four to two `lop3`s); the activations are split into four s8 digits per
    /// scale group (four of the mma's 8 columns), exact to `2^-23 max|x|`. Grouped scales of
    /// whole k tiles; `bk` a multiple of `32 x 8 / bits` (128 for 3 bits, 64 for 5);
    /// `k / split_k` at most 4096 (`super::imma`).
    /// With `bm` = 4, 8, 16 or 32 (2- and 4-bit weights) a block computes that many tokens from
    /// two s8 digits a value, which a pre-pass computes once for every column tile
    /// (`2^-14 max|x|` of each group, within f16's rounding of the output): the 2-8 token path.
    GemvImma,
    /// 8 to 64 tokens (`bm` 8, 16, 32 or 64) of a 2- or 4-bit integer weight on Hopper's integer
    /// warpgroup MMA (`wgmma .s32.u8.s8`, sm_90a): [`QMatmulMethod::GemvImma`]'s fields and
    /// two-digit pre-pass, the weight as wgmma's register operand, the digits read by the
    /// tensor cores from shared memory. `warps` 4 or 8 (warpgroups of 64 columns each, `bn` a
    /// multiple of `16 warps`), `bk` 128 or 256 dividing the group (`super::imma`).
    GemvIgmma,
}

impl QMatmulMethod {
    /// Whether the method's program runs on the warpgroup MMA, so only on sm_90a.
    pub fn needs_sm90a(self) -> bool {
        matches!(self, QMatmulMethod::GemvWgmma | QMatmulMethod::GemvIgmma)
    }
}

/// Quantities derived from a valid [`QMatmulConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// Warp grid: `warps_m` along m, `warps_n` along n (`warps_m * warps_n = warps`).
    pub warps_m: usize,
    pub warps_n: usize,
    /// mma.m16n8k16 repeats per warp and k tile: `bm / (16 warps_m)`, `bn / (8 warps_n)`,
    /// `bk / 16` ([`QMatmulMethod::Gemv`]: `rep_m = bm / 8` token tiles of 8 rows and
    /// `rep_n = bn / (16 warps_n)` weight fragments of 16 columns).
    pub rep_m: usize,
    pub rep_n: usize,
    pub rep_k: usize,
    /// Scale groups per k tile (1 when a group spans one or more whole tiles, or per channel).
    pub groups_per_tile: usize,
    /// Weight elements each thread holds per k tile (`4 rep_k rep_n`; `8 rep_k rep_n` for
    /// [`QMatmulMethod::Gemv`]).
    pub locals_per_thread: usize,
    /// Weight bytes each thread holds per k tile (`locals_per_thread * bits / 8`).
    pub bytes_per_thread: usize,
    /// Width of the contiguous byte runs of a thread in the re-laid-out tile: the largest of
    /// 16, 8, 4, 2, 1 dividing `bytes_per_thread` (16 means one LDS.128 / cp.async 16B each).
    pub vector_bytes: usize,
    /// Bytes of one re-laid-out weight tile (`bk * bn * bits / 8`).
    pub tile_bytes: usize,
}

/// The type whose codes the kernels read for `wdtype`: `wdtype` itself, or for a float type
/// whose every code is an integer within the range of the signed integer of its width, that
/// integer type. Of the family's types this is `f3e1m1`, the sign and magnitude of `-3..3`,
/// read as `i3` by every method: the re-layout re-codes each code by its value
/// ([`to_kernel_code`]), which is exact, and every kernel is `i3`'s. Its negative zero is
/// stored as `i3`'s zero, so [`super::relayout_inverse`] gives `+0` for it, the same value.
pub fn kernel_codes(wdtype: DType) -> DType {
    let DType::Float { .. } = wdtype else {
        return wdtype;
    };
    let int = DType::Int(wdtype.bits() as u8);
    let (lo, hi) = (
        -(1i64 << (wdtype.bits() - 1)),
        (1i64 << (wdtype.bits() - 1)) - 1,
    );
    let integral = (0..1u32 << wdtype.bits()).all(|c| {
        let v = wdtype.decode(c);
        v.fract() == 0.0 && (lo as f64..=hi as f64).contains(&v)
    });
    if integral {
        int
    } else {
        wdtype
    }
}

/// `code` of `wdtype` as a code of [`kernel_codes`]`(wdtype)`, the same value.
pub(crate) fn to_kernel_code(wdtype: DType, code: u32) -> u32 {
    let int = kernel_codes(wdtype);
    if int == wdtype {
        return code;
    }
    int.encode(wdtype.decode(code) as f32)
        .expect("an integral code's value is an integer of the type's range")
}

/// The inverse of [`to_kernel_code`] (a negative zero comes back as `+0`).
pub(crate) fn from_kernel_code(wdtype: DType, code: u32) -> u32 {
    let int = kernel_codes(wdtype);
    if int == wdtype {
        return code;
    }
    wdtype
        .encode(int.decode(code) as f32)
        .expect("every integer of the range is a value of the type")
}

/// The names of the 25 weight types of the family, in the order of the benchmark tables.
pub const WEIGHT_TYPE_NAMES: [&str; 25] = [
    "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "i2", "i3", "i4", "i5", "i6", "i7", "i8",
    "f3e1m1", "f4e2m1", "f5e2m2", "f5e3m1", "f6e3m2", "f6e2m3", "f7e3m3", "f7e4m2", "f8e4m3",
    "f8e5m2",
];

/// The weight types of the family ([`WEIGHT_TYPE_NAMES`], parsed).
pub fn weight_types() -> Vec<DType> {
    WEIGHT_TYPE_NAMES
        .iter()
        .map(|t| t.parse().expect("the names are valid types"))
        .collect()
}

/// Whether `dtype` is one of the weight types of the family.
pub fn is_weight_type(dtype: DType) -> bool {
    match dtype {
        DType::UInt(b) => (1..=8).contains(&b),
        DType::Int(b) => (2..=8).contains(&b),
        DType::Float { .. } | DType::F8E4M3 | DType::F8E5M2 => dtype.is_valid(),
        _ => false,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl QMatmulConfig {
    /// The default tiles for a weight type (see `docs/qmatmul.md`, "Layouts per bit width"):
    /// `bm = 16`, 4 warps along n, `bk = 64`, 3 stages, no split, and
    /// `bn = 32 * max(2, 8 / gcd(bits, 8))`, the narrowest tile for which every thread's weight
    /// bytes per k tile are a multiple of 16 (one LDS.128 / cp.async 16B each).
    pub fn default_for(
        wdtype: DType,
        adtype: DType,
        group_rows: Option<usize>,
        has_zeros: bool,
    ) -> QMatmulConfig {
        let bits = wdtype.bits() as usize;
        let rep_n = (8 / gcd(bits.max(1), 8)).max(2);
        QMatmulConfig {
            wdtype,
            adtype,
            group_rows,
            has_zeros,
            bm: 16,
            bn: 32 * rep_n,
            bk: 64,
            warps: 4,
            stages: 3,
            split_k: 1,
            method: QMatmulMethod::Fused,
            stream_k: 0,
            blocks_per_sm: 1,
            specialize: false,
            stage_tiles: 1,
        }
    }

    /// This configuration's types in a [`QMatmulMethod::Lut`] block: the method's fixed tiles
    /// (one token, `bk = 512`, two stages), `bn` columns over `warps` warps, k split `split_k`
    /// ways, `blocks_per_sm` blocks to a multiprocessor. [`Self::tiling`] checks the rules.
    pub fn lut(
        self,
        bn: usize,
        warps: usize,
        split_k: usize,
        blocks_per_sm: usize,
    ) -> QMatmulConfig {
        QMatmulConfig {
            method: QMatmulMethod::Lut,
            bm: 1,
            bn,
            bk: 512,
            warps,
            stages: 2,
            split_k,
            stream_k: 0,
            blocks_per_sm,
            specialize: false,
            stage_tiles: 1,
            ..self
        }
    }

    /// This configuration for a GPU of `multiprocessors` multiprocessors: the tuning lists
    /// plan stream-k workers for [`REFERENCE_MULTIPROCESSORS`] (one or two a multiprocessor,
    /// shared among the block rows), and this scales them to the device, at least one, so that
    /// no worker waits for a second wave on a GPU with fewer (an H100 PCIe's 114) and none
    /// idles on one with more. Every other field is kept.
    ///
    /// [`REFERENCE_MULTIPROCESSORS`]: crate::kernels::REFERENCE_MULTIPROCESSORS
    pub fn for_multiprocessors(self, multiprocessors: usize) -> QMatmulConfig {
        let reference = crate::kernels::REFERENCE_MULTIPROCESSORS;
        if self.stream_k == 0 || multiprocessors == 0 || multiprocessors == reference {
            return self;
        }
        let workers = self.stream_k.saturating_mul(multiprocessors) / reference;
        QMatmulConfig {
            stream_k: workers.max(1),
            ..self
        }
    }

    /// A valid configuration for an `[*, k] x [k, n]` problem: the default tiles when they
    /// divide the shape, otherwise the largest `bn` / `bk` that do (preferring 16-byte runs
    /// per thread, accepting whole bytes). Errors name `n` or `k` when nothing fits.
    pub fn for_shape(
        wdtype: DType,
        adtype: DType,
        group_rows: Option<usize>,
        has_zeros: bool,
        n: usize,
        k: usize,
    ) -> Result<QMatmulConfig, QMatmulError> {
        let base = QMatmulConfig::default_for(wdtype, adtype, group_rows, has_zeros);
        base.tiling()?;
        let mut best: Option<(QMatmulConfig, Tiling)> = None;
        for bk in [64, 128, 32, 16] {
            for rep_n in (1..=base.bn / 32).rev() {
                let cfg = QMatmulConfig {
                    bk,
                    bn: 32 * rep_n,
                    ..base
                };
                let Ok(t) = cfg.tiling() else { continue };
                if !n.is_multiple_of(cfg.bn) || !k.is_multiple_of(cfg.bk) {
                    continue;
                }
                if group_rows.is_some_and(|g| !k.is_multiple_of(g)) {
                    continue;
                }
                let better = match &best {
                    None => true,
                    Some((_, bt)) => t.vector_bytes > bt.vector_bytes,
                };
                if better {
                    best = Some((cfg, t));
                }
                if t.vector_bytes == 16 {
                    return Ok(cfg);
                }
            }
        }
        match best {
            Some((cfg, _)) => Ok(cfg),
            None => {
                if !n.is_multiple_of(32) {
                    Err(shape_err(
                        "n",
                        format!(
                            "{n} is not a multiple of 32 (4 warps x 8 columns), the narrowest tile"
                        ),
                    ))
                } else {
                    Err(shape_err(
                        "k",
                        format!(
                            "{k} is not a multiple of a k tile (16..128){} that suits {wdtype} weights",
                            group_rows.map_or(String::new(), |g| format!(" and of the group size {g}"))
                        ),
                    ))
                }
            }
        }
    }

    /// Check the configuration and derive the tiling; errors name the field at fault.
    pub fn tiling(&self) -> Result<Tiling, QMatmulError> {
        if !is_weight_type(self.wdtype) {
            return Err(config_err(
                "wdtype",
                format!(
                    "{} is not a weight type; use u1..u8, i2..i8 or a float of 3 to 8 bits",
                    self.wdtype
                ),
            ));
        }
        if !matches!(self.adtype, DType::F16 | DType::BF16) {
            return Err(config_err(
                "adtype",
                format!("activations are f16 or bf16, not {}", self.adtype),
            ));
        }
        if self.has_zeros && !matches!(self.wdtype, DType::UInt(_)) {
            return Err(config_err(
                "has_zeros",
                format!(
                    "zero points apply to unsigned weight types only, not {}",
                    self.wdtype
                ),
            ));
        }
        for (field, v) in [
            ("bm", self.bm),
            ("bn", self.bn),
            ("bk", self.bk),
            ("warps", self.warps),
            ("split_k", self.split_k),
            ("blocks_per_sm", self.blocks_per_sm),
        ] {
            if v == 0 {
                return Err(config_err(field, "must be positive"));
            }
        }
        if self.warps > 32 {
            return Err(config_err(
                "warps",
                format!("{} warps exceed the 1024 threads of a block", self.warps),
            ));
        }
        if self.stages < 2 {
            return Err(config_err(
                "stages",
                format!(
                    "{} stages; the cp.async pipeline needs at least 2",
                    self.stages
                ),
            ));
        }
        if self.method == QMatmulMethod::Lut {
            return self.lut_tiling();
        }
        if self.method == QMatmulMethod::GemvImma {
            self.check_split_limit()?;
            return super::imma::gemv_imma_tiling(self);
        }
        if self.method == QMatmulMethod::GemvIgmma {
            return super::imma::gemv_igmma_tiling(self);
        }
        if self.specialize {
            let why = if self.method != QMatmulMethod::GemvWgmma {
                Some(
                    "warp specialization is a schedule of the warpgroup gemv (METHOD=gemv_wgmma)"
                        .to_string(),
                )
            } else if self.bn > 256 {
                Some(format!(
                    "the producer fills the copy engine's ring, whose tiles are at most 256 \
                     columns wide, not bn = {}",
                    self.bn
                ))
            } else if self.split_k != 1 || self.stream_k != 0 {
                Some(
                    "the specialized schedule is one pass over k: split_k = 1, stream_k = 0"
                        .to_string(),
                )
            } else if self.group_rows.is_none() {
                Some(
                    "the specialized schedule needs grouped scales (the consumers read them \
                     from the ring; per-channel scales are loaded once for the whole block)"
                        .to_string(),
                )
            } else if self.blocks_per_sm > 2 {
                Some(format!(
                    "blocks_per_sm = {}: at most 2 specialized blocks share a multiprocessor",
                    self.blocks_per_sm
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(config_err("specialize", why));
            }
        } else if self.method == QMatmulMethod::GemvWgmma {
            self.check_wgmma_occupancy()?;
        } else if self.blocks_per_sm != 1 {
            return Err(config_err(
                "blocks_per_sm",
                format!(
                    "{}; only the look-up method and the warpgroup gemv are compiled for more \
                     than one block per multiprocessor",
                    self.blocks_per_sm
                ),
            ));
        }
        let wgmma = self.method == QMatmulMethod::GemvWgmma;
        let gemv = self.method == QMatmulMethod::Gemv || wgmma;
        self.check_stage_tiles(wgmma)?;
        if wgmma {
            if !self.warps.is_multiple_of(4) {
                return Err(config_err(
                    "warps",
                    format!(
                        "{}; the warpgroup MMA needs whole warpgroups (a multiple of 4 warps)",
                        self.warps
                    ),
                ));
            }
            if self.bk != 64 {
                return Err(config_err(
                    "bk",
                    format!(
                        "{}; the warpgroup gemv reads k tiles of 64 (one 128-byte swizzled row)",
                        self.bk
                    ),
                ));
            }
            if self.bm > 256 {
                return Err(config_err(
                    "bm",
                    format!("{} exceeds 256, the widest wgmma", self.bm),
                ));
            }
            if self.stages < 3 {
                return Err(config_err(
                    "stages",
                    format!(
                        "{}; the warpgroup gemv keeps a stage for the wgmma in flight, so it \
                         needs at least 3",
                        self.stages
                    ),
                ));
            }
        }
        if gemv && (self.bm == 0 || !self.bm.is_multiple_of(8)) {
            return Err(config_err(
                "bm",
                format!(
                    "{} is not a positive multiple of 8; the gemv method computes whole token \
                     tiles of 8 activation rows (the mma's B columns)",
                    self.bm
                ),
            ));
        }
        if !gemv && !self.bm.is_multiple_of(16) {
            return Err(config_err(
                "bm",
                format!("{} is not a multiple of 16 (the mma tile height)", self.bm),
            ));
        }
        if !self.bk.is_multiple_of(16) {
            return Err(config_err(
                "bk",
                format!(
                    "{} is not a multiple of 16 (the mma reduction depth)",
                    self.bk
                ),
            ));
        }
        if self.method == QMatmulMethod::DequantizeThenGemm && self.split_k > 1 {
            return Err(config_err(
                "split_k",
                "splitting k applies to the fused method; the GEMM of DequantizeThenGemm is cuBLAS's",
            ));
        }
        let warps_m = if gemv {
            1
        } else {
            gcd(self.warps, self.bm / 16)
        };
        let warps_n = self.warps / warps_m;
        // Columns of one mma tile: the weight is B (8 columns), or with gemv A (16 rows).
        let tile_n = if gemv { 16 } else { 8 };
        if !self.bn.is_multiple_of(tile_n * warps_n) {
            return Err(config_err(
                "bn",
                format!(
                    "{} is not a multiple of {tile_n} x {warps_n} (the mma tile width times the warps along n)",
                    self.bn
                ),
            ));
        }
        if self.bn > 4096 {
            return Err(config_err("bn", format!("{} exceeds 4096", self.bn)));
        }
        let groups_per_tile = match self.group_rows {
            None => 1,
            Some(0) => return Err(config_err("group_rows", "must be positive")),
            Some(g) if g % self.bk == 0 => 1,
            Some(g) if gemv => {
                return Err(config_err(
                    "group_rows",
                    format!(
                        "{g} rows per group is shorter than bk = {}; the gemv method scales \
                         the accumulator once per group, so groups must span whole k tiles",
                        self.bk
                    ),
                ))
            }
            Some(g) if self.bk.is_multiple_of(g) => self.bk / g,
            Some(g) => {
                return Err(config_err(
                    "group_rows",
                    format!(
                        "{g} rows per group neither divides nor is a multiple of bk = {}",
                        self.bk
                    ),
                ))
            }
        };
        if self.stream_k > 0 {
            let why = if !wgmma {
                Some("stream-k is a schedule of the warpgroup gemv (METHOD=gemv_wgmma)".to_string())
            } else if self.split_k != 1 {
                Some(format!(
                    "stream-k shares k out itself; split_k must be 1, not {}",
                    self.split_k
                ))
            } else if self.bn > 256 {
                Some(format!(
                    "stream-k runs on the copy engine's ring, whose tiles are at most 256 \
                     columns wide, not bn = {}",
                    self.bn
                ))
            } else if self.group_rows.is_none() {
                Some(
                    "stream-k needs grouped scales: a worker's passes cross column tiles, and \
                     per-channel scales are loaded once per block"
                        .to_string(),
                )
            } else if self.stream_k > 65535 {
                Some(format!(
                    "{} workers exceed 65535, the most blocks along the grid's y dimension",
                    self.stream_k
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(config_err("stream_k", why));
            }
        }
        self.check_split_limit()?;
        let (rep_m, rep_n, rep_k) = if gemv {
            (self.bm / 8, self.bn / 16 / warps_n, self.bk / 16)
        } else {
            (self.bm / 16 / warps_m, self.bn / 8 / warps_n, self.bk / 16)
        };
        // Per fragment and thread: weight locals (8 in an A fragment, 4 in a B one).
        let per_fragment = if gemv { 8 } else { 4 };
        // The warpgroup MMA reads the activations from shared memory: no register tile.
        self.check_registers(rep_m, rep_n, rep_k, per_fragment, !wgmma)?;
        // At least the activation and weight tiles of every stage (the exact count, with the
        // scales and alignment, is checked on the built program); before building, because the
        // program's prologue is unrolled over the stages.
        let abytes = self.adtype.bits() as usize / 8;
        let rows = self.bk * self.stage_tiles;
        let per_stage = self.bm * rows * abytes + rows * self.bn * self.wdtype.bits() as usize / 8;
        let limit = super::program::target(self).max_shared_bytes;
        if self.stages.checked_mul(per_stage).is_none_or(|b| b > limit) {
            return Err(config_err(
                "stages",
                format!(
                    "{} stages of {per_stage} bytes of activation and weight tiles exceed the {limit} bytes of shared memory",
                    self.stages
                ),
            ));
        }
        let locals = per_fragment * rep_k * rep_n;
        let bits = locals * self.wdtype.bits() as usize;
        if !bits.is_multiple_of(8) {
            return Err(config_err(
                "bn",
                format!(
                    "each thread would hold {locals} x {} = {bits} bits of weights per k tile, not a whole number of bytes; make (bk / 16) x (bn / {}) even",
                    self.wdtype,
                    tile_n * warps_n
                ),
            ));
        }
        let bytes_per_thread = bits / 8;
        let vector_bytes = [16, 8, 4, 2, 1]
            .into_iter()
            .find(|v| bytes_per_thread.is_multiple_of(*v))
            .unwrap_or(1);
        Ok(Tiling {
            warps_m,
            warps_n,
            rep_m,
            rep_n,
            rep_k,
            groups_per_tile,
            locals_per_thread: locals,
            bytes_per_thread,
            vector_bytes,
            tile_bytes: self.bk * self.bn * self.wdtype.bits() as usize / 8,
        })
    }

    /// `stage_tiles` k tiles a ring stage: 1 for every method, 2 also for the warpgroup gemv
    /// (`wgmma`) on stream-k workers whose scale groups span whole stages.
    fn check_stage_tiles(&self, wgmma: bool) -> Result<(), QMatmulError> {
        let tiles = self.stage_tiles;
        let why = if tiles == 1 {
            None
        } else if !wgmma {
            Some(format!(
                "{tiles}; only the warpgroup gemv (METHOD=gemv_wgmma) puts several k tiles in \
                 a stage"
            ))
        } else if tiles != 2 {
            Some(format!(
                "{tiles}; a warpgroup gemv stage holds 1 or 2 k tiles"
            ))
        } else if self.specialize {
            Some("2; the specialized schedule keeps one k tile a stage".to_string())
        } else if self.stream_k == 0 {
            // Measured (perf note 58): in whole tiles or split-k, ptxas 13.0 serializes the
            // loop's wgmmas (C7515) and the kernel runs 1.2-1.4x slower than one tile a stage.
            Some(
                "2 needs stream-k workers (stream_k > 0): in whole tiles or split-k the \
                 wgmmas of a two-tile stage are serialized by ptxas"
                    .to_string(),
            )
        } else if self
            .group_rows
            .is_some_and(|g| !g.is_multiple_of(64 * tiles))
        {
            Some(format!(
                "{tiles}: a stage reads one row of scales, so groups of {} rows cannot span its \
                 {} rows of k",
                self.group_rows.unwrap_or(0),
                64 * tiles
            ))
        } else {
            None
        };
        match why {
            Some(why) => Err(config_err("stage_tiles", why)),
            None => Ok(()),
        }
    }

    /// `blocks_per_sm` is 1 to 4 and leaves each thread of `kernel`'s blocks at least 64
    /// registers under `__launch_bounds__`' cap (`65536 / (threads · blocks)`).
    pub(crate) fn check_blocks_registers(&self, kernel: &str) -> Result<(), QMatmulError> {
        let blocks = self.blocks_per_sm;
        if !(1..=4).contains(&blocks) {
            return Err(config_err(
                "blocks_per_sm",
                format!("{blocks}; {kernel} runs 1 to 4 blocks a multiprocessor"),
            ));
        }
        let threads = 32 * self.warps.max(1);
        let registers = 65536 / (threads * blocks);
        if registers < 64 {
            return Err(config_err(
                "blocks_per_sm",
                format!(
                    "{blocks} blocks of {threads} threads leave {registers} registers a thread; \
                     {kernel} needs at least 64"
                ),
            ));
        }
        Ok(())
    }

    /// `blocks_per_sm` warpgroup-gemv blocks share a multiprocessor (perf note 58): 1 to 4, each
    /// thread keeping at least 64 registers under `__launch_bounds__`' cap, and every block's
    /// ring of activation and weight tiles in shared memory together.
    fn check_wgmma_occupancy(&self) -> Result<(), QMatmulError> {
        let blocks = self.blocks_per_sm;
        self.check_blocks_registers("the warpgroup gemv")?;
        let abytes = self.adtype.bits() as usize / 8;
        let rows = 64 * self.stage_tiles;
        let per_stage = self.bm * rows * abytes + rows * self.bn * self.wdtype.bits() as usize / 8;
        let limit = super::program::target(self).max_shared_bytes;
        let bytes = self.stages.saturating_mul(per_stage).saturating_mul(blocks);
        if bytes > limit {
            return Err(config_err(
                "blocks_per_sm",
                format!(
                    "{blocks} blocks of {} stages of {per_stage} bytes exceed the {limit} bytes \
                     of shared memory",
                    self.stages
                ),
            ));
        }
        Ok(())
    }

    /// `split_k` blocks fit the grid's z dimension.
    fn check_split_limit(&self) -> Result<(), QMatmulError> {
        if self.split_k > 65535 {
            return Err(config_err(
                "split_k",
                format!(
                    "{} splits exceed 65535, the most blocks along the grid's z dimension",
                    self.split_k
                ),
            ));
        }
        Ok(())
    }

    /// [`Self::tiling`] of [`QMatmulMethod::Lut`] (`super::lut` checks its rules): one warp
    /// row, `rep_n` rows per thread and lane set, the weight bytes of a 256-row table tile.
    fn lut_tiling(&self) -> Result<Tiling, QMatmulError> {
        self.check_split_limit()?;
        let s = super::lut::lut_shape(self)?;
        Ok(Tiling {
            warps_m: 1,
            warps_n: self.warps,
            rep_m: 1,
            rep_n: s.rows,
            rep_k: super::lut::TILE_K / 8,
            groups_per_tile: self.bk / s.tables_per_group / 8,
            locals_per_thread: 8 * s.rows * s.tables_per_group,
            bytes_per_thread: s.thread_bytes(),
            vector_bytes: 16,
            tile_bytes: self.bk * self.bn * self.wdtype.bits() as usize / 8,
        })
    }

    /// The verifier's register limit (`tilus_core::verify::max_register_words`) on the three
    /// mma tiles of a thread, checked before anything is built so that the error names a field:
    /// the f32 accumulator (`4 rep_m rep_n` locals), the activation tile (`8 rep_m rep_k`
    /// 16-bit locals; only when `activations_in_registers`) and the dequantized weight tile
    /// (`weight_locals rep_k rep_n` 16-bit locals). The field named is the one with the
    /// larger repeat.
    fn check_registers(
        &self,
        rep_m: usize,
        rep_n: usize,
        rep_k: usize,
        weight_locals: usize,
        activations_in_registers: bool,
    ) -> Result<(), QMatmulError> {
        let threads = self.warps * 32;
        let limit = max_register_words(threads);
        let words = |a: usize, b: usize, per_fragment: usize| {
            a.checked_mul(b).and_then(|x| x.checked_mul(per_fragment))
        };
        let pick =
            |x: (&'static str, usize), y: (&'static str, usize)| if x.1 >= y.1 { x.0 } else { y.0 };
        let tiles = [
            Some((
                pick(("bm", rep_m), ("bn", rep_n)),
                format!("[bm, bn] = [{}, {}] f32 accumulator", self.bm, self.bn),
                words(rep_m, rep_n, 4),
            )),
            activations_in_registers.then(|| {
                (
                    pick(("bm", rep_m), ("bk", rep_k)),
                    format!("[bm, bk] = [{}, {}] activation tile", self.bm, self.bk),
                    words(rep_m, rep_k, 4),
                )
            }),
            Some((
                pick(("bk", rep_k), ("bn", rep_n)),
                format!("[bk, bn] = [{}, {}] weight tile", self.bk, self.bn),
                words(rep_k, rep_n, weight_locals / 2),
            )),
        ];
        for (field, what, words) in tiles.into_iter().flatten() {
            if words.is_none_or(|w| w > limit) {
                let words = words.map_or("more than 2^64".to_string(), |w| w.to_string());
                return Err(config_err(
                    field,
                    format!(
                        "each thread would hold {words} 32-bit registers of the {what}, more than the limit of {limit} (a block's {MAX_BLOCK_REGISTERS} registers over {threads} threads)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Check that an `[m, k] x [k, n]` problem fits this configuration (errors name `m`, `n`
    /// or `k`). `m` may be anything (rows past `m` are masked); `n` and `k` must be whole tiles.
    pub fn check_shape(&self, m: usize, n: usize, k: usize) -> Result<(), QMatmulError> {
        self.tiling()?;
        // Extents and offsets are i32 scalars in the VM, and the generated code indexes each
        // operand with 32-bit arithmetic.
        let limit = i32::MAX as usize;
        for (arg, v) in [("m", m), ("n", n), ("k", k)] {
            if v > limit {
                return Err(shape_err(
                    arg,
                    format!("{v} does not fit the VM's i32 indices"),
                ));
            }
        }
        if n == 0 {
            return Err(shape_err("n", "must be positive"));
        }
        if k == 0 {
            return Err(shape_err("k", "must be positive"));
        }
        if !n.is_multiple_of(self.bn) {
            return Err(shape_err(
                "n",
                format!(
                    "{n} is not a multiple of the weight tile width bn = {}",
                    self.bn
                ),
            ));
        }
        let kt = self.bk * self.stage_tiles * self.split_k;
        if !k.is_multiple_of(kt) {
            let stage = if self.stage_tiles > 1 {
                format!(" x stage_tiles {}", self.stage_tiles)
            } else {
                String::new()
            };
            return Err(shape_err(
                "k",
                format!(
                    "{k} is not a multiple of bk{stage} x split_k = {}{stage} x {} = {kt}",
                    self.bk, self.split_k
                ),
            ));
        }
        if self.method == QMatmulMethod::GemvImma && self.stream_k > 0 && m > 1 {
            return Err(shape_err(
                "m",
                format!(
                    "{m} rows; the integer-mma gemv's persistent workers compute one token \
                     (stream_k = 0 takes one a block row)"
                ),
            ));
        }
        if self.method == QMatmulMethod::GemvImma
            && self.stream_k > 0
            && k / (self.bk * self.split_k) < self.stages
        {
            // The ring's issue runs `stages - 1` tiles ahead: at most one unit ahead of its use.
            return Err(shape_err(
                "k",
                format!(
                    "{k} rows in {} chunks are {} tiles of {} each; persistent workers need at \
                     least stages = {} tiles a chunk (lower split_k)",
                    self.split_k,
                    k / (self.bk * self.split_k),
                    self.bk,
                    self.stages
                ),
            ));
        }
        if self.method == QMatmulMethod::GemvImma
            && self.stream_k > 0
            && k / self.split_k > super::imma::MAX_CHUNK
        {
            return Err(shape_err(
                "k",
                format!(
                    "{k} rows in {} chunks are chunks of {}; the integer-mma gemv's persistent \
                     workers split at most {} rows of activations a unit (raise split_k)",
                    self.split_k,
                    k / self.split_k,
                    super::imma::MAX_CHUNK
                ),
            ));
        }
        if self.method == QMatmulMethod::GemvImma
            && self.bm == 1
            && k / self.split_k > super::imma::MAX_SLICE
        {
            return Err(shape_err(
                "k",
                format!(
                    "{k} rows in {} splits are slices of {}; the integer-mma gemv splits at most {} \
                     rows of activations a block (raise split_k)",
                    self.split_k,
                    k / self.split_k,
                    super::imma::MAX_SLICE
                ),
            ));
        }
        if let Some(g) = self.group_rows {
            if !k.is_multiple_of(g) {
                return Err(shape_err(
                    "k",
                    format!("{k} is not a multiple of the group size {g}"),
                ));
            }
            // Groups of whole k tiles scale the accumulator per group, so every split must
            // start at a group boundary.
            if g.is_multiple_of(self.bk)
                && self.split_k > 1
                && !(k / self.split_k).is_multiple_of(g)
            {
                return Err(shape_err(
                    "k",
                    format!(
                        "{k} rows in {} splits of whole {g}-row scale groups: k must be a multiple of {}",
                        self.split_k,
                        g * self.split_k
                    ),
                ));
            }
        }
        let elements = [
            (
                "m",
                m.checked_mul(k.max(n)),
                "m x max(k, n) activation or output elements",
            ),
            ("k", k.checked_mul(n), "k x n weight elements"),
            (
                "m",
                n.checked_mul(self.split_k).and_then(|v| v.checked_mul(m)),
                "m x n x split_k workspace elements",
            ),
            (
                "m",
                m.div_ceil(self.bm.max(1))
                    .checked_mul(self.stream_k * 2 * self.bm * self.bn),
                "stream-k workspace elements (m tiles x stream_k x 2 x bm x bn)",
            ),
        ];
        for (arg, v, what) in elements {
            if v.is_none_or(|v| v > limit) {
                return Err(shape_err(
                    arg,
                    format!("{what} exceed the VM's i32 indices"),
                ));
            }
        }
        Ok(())
    }

    /// Elements of the split-k buffers for up to `max_m` rows of an `n`-column output: the f32
    /// workspace `[split_k, max_m, n]` (with stream-k `[cdiv(max_m, bm), stream_k, 2, bm,
    /// bn]`) and the i32 semaphores, one per output tile (`cdiv(max_m, bm) * (n / bn)`; the
    /// integer-mma gemv's persistent workers two more, their claim counter and count). Both
    /// are zero with `split_k = 1` and no stream-k (the program does not read them). Errors
    /// name `m` (`max_m` too large for the VM's i32 indices) or `n`.
    pub fn split_buffers(&self, max_m: usize, n: usize) -> Result<(usize, usize), QMatmulError> {
        if self.split_k <= 1 && self.stream_k == 0 {
            return Ok((0, 0));
        }
        self.tiling()?;
        if n == 0 || !n.is_multiple_of(self.bn) {
            return Err(shape_err(
                "n",
                format!(
                    "{n} is not a positive multiple of the weight tile width bn = {}",
                    self.bn
                ),
            ));
        }
        let persistent = self.method == QMatmulMethod::GemvImma && self.stream_k > 0;
        let workspace = if persistent {
            // A chunk's slot per column, as split-k's.
            size_product("m", &[("split_k", self.split_k), ("m", max_m), ("n", n)])?
        } else if self.stream_k > 0 {
            // A slot per worker for its first and its last pass, per block row.
            let slots = [
                ("m", max_m.div_ceil(self.bm)),
                ("stream_k", self.stream_k),
                ("slots", 2),
                ("bm", self.bm),
                ("bn", self.bn),
            ];
            size_product("m", &slots)?
        } else {
            size_product("m", &[("split_k", self.split_k), ("m", max_m), ("n", n)])?
        };
        if workspace > i32::MAX as usize {
            return Err(shape_err(
                "m",
                format!(
                    "{max_m} rows: {workspace} split-k workspace elements exceed the VM's i32 indices"
                ),
            ));
        }
        // Persistent workers: a count per column tile, the claim counter and the count of
        // workers done claiming.
        let semaphores = max_m.div_ceil(self.bm) * (n / self.bn) + if persistent { 2 } else { 0 };
        Ok((workspace, semaphores))
    }

    /// Whether the program reads the split-k workspace and semaphores ([`Self::split_buffers`]):
    /// with `split_k > 1` or stream-k.
    pub fn needs_split_buffers(&self) -> bool {
        self.split_k > 1 || self.stream_k > 0
    }

    /// Whether the configuration runs the digits' pre-pass ([`QMatmulMethod::GemvImma`] with
    /// `bm > 1`, and [`QMatmulMethod::GemvIgmma`]).
    pub fn uses_digits(&self) -> bool {
        match self.method {
            QMatmulMethod::GemvImma => self.bm > 1,
            QMatmulMethod::GemvIgmma => true,
            _ => false,
        }
    }

    /// The pre-pass buffers of a configuration that [`Self::uses_digits`], for up to `max_m`
    /// rows of a `k`-row weight: `(digits bytes, side f32s)`, `digits [2 mp, k]` and `side
    /// [k / group, mp, 2]` with `mp = cdiv(max_m, 32) · 32`; `(0, 0)` for every other
    /// configuration. Errors name `m` (a size past what the kernels index) or `k`.
    pub fn digit_buffers(&self, max_m: usize, k: usize) -> Result<(usize, usize), QMatmulError> {
        if !self.uses_digits() {
            return Ok((0, 0));
        }
        let g = self.group_size(k);
        if g == 0 || !k.is_multiple_of(g) {
            return Err(shape_err(
                "k",
                format!("{k} is not a multiple of the group size {g}"),
            ));
        }
        let mp = max_m.div_ceil(32).saturating_mul(32);
        let digits = size_product("m", &[("digit rows", mp), ("twice", 2), ("k", k)])?;
        let side = size_product("m", &[("groups", k / g), ("m", mp), ("pair", 2)])?;
        if digits > i32::MAX as usize || side > i32::MAX as usize {
            return Err(shape_err(
                "m",
                format!(
                    "{max_m} rows of {k} activations make {digits} digits, more than the \
                     2^31 - 1 elements the kernels index"
                ),
            ));
        }
        Ok((digits, side))
    }

    /// Rows per scale group for a weight with `k` rows.
    pub fn group_size(&self, k: usize) -> usize {
        self.group_rows.unwrap_or(k)
    }

    /// The byte-count floor of one matmul: every weight byte, scale, zero point, activation and
    /// output element moved once (the split-k workspace not counted). A kernel's bandwidth
    /// efficiency is this over (time x peak bandwidth).
    ///
    /// Saturates at `usize::MAX` for sizes no machine holds (it is a statistic, not a length).
    pub fn byte_floor(&self, m: usize, n: usize, k: usize) -> usize {
        let a = self.adtype.bits() as usize / 8;
        let groups = k / self.group_size(k).max(1);
        let per_group = if self.has_zeros { 2 } else { 1 };
        let mul = |f: &[usize]| f.iter().fold(1usize, |p, &v| p.saturating_mul(v));
        [
            mul(&[k, n, self.wdtype.bits() as usize]) / 8,
            mul(&[groups, n, a, per_group]),
            mul(&[m, k, a]),
            mul(&[m, n, a]),
        ]
        .iter()
        .fold(0usize, |s, &v| s.saturating_add(v))
    }
}
