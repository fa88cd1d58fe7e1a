//! [`AptLinear`]: a WxAy linear layer `y[m, n] = x[m, k] · W[k, n]` on the 1-bit tensor cores,
//! weights quantized to `wbits`-bit bipolar-INT per output channel once on the host, activations
//! to `abits` bits per token at every forward (the fused quantize-and-split kernel).
//!
//! ```no_run
//! use half::f16;
//! use tilus::kernels::apt::AptLinear;
//! let (k, n) = (512, 256);
//! let w: Vec<f32> = (0..k * n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
//! let layer = AptLinear::new(&w, k, n, 2, 2, None)?; // W2A2
//! let x = vec![f16::from_f32(0.5); 3 * k];
//! let y = layer.forward_cpu(&x, 3)?; // 3 x 256 f16, on the interpreter
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On the GPU, [`AptLinear::to_gpu`] uploads the planes and [`GpuAptLinear::forward`] runs both
//! kernels on the context's stream.

use super::kernel::{
    apt_gemm, apt_gemm_bgmma, apt_gemm_igmma, apt_gemv, apt_gemv_imma, apt_gemv_popc,
    apt_quantize_act,
};
use super::{check_shape, AptTiles, ImmaTiles, PopcTiles, INTERPRETER_SMS};
use crate::apt::matrix::ScaleRule;
use crate::apt::{AptError, AptMatrix};
use crate::gpu::LaunchOptions;
use half::f16;
use std::sync::{Arc, Mutex};
use tilus_runtime::{Context, DeviceBuffer};

/// Quantized activations on the host: `(planes [abits][m][k / 32], row sums of codes, scales)`.
pub type QuantizedActivations = (Vec<u32>, Vec<i32>, Vec<f32>);

/// The activation quantizer's configuration for `m` rows of `k`: the fewest warps (1, 4, 8 or
/// 16) whose threads hold the whole row (32 elements each), read once; past 16384 elements,
/// 16 warps and two passes. 16 warps only while the rows fit one wave (`m <= 132`): a 16-warp
/// block holds an SM's registers alone, so above that 8 warps and two passes overlap blocks
/// instead (H200, 4096 x 14336: 113 -> 79 us at m = 4096; at m = 64 one pass wins by 1.4 us).
pub fn quantizer_config(m: usize, k: usize, abits: u32) -> apt_quantize_act::Config {
    quantizer_config_for(m, k, abits, false)
}

/// [`quantizer_config`] writing the codes as bytes (`codes`) instead of bit planes.
pub fn quantizer_config_for(
    m: usize,
    k: usize,
    abits: u32,
    codes: bool,
) -> apt_quantize_act::Config {
    let widest = if m <= 132 { 16 } else { 8 };
    let warps = [1, 4, 8, 16]
        .into_iter()
        .filter(|&w| w <= widest)
        .find(|&w| 1024 * w >= k);
    apt_quantize_act::Config {
        ABITS: abits as i32,
        WARPS: warps.unwrap_or(widest) as i32,
        ONE_PASS: warps.is_some() as i32,
        CODES: codes as i32,
    }
}

/// A WxAy layer; see the module documentation.
#[derive(Clone, Debug)]
pub struct AptLinear {
    k: usize,
    n: usize,
    abits: u32,
    /// The weight as `[n, k]`: a row per output channel.
    weight: AptMatrix,
    planes: Vec<u32>,
    sums: Vec<i32>,
}

pub(super) fn kernel_err(e: impl std::fmt::Display) -> AptError {
    AptError::Kernel(e.to_string())
}

fn dim(arg: &'static str, v: usize) -> Result<i32, AptError> {
    i32::try_from(v).map_err(|_| AptError::Overflow {
        reason: format!("{arg} = {v} does not fit an i32"),
    })
}

impl AptLinear {
    /// Quantize row-major `weight[k * n]` (`k` the reduction dimension, as
    /// [`QuantizedLinear`](crate::kernels::linear::QuantizedLinear) takes it) to `wbits`-bit
    /// bipolar-INT with one scale per output channel (the mean `|w|` for 1 bit, `max |w| / (2^b -
    /// 1)` above), for activations of `abits` bits. `group`: `None` or `Some(k)` (per output
    /// channel); the bit-serial kernel applies scales once, after the whole k sum, so smaller
    /// groups are refused. Errors name the argument.
    pub fn new(
        weight: &[f32],
        k: usize,
        n: usize,
        wbits: u32,
        abits: u32,
        group: Option<usize>,
    ) -> Result<AptLinear, AptError> {
        check_shape(n, k, wbits, abits)?;
        if let Some(g) = group.filter(|&g| g != k) {
            return Err(AptError::Group {
                reason: format!(
                    "{g} rows per group; the bit-serial kernel applies one scale per output channel (group = k = {k}, or None)"
                ),
            });
        }
        let len = k.checked_mul(n).ok_or(AptError::Overflow {
            reason: format!("k * n = {k} * {n} overflows usize"),
        })?;
        if weight.len() != len {
            return Err(AptError::Len {
                arg: "weight",
                expected: len,
                got: weight.len(),
            });
        }
        dim("k", k)?;
        dim("n", n)?;
        let mut t = vec![0f32; len];
        for r in 0..k {
            for c in 0..n {
                t[c * k + r] = weight[r * n + c];
            }
        }
        let rule = if wbits == 1 {
            ScaleRule::MeanAbs
        } else {
            ScaleRule::Max
        };
        let weight = AptMatrix::quantize(&t, n, k, wbits, rule).map_err(|e| match e {
            // Report positions in the caller's [k, n] order.
            AptError::NotFinite {
                row, col, value, ..
            } => AptError::NotFinite {
                arg: "weight",
                row: col,
                col: row,
                value,
            },
            e => e,
        })?;
        let planes = weight.planes()?;
        let sums = weight.row_sums();
        Ok(AptLinear {
            k,
            n,
            abits,
            weight,
            planes,
            sums,
        })
    }

    pub fn k(&self) -> usize {
        self.k
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn wbits(&self) -> u32 {
        self.weight.bits()
    }
    pub fn abits(&self) -> u32 {
        self.abits
    }
    /// The quantized weight, `[n, k]`.
    pub fn weight(&self) -> &AptMatrix {
        &self.weight
    }
    /// The weight planes, `[wbits][n][k / 32]`.
    pub fn planes(&self) -> &[u32] {
        &self.planes
    }

    /// The GEMM tiling for `m` tokens.
    pub fn tiles(&self, m: usize) -> AptTiles {
        AptTiles::for_shape(m, self.n, self.k, self.wbits(), self.abits)
    }

    fn check_x(&self, len: usize, m: usize) -> Result<i32, AptError> {
        if m == 0 {
            return Err(AptError::Empty { arg: "m" });
        }
        let want = m.checked_mul(self.k).ok_or(AptError::Overflow {
            reason: format!("m * k = {m} * {} overflows usize", self.k),
        })?;
        if len != want {
            return Err(AptError::Len {
                arg: "x",
                expected: want,
                got: len,
            });
        }
        dim("m", m)
    }

    /// The activations `x[m, k]` quantized as the layer does at each forward, on the
    /// interpreter: `(planes [abits][m][k / 32], row sums, scales)`.
    pub fn quantize_cpu(&self, x: &[f16], m: usize) -> Result<QuantizedActivations, AptError> {
        let mi = self.check_x(x.len(), m)?;
        let mut planes = vec![0u32; self.abits as usize * m * self.k / 32];
        let (mut sums, mut scales) = (vec![0i32; m], vec![0f32; m]);
        apt_quantize_act::interpret(
            &quantizer_config(m, self.k, self.abits),
            mi,
            self.k as i32,
            x,
            &mut planes,
            &mut sums,
            &mut scales,
        )
        .map_err(kernel_err)?;
        Ok((planes, sums, scales))
    }

    /// `y[m, n]` for `x[m, k]` (row-major f16) on the CPU interpreter: the same two kernels as
    /// the GPU. With `acc`, also the exact bipolar products `Σ_k v_a v_w` (i32, `[m, n]`).
    pub fn forward_cpu(&self, x: &[f16], m: usize) -> Result<Vec<f16>, AptError> {
        Ok(self.forward_cpu_acc(x, m)?.0)
    }

    /// [`Self::forward_cpu`] and the exact integer products before the scales, on the kernels
    /// the GPU runs ([`Self::path`]).
    pub fn forward_cpu_acc(&self, x: &[f16], m: usize) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        self.check_x(x.len(), m)?;
        match self.path(m) {
            AptPath::Popc(tiles) => self.forward_cpu_popc(x, m, Some(tiles), None),
            AptPath::Imma(tiles) => self.forward_cpu_imma(x, m, Some(tiles)),
            AptPath::Fused => {
                let cfg = self
                    .gemv_config(m, true)
                    .expect("the fused path has a config");
                self.forward_cpu_fused(x, m, cfg)
            }
            AptPath::Unfused => self.forward_cpu_unfused(x, m),
            AptPath::Igmma(cfg) => self.forward_cpu_igmma(x, m, cfg),
            AptPath::Bgmma(cfg) => self.forward_cpu_bgmma(x, m, cfg),
        }
    }

    /// [`Self::forward_cpu_acc`] through the quantizer and [`apt_gemm_bgmma`] in configuration
    /// `cfg` (its `STORE_ACC` is set here), whatever `m`.
    pub fn forward_cpu_bgmma(
        &self,
        x: &[f16],
        m: usize,
        cfg: apt_gemm_bgmma::Config,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        let (planes, sums, scales) = self.quantize_cpu(x, m)?;
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        apt_gemm_bgmma::interpret(
            &apt_gemm_bgmma::Config {
                STORE_ACC: 1,
                ..cfg
            },
            mi,
            self.n as i32,
            self.k as i32,
            &planes,
            &self.planes,
            &sums,
            &scales,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// [`Self::forward_cpu_acc`] through the quantizer writing codes and [`apt_gemm_igmma`] in
    /// configuration `cfg` (its `STORE_ACC` is set here), whatever `m`.
    pub fn forward_cpu_igmma(
        &self,
        x: &[f16],
        m: usize,
        cfg: apt_gemm_igmma::Config,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        let mut codes = vec![0u32; m * self.k / 4];
        let (mut sums, mut scales) = (vec![0i32; m], vec![0f32; m]);
        apt_quantize_act::interpret(
            &quantizer_config_for(m, self.k, self.abits, true),
            mi,
            self.k as i32,
            x,
            &mut codes,
            &mut sums,
            &mut scales,
        )
        .map_err(kernel_err)?;
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        apt_gemm_igmma::interpret(
            &apt_gemm_igmma::Config {
                STORE_ACC: 1,
                ..cfg
            },
            mi,
            self.n as i32,
            self.k as i32,
            &codes,
            self.weight.codes(),
            &sums,
            &scales,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// The fused decode kernel ([`apt_gemv`]) in configuration `cfg` on the interpreter (tests
    /// compare split counts and stages): `y` and the exact products.
    pub fn forward_cpu_fused(
        &self,
        x: &[f16],
        m: usize,
        cfg: apt_gemv::Config,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        check_split(&cfg, self.k)?;
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        let (workspace, semaphores) = split_buffers_len(&cfg, m, self.n);
        let mut workspace = vec![0i32; workspace];
        let mut semaphores = vec![0i32; semaphores];
        apt_gemv::interpret(
            &cfg,
            mi,
            self.n as i32,
            self.k as i32,
            x,
            &self.planes,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
            &mut workspace,
            &mut semaphores,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// The popc decode kernel ([`apt_gemv_popc`]) on the interpreter, with `tiles` (the
    /// layer's, [`Self::popc_tiles`], when `None`) and `blocks` walking the row groups (those
    /// of a [`INTERPRETER_SMS`]-SM GPU when `None`): `y` and the exact products.
    pub fn forward_cpu_popc(
        &self,
        x: &[f16],
        m: usize,
        tiles: Option<PopcTiles>,
        blocks: Option<usize>,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        let tiles = tiles.unwrap_or_else(|| self.popc_tiles());
        let cfg = tiles.config(self.k, self.wbits(), self.abits, true)?;
        let blocks = match blocks {
            Some(0) => return Err(AptError::Empty { arg: "blocks" }),
            Some(b) => dim("blocks", b)?,
            None => tiles.blocks(self.n, INTERPRETER_SMS),
        };
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        apt_gemv_popc::interpret(
            &cfg,
            mi,
            self.n as i32,
            self.k as i32,
            blocks,
            x,
            &self.planes,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// The popc decode kernel's tiles for this layer.
    pub fn popc_tiles(&self) -> PopcTiles {
        PopcTiles::for_shape(self.n, self.k, self.wbits())
    }

    /// The integer-mma decode kernel's tiles for this layer ([`ImmaTiles::for_layer`]), `None`
    /// where it does not serve the shape or widths.
    pub fn imma_tiles(&self) -> Option<ImmaTiles> {
        ImmaTiles::for_layer(self.n, self.k, self.wbits(), self.abits)
    }

    /// The integer-mma decode kernel's tiles where [`Self::path`] gives it one token: the
    /// rule's tiles where they fill the machine with blocks of at least 256 channels (k split
    /// into slices where the blocks alone do not), for 3- and 4-bit weights, and for 2-bit
    /// weights on `k` of at least [`IMMA_W2_MIN_K`]. Measured on an H200 (sessions 54, 56 and
    /// 57, `tilus bench apt --m 1`) against the popc kernel: W3A4 57344 x 8192 (448 channels)
    /// 46.3 against 53.3 us, 8192 x 28672 (256, 4 slices) 27.0 against 30.8, 10240 x 8192 (256,
    /// 3) 15.0 against 16.5, 8192 x 8192 (256, 4) 13.4 against 13.5, 14336 x 4096 (448, 4) 12.1
    /// against 14.5, 4096 x 14336 (256, 7) 13.4 against 13.8; W4A4 on the four Llama-70B
    /// layers 58.4, 33.3, 16.1 and 14.1 against 69.6, 40.9, 21.5 and 17.4.
    pub fn imma_decode_tiles(&self) -> Option<ImmaTiles> {
        imma_decode_rule(self.n, self.k, self.wbits(), self.abits)
    }

    /// `tiles`, or the layer's rule when `None`; refused, naming `tiles`, where no rule serves.
    fn imma_tiles_or(&self, tiles: Option<ImmaTiles>) -> Result<ImmaTiles, AptError> {
        tiles.or_else(|| self.imma_tiles()).ok_or_else(|| {
            AptError::Kernel(format!(
                "argument `tiles`: no integer-mma tiling serves {} x {} W{}A{}",
                self.n,
                self.k,
                self.wbits(),
                self.abits
            ))
        })
    }

    /// The weight's codes in [`apt_gemv_imma`]'s byte layout for `tiles`.
    pub fn imma_bytes(&self, tiles: &ImmaTiles) -> Result<Vec<u8>, AptError> {
        tiles.config(self.n, self.k, self.wbits(), self.abits, false)?;
        tiles.relayout(self.weight.codes(), self.n, self.k, self.wbits())
    }

    /// The integer-mma decode kernel ([`apt_gemv_imma`]) on the interpreter, with `tiles` (the
    /// layer's, [`Self::imma_tiles`], when `None`): `y` and the exact products, the same as
    /// every other path's.
    pub fn forward_cpu_imma(
        &self,
        x: &[f16],
        m: usize,
        tiles: Option<ImmaTiles>,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        let tiles = self.imma_tiles_or(tiles)?;
        let cfg = tiles.config(self.n, self.k, self.wbits(), self.abits, true)?;
        let bytes = self.imma_bytes(&tiles)?;
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        let (ws_len, sem_len) = tiles.split_buffers_len(m, self.n);
        let (mut workspace, mut semaphores) = (vec![0i32; ws_len], vec![0i32; sem_len]);
        apt_gemv_imma::interpret(
            &cfg,
            mi,
            self.n as i32,
            self.k as i32,
            x,
            &bytes,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
            &mut workspace,
            &mut semaphores,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// [`Self::forward_cpu_acc`] through the quantizer and [`apt_gemm`] whatever `m` (the
    /// unfused path, for tests).
    pub fn forward_cpu_unfused(
        &self,
        x: &[f16],
        m: usize,
    ) -> Result<(Vec<f16>, Vec<i32>), AptError> {
        let mi = self.check_x(x.len(), m)?;
        let (planes, sums, scales) = self.quantize_cpu(x, m)?;
        let cfg = self.tiles(m).config(self.wbits(), self.abits, true);
        let mut y = vec![f16::ZERO; m * self.n];
        let mut acc = vec![0i32; m * self.n];
        apt_gemm::interpret(
            &cfg,
            mi,
            self.n as i32,
            self.k as i32,
            &planes,
            &self.planes,
            &sums,
            &scales,
            &self.sums,
            self.weight.scales(),
            &mut y,
            &mut acc,
        )
        .map_err(kernel_err)?;
        Ok((y, acc))
    }

    /// How the layer runs a forward of `m` tokens ([`AptPath`]): the popc decode kernel for one
    /// token, else the quantizer and the GEMM. The fused decode kernel
    /// ([`GpuAptLinear::forward_fused`]) repeats the quantization of every token in every block:
    /// at 16 tokens it measured 51.2 us against the two launches' 15.1 (W2A2, 14336 x 4096) and
    /// 1076 against 33.2 (W3A4, 4096 x 14336) on an H200, so the layer no longer takes it.
    ///
    /// From [`IGMMA_MIN_M`] tokens on, for more than [`BGMMA_MAX_PAIRS`] plane pairs, when `k`
    /// is a multiple of 16 and the product makes at
    /// least [`IGMMA_MIN_BLOCKS`] blocks of [`Self::igmma_config`]'s tiles, the codes multiply
    /// on the integer warpgroup MMA instead ([`AptPath::Igmma`], sm_90a); from 2 tokens
    /// otherwise, the planes on the 1-bit warpgroup MMA ([`AptPath::Bgmma`], sm_90a): with the
    /// quantizer, faster than the 1-bit `mma.sync` GEMM on 48 of the 51 points of the paper's
    /// shapes at 16, 64 and 256 tokens that the integer MMA does not take (H200, session 33,
    /// best of three tilings; the other three within 1.3 us). One token takes the popc kernel
    /// (one launch) on every layer: sessions 36 to 50 gave the mid-size layers (8192 to 16384
    /// outputs, at most 8192 inputs, at most 4 plane pairs) to the 1-bit warpgroup MMA, 4-15%
    /// faster then; since the popc kernel's prologue loads its token in one round trip (session
    /// 51, H200, `tilus bench apt --m 1`, us, popc against the quantizer and the bgmma GEMM) it
    /// wins or ties there: W2A2 8192 x 8192 10.8 against 12.3, 10240 x 8192 13.1 / 13.4,
    /// 14336 x 4096 11.0 / 11.0, 16384 x 4096 10.8 / 11.3; W1A2 8.9 / 10.0, 10.5 / 10.7,
    /// 9.2 / 9.1, 9.2 / 9.9; W1A4 9.7 / 12.5, 11.6 / 13.2, 10.1 / 10.3, 10.1 / 11.5.
    /// One token of 3-bit weights takes the integer-mma decode kernel instead where its rule
    /// gives a wave of 448-channel blocks over all of k ([`Self::imma_decode_tiles`]).
    /// [`GpuAptLinear::forward`] takes [`Self::portable_path`] on a device without the
    /// warpgroup MMA.
    pub fn path(&self, m: usize) -> AptPath {
        let cfg = self.igmma_config(m, false);
        let blocks = m.div_ceil(cfg.BM as usize) * self.n.div_ceil(cfg.BN as usize);
        if m == 1 {
            one_token_rule(self.n, self.k, self.wbits(), self.abits).into()
        } else if m >= IGMMA_MIN_M
            && (self.wbits() * self.abits) as usize > BGMMA_MAX_PAIRS
            && self.k.is_multiple_of(16)
            && blocks >= IGMMA_MIN_BLOCKS
        {
            AptPath::Igmma(cfg)
        } else {
            AptPath::Bgmma(self.bgmma_config(m, false))
        }
    }

    /// [`Self::path`] on a device without the warpgroup MMA (below sm_90a): the popc decode
    /// kernel for one token, else the quantizer and the 1-bit `mma.sync` GEMM.
    pub fn portable_path(&self, m: usize) -> AptPath {
        if m == 1 {
            AptPath::Popc(self.popc_tiles())
        } else {
            AptPath::Unfused
        }
    }

    /// The configuration of [`apt_gemm_igmma`] for `m` tokens: two warpgroups of 64 rows (one
    /// below 128 tokens) and 256-column blocks, or 128-column ones where 256 would make fewer
    /// than [`IGMMA_MIN_BLOCKS`] blocks (H200, session 32: 8192 x 8192 at 256 tokens 40.6 us
    /// against 54.6, 2048 x 2048 at 1024 tokens 22.7 against 27.1).
    pub fn igmma_config(&self, m: usize, store_acc: bool) -> apt_gemm_igmma::Config {
        let bm = if m >= 128 { 128 } else { 64 };
        let wide = m.div_ceil(bm) * self.n.div_ceil(256) >= IGMMA_MIN_BLOCKS;
        apt_gemm_igmma::Config {
            WBITS: self.wbits() as i32,
            ABITS: self.abits as i32,
            BM: bm as i32,
            BN: if wide { 256 } else { 128 },
            STAGES: 4,
            GROUP: 8,
            STORE_ACC: store_acc as i32,
        }
    }

    /// Whether `path` is a GEMM this layer takes for `m` tokens (`m >= 2`): the 1-bit
    /// warpgroup MMA in tiles [`Self::bgmma_tiles`] gives (at most its ring stages, the outputs
    /// stored by the threads or in [`bgmma_store_box`]'s boxes), or the integer warpgroup MMA
    /// ([`Self::igmma_config`] with 64 or 128 rows and 128 or 256 columns, `k` a multiple of
    /// 16); errors name `m` or `path`.
    pub fn check_batch_path(&self, m: usize, path: &AptPath) -> Result<(), AptError> {
        if m < 2 {
            return Err(AptError::Kernel(format!(
                "argument `m`: {m} tokens; a batch path serves 2 or more (one token's kernel is set by `with_decode`)"
            )));
        }
        let bad = |why: String| Err(AptError::Kernel(format!("argument `path`: {path:?} {why}")));
        let (wbits, abits) = (self.wbits() as i32, self.abits as i32);
        match *path {
            AptPath::Bgmma(cfg) => {
                if (cfg.WBITS, cfg.ABITS) != (wbits, abits) {
                    return bad(format!("is not for W{wbits}A{abits}"));
                }
                let Some(tiles) = self.bgmma_tiles(cfg.BM, cfg.BN, cfg.WGN, false) else {
                    return bad("is a tiling the 1-bit warpgroup GEMM does not take".into());
                };
                let stores = [0, bgmma_store_box(&tiles)];
                if !(2..=tiles.STAGES).contains(&cfg.STAGES)
                    || cfg.GROUP != tiles.GROUP
                    || cfg.STORE_ACC != 0
                    || !stores.contains(&cfg.STORE_BOX)
                {
                    return bad(format!(
                        "asks for 2 to {} stages, group {}, no accumulators and store boxes of {stores:?}",
                        tiles.STAGES, tiles.GROUP
                    ));
                }
                Ok(())
            }
            AptPath::Igmma(cfg) => {
                let rule = self.igmma_config(m, false);
                let takes = apt_gemm_igmma::Config {
                    BM: cfg.BM,
                    BN: cfg.BN,
                    ..rule
                };
                if !self.k.is_multiple_of(16) {
                    bad(format!("needs k a multiple of 16, not {}", self.k))
                } else if cfg != takes
                    || ![64, 128].contains(&cfg.BM)
                    || ![128, 256].contains(&cfg.BN)
                {
                    bad(format!(
                        "is not {rule:?} with 64 or 128 rows and 128 or 256 columns"
                    ))
                } else {
                    Ok(())
                }
            }
            _ => bad("is not a GEMM on a warpgroup MMA (Bgmma or Igmma)".into()),
        }
    }

    /// The configuration of [`apt_gemm_bgmma`] for `m` tokens. A warpgroup holds
    /// `ABITS · WBITS · c / 2` accumulators for `c` columns per plane. Blocks of 64 rows and two
    /// warpgroups along `n` (each `c` columns of every plane) where they are many: `c` of 192
    /// accumulators ([`Self::bgmma_columns`]`(192)`, 32 for W3A4) where that makes at least
    /// `2 ·` [`BGMMA_WIDE_BLOCKS`] blocks, else `c` of 128 (128 for W1A2, 64 for W2A2, 16 for
    /// W3A4) where that makes [`BGMMA_WIDE_BLOCKS`]; for one token, two warpgroups of half
    /// that where those make [`BGMMA_WIDE_BLOCKS`]; else one warpgroup of half the 128-register
    /// columns (at least 8) and 64 rows, or 128 from 128 tokens (more blocks for narrow layers).
    /// One token of W1A2 (H200, session 36, quantizer included): two warpgroups of 64 columns
    /// 8.8 us at 14336 x 4096, 10.7 at 10240 x 8192 and 10.2 at 8192 x 8192 against 9.6, 13.3
    /// and 11.3 with one of 64 (and the popc kernel's 10.3, 12.2, 10.8).
    /// Measured on an H200 (session 33, `tilus bench apt`, the quantizer included): W2A2 at 64
    /// tokens 14336 x 4096 15.6 us with two warpgroups of 64 against 16.8 with one of 64;
    /// 4096 x 14336 16.9 with one of 32 against 17.6 (64) and 21.6 (two of 64, 32 blocks); W3A4
    /// at 16 tokens 57344 x 8192 90.3 with two of 32 (896 blocks) against 131.0 with two of 16;
    /// W1A2 57344 x 8192 31.4 with two of 128 against 36.0 with two of 64.
    pub fn bgmma_config(&self, m: usize, store_acc: bool) -> apt_gemm_bgmma::Config {
        let rows = m.div_ceil(64);
        let blocks = |c: usize| rows * self.n.div_ceil(2 * c);
        let (c, c_wide) = (self.bgmma_columns(128), self.bgmma_columns(192));
        let (bm, bn, wgn): (i32, usize, i32) =
            if c_wide > c && blocks(c_wide) >= 2 * BGMMA_WIDE_BLOCKS {
                (64, 2 * c_wide, 2)
            } else if blocks(c) >= BGMMA_WIDE_BLOCKS {
                (64, 2 * c, 2)
            } else if m == 1 && c >= 16 && blocks(c / 2) >= BGMMA_WIDE_BLOCKS {
                (64, c, 2)
            } else {
                (if m >= 128 { 128 } else { 64 }, (c / 2).max(8), 1)
            };
        let cfg = self
            .bgmma_tiles(bm, bn as i32, wgn, store_acc)
            .or_else(|| self.bgmma_tiles(64, bn as i32, wgn, store_acc))
            .expect("64 rows of 8 planes and 256 columns of 8 fit two stages");
        self.bgmma_store(cfg, m)
    }

    /// The columns per plane whose accumulators fill at most `registers` of a warpgroup's
    /// threads: `2 · registers / (ABITS · WBITS)` rounded down to a power of two, 8 to 128.
    pub fn bgmma_columns(&self, registers: usize) -> usize {
        let pairs = self.wbits() as usize * self.abits as usize;
        1 << (2 * registers / pairs).clamp(8, 128).ilog2()
    }

    /// [`apt_gemm_bgmma`] with `bm` rows and `bn` columns per plane per block (split between
    /// `wgn` warpgroups), and as many ring stages (2 to 4) as fit [`BGMMA_RING_BYTES`] (a stage
    /// holds `ABITS · bm + WBITS · bn` rows of 128 bytes); `None` where two do not, where a
    /// thread would hold more than 192 accumulators (`ABITS · WBITS · bn / wgn / 2`; the
    /// widest that compiled without spills), or where the block would have more than two
    /// warpgroups (at 512 threads a thread has 128 registers, fewer than the accumulators and
    /// the wgmma pipeline need: ptxas serializes). The threads store the outputs (`STORE_BOX =
    /// 0`; [`Self::bgmma_store`] gives them to the copy engine).
    pub fn bgmma_tiles(
        &self,
        bm: i32,
        bn: i32,
        wgn: i32,
        store_acc: bool,
    ) -> Option<apt_gemm_bgmma::Config> {
        let rows = self.abits as usize * bm as usize + self.wbits() as usize * bn as usize;
        let stages = BGMMA_RING_BYTES / (rows * 128);
        let groups = bm / 64 * wgn;
        let pairs = self.abits as i32 * self.wbits() as i32;
        let fits = wgn >= 1 && pairs * bn / wgn / 2 <= 192;
        (stages >= 2 && bn % (8 * wgn) == 0 && groups <= 2 && fits).then_some(
            apt_gemm_bgmma::Config {
                WBITS: self.wbits() as i32,
                ABITS: self.abits as i32,
                BM: bm,
                BN: bn,
                WGN: wgn,
                STAGES: stages.min(4) as i32,
                GROUP: 8,
                STORE_ACC: store_acc as i32,
                STORE_BOX: 0,
            },
        )
    }

    /// `cfg` with the outputs of `m` tokens stored by the copy engine where that measured
    /// faster: from [`BGMMA_STORE_MIN_M`] tokens and 4 plane pairs, in boxes of up to 64
    /// columns (128 bytes, the widest swizzle) where a warpgroup has at least 16 columns;
    /// otherwise unchanged. (A layer's `n` is a multiple of 8, so `y`'s rows are whole 16-byte
    /// units, as tensor maps need.)
    ///
    /// H200, session 37, the layer with the quantizer, the copy engine's stores against the
    /// threads' in the same run: W2A2 at 64 tokens no slower on the six paper shapes (14336 x
    /// 4096 12.6 against 12.8 us, 11.5 against 11.8 in another run; 4096 x 14336 13.8 / 14.2;
    /// 4096 x 4096 8.7 / 9.0; the three smallest equal); W1A2 (2 pairs) faster only at
    /// 14336 x 4096 (9.8 / 10.1) and 0.2 to 0.6 us slower on the other five; one token 0.8 to
    /// 1.2 us slower on the six mid-size layers one token then ran on this GEMM (W2A2 14336 x
    /// 4096 12.1 against 10.9), where 63 of a box's 64 rows are padding the threads never store.
    pub fn bgmma_store(&self, cfg: apt_gemm_bgmma::Config, m: usize) -> apt_gemm_bgmma::Config {
        let pairs = cfg.WBITS * cfg.ABITS;
        apt_gemm_bgmma::Config {
            STORE_BOX: if m >= BGMMA_STORE_MIN_M && pairs >= 4 {
                bgmma_store_box(&cfg)
            } else {
                0
            },
            ..cfg
        }
    }

    /// The fused decode configuration for `m` tokens, if the layer runs one.
    pub fn gemv_config(&self, m: usize, store_acc: bool) -> Option<apt_gemv::Config> {
        if m > 16 {
            return None;
        }
        self.tiles(m)
            .gemv_config((m, self.n, self.k), self.wbits(), self.abits, store_acc)
    }

    /// This layer on `ctx`'s GPU: uploads the weight planes, row sums and scales.
    pub fn to_gpu(&self, ctx: &Arc<Context>) -> Result<GpuAptLinear, AptError> {
        Ok(GpuAptLinear {
            ctx: ctx.clone(),
            planes: DeviceBuffer::from_host(ctx, &self.planes).map_err(kernel_err)?,
            sums: DeviceBuffer::from_host(ctx, &self.sums).map_err(kernel_err)?,
            scales: DeviceBuffer::from_host(ctx, self.weight.scales()).map_err(kernel_err)?,
            host: self.clone(),
            unused: Mutex::new(DeviceBuffer::zeros(ctx, 1).map_err(kernel_err)?),
            split: Mutex::default(),
            activations: Mutex::default(),
            codes: std::sync::OnceLock::new(),
            decode: None,
            imma: Mutex::new(None),
            batched: Vec::new(),
        })
    }
}

/// The activation planes (or codes), sums and scales of one forward (kept by the caller to
/// reuse).
pub struct AptActivations {
    /// `[abits][m][k / 32]` bit planes, or with `codes` the `[m, k]` code bytes in words.
    pub planes: DeviceBuffer<u32>,
    pub sums: DeviceBuffer<i32>,
    pub scales: DeviceBuffer<f32>,
    m: usize,
    codes: bool,
}

impl AptActivations {
    /// Buffers for `m` tokens of `layer`'s input as bit planes.
    pub fn new(layer: &GpuAptLinear, m: usize) -> Result<AptActivations, AptError> {
        Self::with_codes(layer, m, false)
    }

    /// Buffers for `m` tokens, as bit planes or (`codes`) as a code byte per element, for
    /// [`GpuAptLinear::gemm_igmma_into`].
    pub fn with_codes(
        layer: &GpuAptLinear,
        m: usize,
        codes: bool,
    ) -> Result<AptActivations, AptError> {
        let ctx = &layer.ctx;
        let words = Self::words(&layer.host, m, codes)?;
        Ok(AptActivations {
            planes: DeviceBuffer::zeros(ctx, words).map_err(kernel_err)?,
            sums: DeviceBuffer::zeros(ctx, m).map_err(kernel_err)?,
            scales: DeviceBuffer::zeros(ctx, m).map_err(kernel_err)?,
            m,
            codes,
        })
    }

    /// Words of the planes (or code bytes) of `m` tokens of `layer`'s input.
    fn words(layer: &AptLinear, m: usize, codes: bool) -> Result<usize, AptError> {
        let bits = if codes { 8 } else { layer.abits as usize };
        Ok(m.checked_mul(layer.k)
            .and_then(|e| e.checked_mul(bits))
            .ok_or(AptError::Overflow {
                reason: format!("m * k = {m} * {} overflows usize", layer.k),
            })?
            / 32)
    }
}

/// [`GpuAptLinear::forward_into`]'s activation buffers, kept between calls: each made by the
/// first forward that needs it and grown by one that needs more
/// ([`DeviceBuffer::grow_zeroed`]), so forwards of up to that many tokens allocate nothing.
#[derive(Default)]
struct ActivationScratch {
    planes: Option<DeviceBuffer<u32>>,
    sums: Option<DeviceBuffer<i32>>,
    scales: Option<DeviceBuffer<f32>>,
}

/// [`AptLinear`] on a GPU.
pub struct GpuAptLinear {
    ctx: Arc<Context>,
    planes: DeviceBuffer<u32>,
    sums: DeviceBuffer<i32>,
    scales: DeviceBuffer<f32>,
    host: AptLinear,
    /// One element, for the parameters a launch does not read.
    unused: Mutex<DeviceBuffer<i32>>,
    /// The split-k partials and semaphores of the kernels that split k (the fused and the
    /// integer-mma decode kernels; the semaphores zero between launches), grown on demand.
    split: Mutex<SplitBuffers>,
    /// The quantized activations of the two-launch paths, grown on demand.
    activations: Mutex<ActivationScratch>,
    /// The weight's codes, a byte each (`[n, k]`), for [`AptPath::Igmma`]: uploaded by its first
    /// forward (`n · k` bytes next to the planes' `n · k · wbits / 8`).
    codes: std::sync::OnceLock<DeviceBuffer<u8>>,
    /// The one-token kernel and tiles when set ([`Self::with_decode`], e.g. by
    /// [`super::tune::tune`]); the host layer's rule otherwise.
    decode: Option<DecodeTiles>,
    /// The weight's codes in the integer-mma decode kernel's byte layout for the tiles beside
    /// them ([`Self::forward_imma`]): uploaded by its first launch in those tiles (`n · k ·
    /// wbits / 8` bytes next to the planes).
    imma: Mutex<Option<(ImmaTiles, Arc<DeviceBuffer<u8>>)>>,
    /// The multi-token GEMMs set by [`Self::with_batch`] (e.g. [`super::tune::tune_batch`]'s
    /// winners), each for the token counts of one bucket ([`batch_bucket`]); the host layer's
    /// rule for the others.
    batched: Vec<(usize, AptPath)>,
}

/// The bucket of `m` tokens whose multi-token GEMM [`GpuAptLinear::with_batch`] sets and
/// [`super::tune::tune_batch`] remembers: `m` rounded up to a power of two, so that the tiles
/// tuned at 64 tokens serve 33 to 64 (the grid's rows of 64 or 128 tokens change only there).
pub fn batch_bucket(m: usize) -> usize {
    m.next_power_of_two()
}

/// Grown on demand ([`DeviceBuffer::grow_zeroed`]); `None` until a split first needs them.
#[derive(Default)]
struct SplitBuffers {
    workspace: Option<DeviceBuffer<i32>>,
    semaphores: Option<DeviceBuffer<i32>>,
}

/// How [`AptLinear`] runs a forward ([`AptLinear::path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AptPath {
    /// The popc decode kernel ([`apt_gemv_popc`]): one launch, the plane pairs counted on the
    /// CUDA cores.
    Popc(PopcTiles),
    /// The integer-mma decode kernel ([`apt_gemv_imma`]): one launch, a weight code times an
    /// activation code on `mma.m16n8k32 .u8.s8` (sm_80 on; the layer's rule was measured on
    /// sm_90a and takes it there).
    Imma(ImmaTiles),
    /// The fused decode kernel on the 1-bit mma ([`apt_gemv`]): one launch. Not the layer's
    /// choice since session 20 (slower than two launches from 16 tokens); kept for
    /// [`GpuAptLinear::forward_fused`] and the bench.
    Fused,
    /// The activation quantizer and the GEMM ([`apt_gemm`]): two launches.
    Unfused,
    /// The quantizer writing code bytes and the GEMM of the codes on the integer warpgroup MMA
    /// ([`apt_gemm_igmma`], sm_90a): two launches, for large `m` ([`IGMMA_MIN_M`]).
    Igmma(apt_gemm_igmma::Config),
    /// The quantizer and the GEMM of the planes on the 1-bit warpgroup MMA
    /// ([`apt_gemm_bgmma`], sm_90a): two launches.
    Bgmma(apt_gemm_bgmma::Config),
}

/// A one-token kernel and its tiles: [`AptLinear::path`]'s rule at `m = 1`
/// ([`one_token_rule`]), or what [`GpuAptLinear::with_decode`] sets (the one-token tuner's
/// choice, [`super::tune::tune`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeTiles {
    /// The popc decode kernel ([`apt_gemv_popc`]).
    Popc(PopcTiles),
    /// The integer-mma decode kernel ([`apt_gemv_imma`]).
    Imma(ImmaTiles),
}

impl From<DecodeTiles> for AptPath {
    fn from(t: DecodeTiles) -> AptPath {
        match t {
            DecodeTiles::Popc(t) => AptPath::Popc(t),
            DecodeTiles::Imma(t) => AptPath::Imma(t),
        }
    }
}

/// The shortest `k` on which [`AptLinear::path`] gives 2-bit weights the integer-mma decode
/// kernel at one token. Measured on an H200 (session 56, W2A2 in the rule's tiles against the
/// popc kernel): 8192 x 28672 won (256 x 4 slices, 21.1 against 23.2 us); 10240 x 8192, 8192 x
/// 8192 and 57344 x 8192 lost (12.3 against 11.0, 11.1 against 9.3, 32.6 against 31.9), and in
/// session 57 4096 x 14336 (256 x 7 slices, 12.1 against 10.8). Between 14336 and 28672 the
/// crossing is not measured.
pub const IMMA_W2_MIN_K: usize = 16384;

/// [`AptLinear::imma_decode_tiles`] for an `n x k` layer of these widths: the rule's tiles
/// ([`ImmaTiles::for_layer`]) where they fill the machine with blocks of at least 256 channels
/// ([`ImmaTiles::fills`]; the fallback of 64-channel blocks lost by 10-45%, session 54), for 3-
/// and 4-bit weights and for 2-bit weights on `k` of at least [`IMMA_W2_MIN_K`]. 1-bit weights
/// stay on popc (session 57, W1A2: 12.0 against 9.3 us at 10240 x 8192, 24.8 against 20.6 at
/// 57344 x 8192); 5-bit weights are not measured.
fn imma_decode_rule(n: usize, k: usize, wbits: u32, abits: u32) -> Option<ImmaTiles> {
    ImmaTiles::for_layer(n, k, wbits, abits).filter(|t| {
        let width = matches!(wbits, 3 | 4) || (wbits == 2 && k >= IMMA_W2_MIN_K);
        t.fills(n) && t.bn >= 256 && width
    })
}

/// The one-token kernel [`AptLinear::path`] takes for an `n x k` layer of these widths on
/// sm_90a: the integer-mma kernel where [`AptLinear::imma_decode_tiles`] serves, else the popc
/// kernel in its rule's tiles.
pub fn one_token_rule(n: usize, k: usize, wbits: u32, abits: u32) -> DecodeTiles {
    match imma_decode_rule(n, k, wbits, abits) {
        Some(t) => DecodeTiles::Imma(t),
        None => DecodeTiles::Popc(PopcTiles::for_shape(n, k, wbits)),
    }
}

/// The fewest tokens [`AptLinear::path`] multiplies on the integer warpgroup MMA. Measured on an
/// H200 (session 32, docs/apt.md): at 64 tokens the 1-bit GEMM won on every paper shape
/// (W2A2 14336 x 4096: 18.9 against 27.8 us).
pub const IGMMA_MIN_M: usize = 256;

/// The fewest blocks of outputs for which [`AptLinear::path`] takes the integer warpgroup MMA
/// (and [`AptLinear::igmma_config`] 256-column blocks rather than 128): a block walks all of
/// `k`, so fewer blocks than about 0.6 of the 132 multiprocessors leave tensor cores idle where
/// the 1-bit GEMM's smaller tiles fill them. Measured on an H200 (session 32, W2A2): 80 blocks
/// of 128 x 256 won (10240 x 8192 at 256 tokens, 54.6 against 65.8 us), 64 lost (8192 x 8192 at
/// 256 tokens, 54.6 against 46.6) where 128 of 128 x 128 won (40.6); 64 of 128 x 128 lost
/// (4096 x 14336 at 256 tokens, 59.3 against 43.2; 1024 x 4096 at 1024, 26.8 against 22.9).
pub const IGMMA_MIN_BLOCKS: usize = 80;

/// The most plane pairs (`WBITS · ABITS`) for which the 1-bit warpgroup MMA keeps a layer of
/// many tokens: with its GEMM launched as the quantizer's dependent it beat the integer MMA at
/// 4096 tokens on 11 of the 12 paper points of W1A2 and W2A2 (H200, session 34: W2A2
/// 14336 x 4096 347.8 us against 390.3, 4096 x 14336 268.4 against 387.6, W1A2 237.1 and 192.2
/// against 389.8 and 388.2; the exception W2A2 1024 x 1024, 25.1 against 24.0), as at 256
/// tokens (session 33). From 8 pairs the `u8` wgmma's one stream wins on rate (1.9 POPS
/// against 15.2 P bit-ops / pairs).
pub const BGMMA_MAX_PAIRS: usize = 4;

/// The `STORE_BOX` with which [`apt_gemm_bgmma`] in `cfg`'s tiles can give its outputs to the
/// copy engine: the widest of 64, 32 and 16 columns (128, 64 and 32 bytes, a swizzle's span)
/// dividing a warpgroup's columns, else 0 (the threads store them).
pub fn bgmma_store_box(cfg: &apt_gemm_bgmma::Config) -> i32 {
    let hn = cfg.BN / cfg.WGN;
    [64, 32, 16].into_iter().find(|b| hn % b == 0).unwrap_or(0)
}

/// The fewest tokens for which [`AptLinear::bgmma_store`] gives the outputs of
/// [`apt_gemm_bgmma`] to the copy engine (measured at 1 and 64 tokens: slower at one).
pub const BGMMA_STORE_MIN_M: usize = 64;

/// The most shared memory [`AptLinear::bgmma_tiles`] gives the ring of planes (of the 227 KB
/// a block may have on sm_90).
pub const BGMMA_RING_BYTES: usize = 192 * 1024;

/// The fewest blocks for which [`AptLinear::bgmma_config`] gives a block two warpgroups along
/// `n`: fewer than about half the multiprocessors leave the weight's stream too narrow (H200,
/// session 33: 4096 x 14336 at 64 tokens, 32 such blocks, 21.6 us against 16.9 with 128
/// blocks of one warpgroup; 10240 x 8192 at 16 tokens, 80 blocks, 16.8 against 19.6).
pub const BGMMA_WIDE_BLOCKS: usize = 64;

/// Check the lengths of an output `y` and, if given, of the products `acc`: `want` each.
fn check_out(y: usize, acc: Option<usize>, want: usize) -> Result<(), AptError> {
    if y != want {
        return Err(AptError::Len {
            arg: "y",
            expected: want,
            got: y,
        });
    }
    match acc {
        Some(a) if a != want => Err(AptError::Len {
            arg: "acc",
            expected: want,
            got: a,
        }),
        _ => Ok(()),
    }
}

/// The fused kernel's k slices: 1 or 4, dividing k's steps of `KT · 256` bits.
fn check_split(cfg: &apt_gemv::Config, k: usize) -> Result<(), AptError> {
    let steps = k / (cfg.KT as usize * 256);
    if ![1, 4].contains(&cfg.SPLIT) || !steps.is_multiple_of(cfg.SPLIT.max(1) as usize) {
        return Err(AptError::Split {
            split: cfg.SPLIT,
            steps,
        });
    }
    Ok(())
}

/// Elements of the fused kernel's `(workspace, semaphores)` for `cfg` on `m x n` (1 each when
/// it does not split).
fn split_buffers_len(cfg: &apt_gemv::Config, m: usize, n: usize) -> (usize, usize) {
    if cfg.SPLIT <= 1 {
        return (1, 1);
    }
    let bn = (cfg.WN * cfg.FN * 8) as usize;
    (cfg.SPLIT as usize * m * n, m.div_ceil(16) * (n / bn))
}

impl GpuAptLinear {
    /// `launch` on the split-k buffers, grown (zeroed) to `ws_len` partials and `sem_len`
    /// semaphores, and locked while it queues: every kernel that splits leaves the semaphores
    /// zero, and the one stream orders the launches that share them.
    fn with_split_buffers<R>(
        &self,
        ws_len: usize,
        sem_len: usize,
        launch: impl FnOnce(&mut DeviceBuffer<i32>, &mut DeviceBuffer<i32>) -> Result<R, AptError>,
    ) -> Result<R, AptError> {
        let mut guard = self.split.lock().unwrap_or_else(|p| p.into_inner());
        let SplitBuffers {
            workspace,
            semaphores,
        } = &mut *guard;
        let workspace =
            DeviceBuffer::grow_zeroed(workspace, &self.ctx, ws_len).map_err(kernel_err)?;
        let semaphores =
            DeviceBuffer::grow_zeroed(semaphores, &self.ctx, sem_len).map_err(kernel_err)?;
        launch(workspace, semaphores)
    }

    /// `f` on the products buffer `acc`, or, when the caller wants none, on the layer's
    /// one-element stand-in (a launch with `STORE_ACC = 0` never writes it).
    fn with_acc<R>(
        &self,
        acc: Option<&mut DeviceBuffer<i32>>,
        f: impl FnOnce(&mut DeviceBuffer<i32>) -> R,
    ) -> R {
        match acc {
            Some(a) => f(a),
            None => f(&mut self.unused.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    pub fn host(&self) -> &AptLinear {
        &self.host
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// `y[m, n]` for `x[m, k]` on the device (f16), on the context's stream, on the layer's
    /// [`AptLinear::path`]: one popc or fused launch for decode sizes, else the quantizer and
    /// the GEMM. Allocates the output; [`Self::forward_into`] does not.
    pub fn forward(&self, x: &DeviceBuffer<f16>, m: usize) -> Result<DeviceBuffer<f16>, AptError> {
        self.host.check_x(x.len(), m)?;
        let mut y = DeviceBuffer::zeros(&self.ctx, m * self.host.n).map_err(kernel_err)?;
        self.forward_into(x, m, &mut y)?;
        Ok(y)
    }

    /// [`Self::forward`] into `y` (`[m, n]`): the quantized activations of the two-launch paths
    /// and the split-k buffers are the layer's own, kept between calls, so once a forward of
    /// `m` tokens has run, forwards of up to `m` tokens allocate nothing (they can be captured
    /// in a CUDA graph). Errors name `x`, `m` or `y`.
    pub fn forward_into(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
    ) -> Result<(), AptError> {
        self.host.check_x(x.len(), m)?;
        check_out(y.len(), None, m * self.host.n)?;
        match self.path(m) {
            AptPath::Popc(tiles) => self.forward_popc(x, m, y, None, Some(tiles)),
            AptPath::Imma(tiles) => self.forward_imma(x, m, y, None, Some(tiles)),
            AptPath::Fused => self.forward_fused(x, m, y, None),
            AptPath::Igmma(cfg) => self.with_activations(m, true, |act| {
                self.quantize_into(x, act)?;
                self.gemm_igmma_with(act, y, None, cfg, true)
            }),
            AptPath::Bgmma(cfg) => self.with_activations(m, false, |act| {
                self.quantize_into(x, act)?;
                self.gemm_bgmma_with(act, y, None, cfg, true)
            }),
            AptPath::Unfused => self.with_activations(m, false, |act| {
                self.quantize_into(x, act)?;
                self.gemm_into(act, y, None)
            }),
        }
    }

    /// `f` on activation buffers for `m` tokens (bit planes, or with `codes` code bytes): the
    /// layer's own ([`ActivationScratch`]), grown first where they are short, lent for the call
    /// and kept again after it (also when it fails).
    fn with_activations<R>(
        &self,
        m: usize,
        codes: bool,
        f: impl FnOnce(&mut AptActivations) -> Result<R, AptError>,
    ) -> Result<R, AptError> {
        let words = AptActivations::words(&self.host, m, codes)?;
        let mut guard = self.activations.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut *guard;
        DeviceBuffer::grow_zeroed(&mut slot.planes, &self.ctx, words).map_err(kernel_err)?;
        DeviceBuffer::grow_zeroed(&mut slot.sums, &self.ctx, m).map_err(kernel_err)?;
        DeviceBuffer::grow_zeroed(&mut slot.scales, &self.ctx, m).map_err(kernel_err)?;
        let taken = "grown above";
        let mut act = AptActivations {
            planes: slot.planes.take().expect(taken),
            sums: slot.sums.take().expect(taken),
            scales: slot.scales.take().expect(taken),
            m,
            codes,
        };
        let out = f(&mut act);
        (slot.planes, slot.sums, slot.scales) =
            (Some(act.planes), Some(act.sums), Some(act.scales));
        out
    }

    /// The path [`Self::forward`] takes on this device: [`AptLinear::path`] on sm_90a (or the
    /// GEMM [`Self::with_batch`] set for `m`'s bucket), [`AptLinear::portable_path`] where the
    /// warpgroup MMAs are missing; the popc kernel in [`Self::popc_tiles`].
    pub fn path(&self, m: usize) -> AptPath {
        if let (1, Some(t)) = (m, self.decode) {
            return t.into();
        }
        if m > 1 && self.ctx.arch() == "sm_90a" {
            let set = self.batched.iter().find(|(b, _)| *b == batch_bucket(m));
            if let Some(&(_, path)) = set {
                return path;
            }
        }
        match self.host.path(m) {
            AptPath::Igmma(_) | AptPath::Bgmma(_) | AptPath::Imma(_)
                if self.ctx.arch() != "sm_90a" =>
            {
                self.host.portable_path(m)
            }
            AptPath::Popc(_) => AptPath::Popc(self.popc_tiles()),
            path => path,
        }
    }

    /// The popc decode kernel's tiles: those set by [`Self::with_decode`], else the layer's
    /// rule ([`AptLinear::popc_tiles`]).
    pub fn popc_tiles(&self) -> PopcTiles {
        match self.decode {
            Some(DecodeTiles::Popc(t)) => t,
            _ => self.host.popc_tiles(),
        }
    }

    /// This layer with its one token on `tiles`' kernel in those tiles (e.g.
    /// [`super::tune::tune`]'s winner), on any device; refused, naming `tiles`, when the
    /// kernel cannot take them for this layer's shape and widths.
    pub fn with_decode(mut self, tiles: DecodeTiles) -> Result<GpuAptLinear, AptError> {
        let h = &self.host;
        match tiles {
            DecodeTiles::Popc(t) => t.config(h.k, h.wbits(), h.abits, false).map(|_| ())?,
            DecodeTiles::Imma(t) => t.config(h.n, h.k, h.wbits(), h.abits, false).map(|_| ())?,
        }
        self.decode = Some(tiles);
        Ok(self)
    }

    /// This layer with the forwards of `m`'s token bucket ([`batch_bucket`]) on `path` (e.g.
    /// [`super::tune::tune_batch`]'s winner) on sm_90a; other devices keep the portable path.
    /// Refused, naming the argument, for one token (its kernel is [`Self::with_decode`]'s) and
    /// for a GEMM configuration the layer would not take ([`AptLinear::check_batch_path`]).
    pub fn with_batch(mut self, m: usize, path: AptPath) -> Result<GpuAptLinear, AptError> {
        self.host.check_batch_path(m, &path)?;
        let bucket = batch_bucket(m);
        self.batched.retain(|(b, _)| *b != bucket);
        self.batched.push((bucket, path));
        Ok(self)
    }

    /// The integer-mma decode kernel ([`apt_gemv_imma`], any `m`, one block row per token) with
    /// `tiles` (the layer's, [`AptLinear::imma_tiles`], when `None`): `y[m, n]` for `x[m, k]`
    /// in one launch, and with `acc` the exact products. The first launch in a tiling re-lays
    /// the codes out and uploads them (kept for the next launches in the same tiles).
    pub fn forward_imma(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        tiles: Option<ImmaTiles>,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        let tiles = h.imma_tiles_or(tiles)?;
        let cfg = tiles.config(h.n, h.k, h.wbits(), h.abits, acc.is_some())?;
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        // The byte layout does not depend on the split.
        let layout = ImmaTiles { split: 1, ..tiles };
        let bytes = {
            let mut slot = self.imma.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some((t, b)) if *t == layout => b.clone(),
                _ => {
                    let host = h.imma_bytes(&tiles)?;
                    let b =
                        Arc::new(DeviceBuffer::from_host(&self.ctx, &host).map_err(kernel_err)?);
                    *slot = Some((layout, b.clone()));
                    b
                }
            }
        };
        let (ws_len, sem_len) = tiles.split_buffers_len(mi as usize, h.n);
        self.with_split_buffers(ws_len, sem_len, |workspace, semaphores| {
            self.with_acc(acc, |acc| {
                apt_gemv_imma::launch(
                    &self.ctx,
                    &cfg,
                    mi,
                    h.n as i32,
                    h.k as i32,
                    x,
                    &*bytes,
                    &self.sums,
                    &self.scales,
                    y,
                    acc,
                    workspace,
                    semaphores,
                )
            })
            .map_err(kernel_err)
        })
    }

    /// The popc decode kernel ([`apt_gemv_popc`], any `m`, one block row per token) with
    /// `tiles` (the layer's when `None`): `y[m, n]` for `x[m, k]` in one launch, and with `acc`
    /// the exact products.
    pub fn forward_popc(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        tiles: Option<PopcTiles>,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        let tiles = tiles.unwrap_or_else(|| self.popc_tiles());
        let cfg = tiles.config(h.k, h.wbits(), h.abits, acc.is_some())?;
        let blocks = tiles.blocks(h.n, self.ctx.device().multiprocessors as usize);
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        self.with_acc(acc, |acc| {
            apt_gemv_popc::launch(
                &self.ctx,
                &cfg,
                mi,
                h.n as i32,
                h.k as i32,
                blocks,
                x,
                &self.planes,
                &self.sums,
                &self.scales,
                y,
                acc,
            )
        })
        .map_err(kernel_err)
    }

    /// The fused decode kernel ([`apt_gemv`], `m <= 16` and the planes fit shared memory):
    /// `y[m, n]` for `x[m, k]` in one launch, and with `acc` the exact products.
    pub fn forward_fused(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        let cfg = h.gemv_config(m, acc.is_some()).ok_or(AptError::Len {
            arg: "m",
            expected: 16,
            got: m,
        })?;
        self.launch_fused(x, mi, y, acc, cfg)
    }

    /// [`Self::forward_fused`] with `stages` weight stages and `split` k slices instead of the
    /// layer's, each when given (benchmarks; stages 0 or 2..8, split 1 or 4 dividing k's steps).
    pub fn forward_fused_with(
        &self,
        x: &DeviceBuffer<f16>,
        m: usize,
        y: &mut DeviceBuffer<f16>,
        (stages, split): (Option<i32>, Option<i32>),
    ) -> Result<(), AptError> {
        let h = &self.host;
        let mi = h.check_x(x.len(), m)?;
        let cfg = h.gemv_config(m, false).ok_or(AptError::Len {
            arg: "m",
            expected: 16,
            got: m,
        })?;
        let cfg = apt_gemv::Config {
            STAGES: stages.unwrap_or(cfg.STAGES),
            SPLIT: split.unwrap_or(cfg.SPLIT),
            ..cfg
        };
        self.launch_fused(x, mi, y, None, cfg)
    }

    fn launch_fused(
        &self,
        x: &DeviceBuffer<f16>,
        mi: i32,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        cfg: apt_gemv::Config,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let m = mi as usize;
        check_split(&cfg, h.k)?;
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        let (ws_len, sem_len) = split_buffers_len(&cfg, m, h.n);
        self.with_split_buffers(ws_len, sem_len, |workspace, semaphores| {
            self.with_acc(acc, |acc| {
                apt_gemv::launch(
                    &self.ctx,
                    &cfg,
                    mi,
                    h.n as i32,
                    h.k as i32,
                    x,
                    &self.planes,
                    &self.sums,
                    &self.scales,
                    y,
                    acc,
                    workspace,
                    semaphores,
                )
            })
            .map_err(kernel_err)
        })
    }

    /// The activation quantizer alone: `x[m, k]` into `act` (sized for `m`).
    pub fn quantize_into(
        &self,
        x: &DeviceBuffer<f16>,
        act: &mut AptActivations,
    ) -> Result<(), AptError> {
        let m = self.host.check_x(x.len(), act.m)?;
        apt_quantize_act::launch(
            &self.ctx,
            &quantizer_config_for(m as usize, self.host.k, self.host.abits, act.codes),
            m,
            self.host.k as i32,
            x,
            &mut act.planes,
            &mut act.sums,
            &mut act.scales,
        )
        .map_err(kernel_err)
    }

    /// The GEMM alone on quantized activations: `y[m, n]`, and with `acc` (`[m, n]` i32) the
    /// exact bipolar products too.
    pub fn gemm_into(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
    ) -> Result<(), AptError> {
        self.gemm_into_tiles(act, y, acc, self.host.tiles(act.m))
    }

    /// [`Self::gemm_into`] with other tiles (benchmarks; `n` must be a multiple of
    /// `tiles.bn()` and `k` of `tiles.bk()`, else the argument `tiles` is refused).
    pub fn gemm_into_tiles(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        tiles: AptTiles,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let m = act.m;
        if act.codes {
            return Err(AptError::Kernel(
                "argument `act`: holds code bytes; the 1-bit GEMM reads bit planes (AptActivations::new)"
                    .to_string(),
            ));
        }
        if !h.n.is_multiple_of(tiles.bn()) || !h.k.is_multiple_of(tiles.bk()) {
            return Err(AptError::Kernel(format!(
                "argument `tiles`: {tiles:?} does not divide n = {} and k = {}",
                h.n, h.k
            )));
        }
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        let cfg = tiles.config(h.wbits(), h.abits, acc.is_some());
        self.with_acc(acc, |acc| {
            apt_gemm::launch(
                &self.ctx,
                &cfg,
                m as i32,
                h.n as i32,
                h.k as i32,
                &act.planes,
                &self.planes,
                &act.sums,
                &act.scales,
                &self.sums,
                &self.scales,
                y,
                acc,
            )
        })
        .map_err(kernel_err)
    }

    /// The GEMM of the codes on the integer warpgroup MMA ([`apt_gemm_igmma`], sm_90a) on
    /// activations quantized as code bytes (`AptActivations::with_codes(.., true)`): `y[m, n]`,
    /// and with `acc` the exact bipolar products, the same bits as [`Self::gemm_into`].
    pub fn gemm_igmma_into(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
    ) -> Result<(), AptError> {
        self.gemm_igmma_with(act, y, acc, self.host.igmma_config(act.m, false), true)
    }

    /// [`Self::gemm_igmma_into`] in configuration `cfg` (its `STORE_ACC` follows `acc`), with
    /// `dependent` launched as a programmatic dependent of the kernel before it, as
    /// [`Self::gemm_bgmma_with`] is (before its wait it reads only the layer's weight codes),
    /// else (and on the call that first uploads those codes) an ordinary launch.
    pub fn gemm_igmma_with(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        cfg: apt_gemm_igmma::Config,
        dependent: bool,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let m = act.m;
        if !act.codes {
            return Err(AptError::Kernel(
                "argument `act`: holds bit planes; the integer-MMA GEMM reads code bytes (AptActivations::with_codes)"
                    .to_string(),
            ));
        }
        if !h.k.is_multiple_of(16) {
            return Err(AptError::Kernel(format!(
                "k = {}: the integer-MMA GEMM copies rows of whole 16-byte units (k a multiple of 16)",
                h.k
            )));
        }
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        // The codes' first upload is a copy on the stream: the launch behind it is an
        // ordinary one, since the GEMM reads the codes before it waits.
        let (codes, uploaded) = match self.codes.get() {
            Some(c) => (c, false),
            None => {
                let c = DeviceBuffer::from_host(&self.ctx, h.weight.codes()).map_err(kernel_err)?;
                (self.codes.get_or_init(|| c), true)
            }
        };
        let cfg = apt_gemm_igmma::Config {
            STORE_ACC: acc.is_some() as i32,
            ..cfg
        };
        let how = LaunchOptions {
            stream: None,
            dependent: dependent && !uploaded,
        };
        self.with_acc(acc, |acc| {
            apt_gemm_igmma::launch_with(
                &self.ctx,
                how,
                &cfg,
                m as i32,
                h.n as i32,
                h.k as i32,
                &act.planes,
                codes,
                &act.sums,
                &act.scales,
                &self.sums,
                &self.scales,
                y,
                acc,
            )
        })
        .map_err(kernel_err)
    }

    /// The GEMM of the bit planes on the 1-bit warpgroup MMA ([`apt_gemm_bgmma`], sm_90a) on
    /// activations quantized as planes (`AptActivations::new`): `y[m, n]`, and with `acc` the
    /// exact bipolar products, the same bits as [`Self::gemm_into`].
    pub fn gemm_bgmma_into(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
    ) -> Result<(), AptError> {
        self.gemm_bgmma_with(act, y, acc, self.host.bgmma_config(act.m, false), true)
    }

    /// [`Self::gemm_bgmma_into`] in configuration `cfg` (its `STORE_ACC` follows `acc`), with
    /// `dependent` launched as a programmatic dependent of the kernel before it on the stream
    /// (typically [`Self::quantize_into`]), as `gemm_bgmma_into` does: before its
    /// `wait_prior_grid()` it reads only the layer's own weight planes, which no kernel writes,
    /// so its set-up and first weight stages overlap that kernel whatever it is. Without
    /// `dependent` it is an ordinary launch (to measure what the overlap gains).
    pub fn gemm_bgmma_with(
        &self,
        act: &AptActivations,
        y: &mut DeviceBuffer<f16>,
        acc: Option<&mut DeviceBuffer<i32>>,
        cfg: apt_gemm_bgmma::Config,
        dependent: bool,
    ) -> Result<(), AptError> {
        let h = &self.host;
        let m = act.m;
        if act.codes {
            return Err(AptError::Kernel(
                "argument `act`: holds code bytes; the 1-bit warpgroup GEMM reads bit planes (AptActivations::new)"
                    .to_string(),
            ));
        }
        check_out(y.len(), acc.as_ref().map(|a| a.len()), m * h.n)?;
        let cfg = apt_gemm_bgmma::Config {
            STORE_ACC: acc.is_some() as i32,
            ..cfg
        };
        let how = LaunchOptions {
            stream: None,
            dependent,
        };
        self.with_acc(acc, |acc| {
            apt_gemm_bgmma::launch_with(
                &self.ctx,
                how,
                &cfg,
                m as i32,
                h.n as i32,
                h.k as i32,
                &act.planes,
                &self.planes,
                &act.sums,
                &act.scales,
                &self.sums,
                &self.scales,
                y,
                acc,
            )
        })
        .map_err(kernel_err)
    }
}
