//! APT-LLM on the 1-bit tensor cores (issue 20, `docs/apt.md`): the bit-serial WxAy GEMM and the
//! activation quantizer ([`kernel`]), written with `#[kernel]` over the VM's u1 `dot`, the
//! tiling rule per shape ([`AptTiles`]) and the layer ([`linear::AptLinear`]).

pub mod bench;
pub mod kernel;
pub mod linear;

pub use linear::{AptLinear, AptPath, GpuAptLinear};

use crate::apt::AptError;
use kernel::{apt_gemm, apt_gemv, apt_gemv_popc};

/// The shared memory the fused decode kernel may use for its activation planes and its ring of
/// weight stages.
pub const GEMV_MAX_SHARED: usize = 200 * 1024;

/// The fused decode kernel's cp.async stages of weight words (3 steps in flight).
pub const GEMV_STAGES: i32 = 4;

/// The tile parameters of [`kernel::apt_gemm`] (its `space(..)`): `WM x WN` warps, each
/// `FM x FN` mma tiles of `16 x 8`, `KT` tiles of 256 bits per k step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AptTiles {
    pub wm: i32,
    pub wn: i32,
    pub fm: i32,
    pub fn_: i32,
    pub kt: i32,
    /// Shared-memory stages of the GEMM's cp.async ring; 0: register prefetch only.
    pub stages: i32,
}

impl AptTiles {
    /// Tokens per block.
    pub fn bm(&self) -> usize {
        (self.wm * self.fm * 16) as usize
    }
    /// Output channels per block.
    pub fn bn(&self) -> usize {
        (self.wn * self.fn_ * 8) as usize
    }
    /// k bits per step.
    pub fn bk(&self) -> usize {
        (self.kt * 256) as usize
    }

    /// The tiling for `m` tokens, `n` channels (a multiple of 8), `k` (a multiple of 256) and
    /// widths: one 16-row warp tile for decode (`m <= 16`), two warps along m above; the
    /// accumulator (`4 · ABITS · WBITS · FM · FN` registers per thread) kept at 64 registers or
    /// fewer; for decode four warps along n (where `n` is a multiple of 32) and the widest `BN`
    /// that still gives two waves of blocks on 132 SMs, else the narrowest; above, the widest
    /// `BN` that divides `n`; two k tiles per step where the words fit and 512 divides `k`.
    pub fn for_shape(m: usize, n: usize, k: usize, wbits: u32, abits: u32) -> AptTiles {
        let pairs = (wbits * abits) as i32;
        let wm = if m <= 16 { 1 } else { 2 };
        let fm = if m > 32 && pairs <= 4 { 2 } else { 1 };
        let max_fn = if pairs * fm <= 8 { 2 } else { 1 };
        let options: &[(i32, i32)] = if m <= 16 {
            &[(4, 2), (4, 1), (2, 1), (1, 1)]
        } else {
            &[(2, 2), (2, 1), (1, 1)]
        };
        let fits: Vec<(i32, i32)> = options
            .iter()
            .copied()
            .filter(|&(wn, f)| f <= max_fn && n.is_multiple_of((wn * f * 8) as usize))
            .collect();
        let (wn, fn_) = if m <= 16 {
            // Four warps where n allows (the fused decode kernel's prologue quantizes the
            // block's tokens with all of them): the widest block that still makes two waves
            // on a 132-SM GPU, else the narrowest.
            let four: Vec<(i32, i32)> = fits.iter().copied().filter(|&(wn, _)| wn == 4).collect();
            four.iter()
                .copied()
                .find(|&(wn, f)| n / (wn * f * 8) as usize >= 264)
                .or(four.last().copied())
                .or(fits.first().copied())
        } else {
            fits.first().copied()
        }
        .unwrap_or((1, 1));
        // Words per step per thread: A ABITS·FM·KT·4, B WBITS·FN·KT·2, twice (prefetch).
        let words = |kt: i32| 2 * kt * (abits as i32 * fm * 4 + wbits as i32 * fn_ * 2);
        let kt = if words(2) <= 64 && k.is_multiple_of(512) {
            2
        } else {
            1
        };
        AptTiles {
            wm,
            wn,
            fm,
            fn_,
            kt,
            stages: if m <= 16 { 0 } else { 3 },
        }
    }

    /// The GEMM configuration of these tiles for the widths.
    pub fn config(&self, wbits: u32, abits: u32, store_acc: bool) -> apt_gemm::Config {
        apt_gemm::Config {
            WBITS: wbits as i32,
            ABITS: abits as i32,
            WM: self.wm,
            WN: self.wn,
            FM: self.fm,
            FN: self.fn_,
            KT: self.kt,
            STAGES: self.stages,
            STORE_ACC: store_acc as i32,
        }
    }
}

impl AptTiles {
    /// The fused decode kernel's configuration ([`kernel::apt_gemv`]) for these tiles on `m`
    /// tokens and `n x k`, when they are decode tiles (`WM = FM = 1`) and the block's activation
    /// planes (`16 · ABITS · (KWP + 8)` words) fit [`GEMV_MAX_SHARED`], with
    /// [`Self::gemv_split`] k slices.
    pub fn gemv_config(
        &self,
        (m, n, k): (usize, usize, usize),
        wbits: u32,
        abits: u32,
        store_acc: bool,
    ) -> Option<apt_gemv::Config> {
        if self.wm != 1 || self.fm != 1 {
            return None;
        }
        let chunk = 32 * self.wn as usize;
        let kwp = (k / 32).div_ceil(chunk) * chunk;
        // The weight ring: GEMV_STAGES stages of [WBITS, BN, KW + padding] words.
        let kw = 8 * self.kt as usize;
        let ring = GEMV_STAGES as usize * wbits as usize * self.bn() * (kw + 8) * 4;
        if 16 * abits as usize * (kwp + 8) * 4 + ring > GEMV_MAX_SHARED {
            return None;
        }
        Some(apt_gemv::Config {
            WBITS: wbits as i32,
            ABITS: abits as i32,
            WN: self.wn,
            FN: self.fn_,
            KT: self.kt,
            KWP: kwp as i32,
            STAGES: GEMV_STAGES,
            STORE_ACC: store_acc as i32,
            SPLIT: self.gemv_split(m, n, k) as i32,
        })
    }

    /// k slices of the fused decode kernel: 1. Split k (4 slices, `tilus bench apt --split 4`)
    /// measured slower on every paper shape it applies to (perf-notes 24: each slice's block
    /// repeats the row's quantization), so the layer does not split.
    pub fn gemv_split(&self, _m: usize, _n: usize, _k: usize) -> usize {
        1
    }
}

/// The tiles of the popc decode kernel ([`kernel::apt_gemv_popc`]): row groups of `warps`
/// warps of `rows` weight rows each, `vec` words of k per lane and chunk (`vec` divides
/// `warps`), `per_sm` blocks per multiprocessor walking the groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopcTiles {
    pub warps: i32,
    pub rows: i32,
    pub vec: i32,
    pub per_sm: i32,
}

/// The multiprocessors the interpreter's grids are sized for (an H100 SXM's), so that it runs
/// the blocks the GPU would.
pub const INTERPRETER_SMS: usize = 132;

impl PopcTiles {
    /// Output channels per block.
    pub fn block_rows(&self) -> usize {
        (self.warps * self.rows) as usize
    }

    /// The tiling for `n x k`: 16-byte loads (`vec = 4`); enough warps that the prologue
    /// quantizes the token's `k / 32` words in one round (4 to 16), four rows per warp (two at
    /// 16 warps) and about eight warps per SM. Measured (H200, `tilus bench apt --m 1
    /// --popc-tiles`, perf-notes 27): 4 x 4 x 4 with two blocks per SM was best or within 3% on
    /// every paper shape with k = 1024..4096, 16 x 2 x 4 with one at k = 14336.
    pub fn for_shape(_n: usize, k: usize) -> PopcTiles {
        let warps = (k / 32).div_ceil(32).next_power_of_two().clamp(4, 16) as i32;
        PopcTiles {
            warps,
            rows: if warps >= 16 { 2 } else { 4 },
            vec: 4,
            per_sm: (8 / warps).max(1),
        }
    }

    /// The launch's blocks on a GPU of `sms` multiprocessors (its `blocks` argument; the grid
    /// is the smaller of this and the row groups).
    pub fn blocks(&self, sms: usize) -> i32 {
        (self.per_sm.max(1) as usize * sms.max(1)).min(i32::MAX as usize) as i32
    }

    /// The kernel's configuration for `k` and the widths; the argument `tiles` is refused when
    /// `vec` is not 1, 2 or 4 dividing `warps`, or `warps`, `rows` are outside 1..=32.
    pub fn config(
        &self,
        k: usize,
        wbits: u32,
        abits: u32,
        store_acc: bool,
    ) -> Result<apt_gemv_popc::Config, AptError> {
        let ok = (1..=32).contains(&self.warps)
            && (1..=32).contains(&self.rows)
            && [1, 2, 4].contains(&self.vec)
            && self.warps % self.vec == 0
            && (1..=64).contains(&self.per_sm);
        if !ok {
            return Err(AptError::Kernel(format!(
                "argument `tiles`: {self:?} needs 1 <= warps, rows <= 32, vec in 1, 2, 4 dividing warps and 1 <= per_sm <= 64"
            )));
        }
        // The planes' capacity: k / 32 words rounded up to a power of two (one kernel for
        // several k) and to the prologue's chunk.
        let chunk = 32 * self.warps as usize;
        let kwp = (k / 32).next_power_of_two().div_ceil(chunk) * chunk;
        Ok(apt_gemv_popc::Config {
            WBITS: wbits as i32,
            ABITS: abits as i32,
            WARPS: self.warps,
            R: self.rows,
            VEC: self.vec,
            KWP: kwp as i32,
            STORE_ACC: store_acc as i32,
        })
    }
}

/// Check a GEMM's shape and widths: widths 1..=8, `k` a positive multiple of 256, `n` a positive
/// multiple of 8, and the i32 recovery's bound `4 k (2^A - 1)(2^W - 1) < 2^31`.
pub fn check_shape(n: usize, k: usize, wbits: u32, abits: u32) -> Result<(), AptError> {
    if !(1..=8).contains(&wbits) {
        return Err(AptError::Bits {
            arg: "wbits",
            bits: wbits,
        });
    }
    if !(1..=8).contains(&abits) {
        return Err(AptError::Bits {
            arg: "abits",
            bits: abits,
        });
    }
    if k == 0 || !k.is_multiple_of(256) {
        return Err(AptError::K { k, multiple: 256 });
    }
    if n == 0 || !n.is_multiple_of(8) {
        return Err(AptError::Len {
            arg: "n",
            expected: n.next_multiple_of(8).max(8),
            got: n,
        });
    }
    let bound = 4 * k as i64 * ((1i64 << abits) - 1) * ((1i64 << wbits) - 1);
    if bound > kernel::MAX_PRODUCT {
        return Err(AptError::Overflow {
            reason: format!(
                "4 · k · (2^abits - 1) · (2^wbits - 1) = {bound} exceeds the i32 accumulator (k = {k}, W{wbits}A{abits})"
            ),
        });
    }
    Ok(())
}

/// The fused decode configurations `tests/codegen_cuda.rs` compiles: each bench width at m = 1
/// on the paper's shapes.
pub fn compile_check_gemv_configs() -> Vec<apt_gemv::Config> {
    let mut out = Vec::new();
    for (w, a) in bench::WIDTHS {
        for (n, k) in bench::PAPER_SHAPES {
            let tiles = AptTiles::for_shape(1, n, k, w, a);
            if let Some(c) = tiles.gemv_config((1, n, k), w, a, false) {
                for stages in [0, GEMV_STAGES] {
                    for split in [1, 4] {
                        let c = apt_gemv::Config {
                            STAGES: stages,
                            SPLIT: split,
                            ..c
                        };
                        if !out.contains(&c) {
                            out.push(c);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The popc decode configurations `tests/codegen_cuda.rs` compiles: each bench width with the
/// rule's tiles on the paper's shapes, and with 8-byte loads.
pub fn compile_check_popc_configs() -> Vec<apt_gemv_popc::Config> {
    let mut out = Vec::new();
    for (w, a) in bench::WIDTHS {
        for (n, k) in bench::PAPER_SHAPES {
            let t = PopcTiles::for_shape(n, k);
            for tiles in [t, PopcTiles { vec: 2, ..t }] {
                let c = tiles
                    .config(k, w, a, false)
                    .expect("the rule's tiles are valid");
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// The configurations `tests/codegen_cuda.rs` compiles: the tiling of each bench width at
/// m = 1, 64 and 4096 on a 4096-channel layer.
pub fn compile_check_configs() -> Vec<apt_gemm::Config> {
    let mut out = Vec::new();
    for (w, a) in bench::WIDTHS {
        for m in [1, 64, 4096] {
            let t = AptTiles::for_shape(m, 4096, 4096, w, a);
            for stages in [0, 3] {
                let c = AptTiles { stages, ..t }.config(w, a, false);
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}
