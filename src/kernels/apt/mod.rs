//! APT-LLM on the 1-bit tensor cores (issue 20, `docs/apt.md`): the bit-serial WxAy GEMM and the
//! activation quantizer ([`kernel`]), written with `#[kernel]` over the VM's u1 `dot`, the
//! tiling rule per shape ([`AptTiles`]) and the layer ([`linear::AptLinear`]).

pub mod bench;
pub mod imma;
pub mod kernel;
pub mod linear;
pub mod relayout;
pub mod tune;

pub use imma::ImmaTiles;
pub use linear::{AptLinear, AptPath, DecodeTiles, GpuAptLinear};

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
    /// widths; the accumulator (`4 · ABITS · WBITS · FM · FN` registers per thread) is kept at
    /// 128 registers or fewer (64 from 16 plane pairs, where 128 spilled).
    ///
    /// - **Decode** (`m <= 16`): one 16-row warp tile; four warps along n (where `n` is a
    ///   multiple of 32) and the widest `BN` that still gives two waves of blocks on 132 SMs,
    ///   else the narrowest; register prefetch (the layer runs the fused kernel here).
    /// - **Small batches** (`16 < m <= 64`): one warp along m holding every token
    ///   (`FM = m / 16` rounded up), so the weight is read once per block and each warp's A
    ///   fragments serve all its B tiles; the widest of 8 x 2, 4 x 2, 8 x 1, 4 x 1, 2 x 1
    ///   (warps x tiles along n) that leaves at least 100 blocks (H200, `tilus bench apt --m 64
    ///   --gemm-tiles`: 14336 x 4096 W2A2 34.5 -> 15.1 us, 4096 x 14336 33.6 -> 17.7); four k
    ///   tiles per step where `k >= 8192`.
    /// - **Prefill** (`m > 64`): eight warps on a 64 x 128 (W1: 2 x 4 warps of 2 x 4 tiles) or
    ///   128 x 64 (W2A2: 4 x 2 warps of 2 x 4) block, fewer tiles for wider pairs (same
    ///   measurement at m = 4096: W1A2 14336 x 4096 584.9 -> 384.2 us, W2A2 715.3 -> 574.7).
    ///
    /// Every candidate divides `n`; two k tiles per step where 512 divides `k`, fewer where
    /// the kernel would pass the VM's limits ([`AptTiles::within_limits`]).
    pub fn for_shape(m: usize, n: usize, k: usize, wbits: u32, abits: u32) -> AptTiles {
        let mut t = Self::for_shape_unbounded(m, n, k, wbits, abits);
        while t.kt > 1 && !t.within_limits(wbits, abits) {
            t.kt /= 2;
        }
        t
    }

    /// Whether [`apt_gemm`](kernel::apt_gemm) with these tiles stays within the VM's limits on
    /// one thread's work: the step's plane-pair mmas (`pairs · FM · FN · KT`, about 1,070
    /// unrolled operations each against 131,072), and the (thread, local) pairs of the step's
    /// bits (A: `32 · WM · WN` threads of `ABITS · FM · KT · 128` bits, B: of
    /// `WBITS · FN · KT · 64`, each against 524,288).
    pub fn within_limits(&self, wbits: u32, abits: u32) -> bool {
        let (w, a) = (wbits as i32, abits as i32);
        let warps = self.wm * self.wn;
        w * a * self.fm * self.fn_ * self.kt <= 64
            && warps * a * self.fm * self.kt <= 128
            && warps * w * self.fn_ * self.kt <= 256
    }

    fn for_shape_unbounded(m: usize, n: usize, k: usize, wbits: u32, abits: u32) -> AptTiles {
        let pairs = (wbits * abits) as i32;
        // The accumulator's registers; from 16 plane pairs (W4A4, W2A8) the recovery's
        // temporaries need the room of half of them (128 spilled there).
        let acc_max = if pairs >= 16 { 64 } else { 128 };
        let acc_ok = |fm: i32, f: i32| 4 * pairs * fm * f <= acc_max;
        let divides = |wn: i32, f: i32| n.is_multiple_of((wn * f * 8) as usize);
        let kt = if k.is_multiple_of(512) { 2 } else { 1 };
        if m <= 16 {
            let options = [(4, 2), (4, 1), (2, 1), (1, 1)];
            let fits: Vec<(i32, i32)> = options
                .iter()
                .copied()
                .filter(|&(wn, f)| acc_ok(1, f) && pairs * f <= 8 && divides(wn, f))
                .collect();
            // Four warps where n allows (the fused decode kernel's prologue quantizes the
            // block's tokens with all of them): the widest block that still makes two waves
            // on a 132-SM GPU, else the narrowest.
            let four: Vec<(i32, i32)> = fits.iter().copied().filter(|&(wn, _)| wn == 4).collect();
            let (wn, fn_) = four
                .iter()
                .copied()
                .find(|&(wn, f)| n / (wn * f * 8) as usize >= 264)
                .or(four.last().copied())
                .or(fits.first().copied())
                .unwrap_or((1, 1));
            // Words per step per thread: A ABITS·KT·4, B WBITS·FN·KT·2, twice (prefetch).
            let words = |kt: i32| 2 * kt * (abits as i32 * 4 + wbits as i32 * fn_ * 2);
            let kt = if words(2) <= 64 && k.is_multiple_of(512) {
                2
            } else {
                1
            };
            return AptTiles {
                wm: 1,
                wn,
                fm: 1,
                fn_,
                kt,
                stages: 0,
            };
        }
        if m <= 64 {
            let mut fm = m.div_ceil(16) as i32;
            while fm > 1 && !acc_ok(fm, 1) {
                fm -= 1;
            }
            let options = [(8, 2), (4, 2), (8, 1), (4, 1), (2, 1), (1, 1)];
            let fits: Vec<(i32, i32)> = options
                .iter()
                .copied()
                .filter(|&(wn, f)| acc_ok(fm, f) && divides(wn, f))
                .collect();
            let (wn, fn_) = fits
                .iter()
                .copied()
                .find(|&(wn, f)| n / (wn * f * 8) as usize >= 100)
                .or(fits.last().copied())
                .unwrap_or((1, 1));
            let long = k >= 8192 && k.is_multiple_of(1024);
            return AptTiles {
                wm: 1,
                wn,
                fm,
                fn_,
                kt: if long { 4 } else { kt },
                stages: if long { 4 } else { 3 },
            };
        }
        // W1: the wide block (64 x 128) first; wider pairs: the tall one (128 x 64).
        let wide: &[(i32, i32, i32, i32)] = if pairs <= 2 { &[(2, 4, 2, 4)] } else { &[] };
        let rest = [
            (4, 2, 2, 4),
            (4, 2, 2, 2),
            (2, 2, 2, 2),
            (2, 2, 1, 2),
            (2, 2, 1, 1),
            (2, 1, 1, 1),
        ];
        let (wm, wn, fm, fn_) = wide
            .iter()
            .chain(rest.iter())
            .copied()
            .find(|&(_, wn, fm, f)| acc_ok(fm, f) && divides(wn, f))
            .unwrap_or((2, 1, 1, 1));
        AptTiles {
            wm,
            wn,
            fm,
            fn_,
            kt,
            stages: 3,
        }
    }

    /// Refuses tiles outside what the GEMM is written for: 1-16 warps, 1-8 mma tiles per warp
    /// along each of m and n, 1-4 k tiles per step, stages 0 or 2..=8.
    pub fn check(&self) -> Result<(), AptError> {
        let ok = [self.fm, self.fn_].iter().all(|v| (1..=8).contains(v))
            && self.wm >= 1
            && self.wn >= 1
            && self.wm * self.wn <= 16
            && (1..=4).contains(&self.kt)
            && (self.stages == 0 || (2..=8).contains(&self.stages));
        if ok {
            Ok(())
        } else {
            Err(AptError::Kernel(format!(
                "argument `tiles`: {self:?} needs 1 <= WM·WN <= 16 warps, FM and FN in 1..=8, KT in 1..=4 and STAGES 0 or 2..=8"
            )))
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
/// `warps`), `per_sm` blocks per multiprocessor walking the groups, and the weight words either
/// one chunk ahead in registers (`stages = 0`) or `stages - 1` chunks ahead in a cp.async ring
/// of `stages` shared-memory stages (2 to 8); the prologue quantizes each activation word with
/// `qsplit` threads (1, 2, 4 or 8; 32 / qsplit elements each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopcTiles {
    pub warps: i32,
    pub rows: i32,
    pub vec: i32,
    pub per_sm: i32,
    pub stages: i32,
    pub qsplit: i32,
}

/// The shared memory the popc decode kernel may use (activation planes and weight ring).
pub const POPC_MAX_SHARED: usize = 200 * 1024;

/// The multiprocessors the interpreter's grids are sized for (an H100 SXM's), so that it runs
/// the blocks the GPU would.
pub const INTERPRETER_SMS: usize = crate::kernels::REFERENCE_MULTIPROCESSORS;

impl PopcTiles {
    /// Output channels per block.
    pub fn block_rows(&self) -> usize {
        (self.warps * self.rows) as usize
    }

    /// The tiling for `n x k` and `wbits`-bit weights, from `tilus bench apt --m 1
    /// --popc-tiles` on an H200 (perf-notes 27 and 73): 16-byte loads; up to 256 words of k
    /// per row, two threads quantizing a word and one block per SM from `n = 4096` (groups of 32
    /// rows), else 8 warps of two rows and two blocks. From `n = 4096`, weights of up to 2 bits
    /// stream through a 3-stage cp.async ring in 8 warps of four rows (their loop is short, so
    /// a chunk in flight a warp leaves it waiting on memory), wider ones are prefetched in
    /// registers by 16 warps of two rows (their loop is long enough to cover it). Longer rows:
    /// 16 warps of two rows, one thread per word.
    pub fn for_shape(n: usize, k: usize, wbits: u32) -> PopcTiles {
        if k / 32 > 256 {
            return PopcTiles {
                warps: 16,
                rows: 2,
                vec: 4,
                per_sm: 1,
                stages: 0,
                qsplit: 1,
            };
        }
        let (warps, rows, per_sm, stages) = match (n >= 4096, wbits <= 2) {
            (true, true) => (8, 4, 1, 3),
            (true, false) => (16, 2, 1, 0),
            (false, _) => (8, 2, 2, 0),
        };
        PopcTiles {
            warps,
            rows,
            vec: 4,
            per_sm,
            stages,
            qsplit: 2,
        }
    }

    /// Words of one stage of the weight ring: every plane of a group's rows, one chunk.
    pub fn ring_words(&self, wbits: u32) -> usize {
        wbits as usize * self.block_rows() * 32 * self.vec as usize
    }

    /// The launch's blocks for `n` output channels on a GPU of `sms` multiprocessors (its
    /// `blocks` argument; the grid is the smaller of this and the row groups): `per_sm` a
    /// multiprocessor, or fewer where that takes the same rounds of row groups. A block walks
    /// groups `b, b + blocks, ..`, so the slowest block takes `ceil(groups / blocks)` of them;
    /// the fewest blocks with that many rounds give every block that many but the last few
    /// (57344 rows in groups of 32 on 132 SMs: 128 blocks of 14 groups, where 132 gave 76
    /// blocks 14 and 56 blocks 13, and the last round ran on 58% of the blocks).
    pub fn blocks(&self, n: usize, sms: usize) -> i32 {
        let slots = self.per_sm.max(1) as usize * sms.max(1);
        let groups = n.div_ceil(self.block_rows().max(1)).max(1);
        let rounds = groups.div_ceil(slots);
        groups.div_ceil(rounds).min(i32::MAX as usize) as i32
    }

    /// The kernel's configuration for `k` and the widths; the argument `tiles` is refused when a
    /// field is out of its range (see the error), when `vec` does not divide the prologue's
    /// words, or when the planes, the ring and the staged token need more than
    /// [`POPC_MAX_SHARED`] bytes.
    pub fn config(
        &self,
        k: usize,
        wbits: u32,
        abits: u32,
        store_acc: bool,
    ) -> Result<apt_gemv_popc::Config, AptError> {
        let ok = (1..=32).contains(&self.warps)
            && (1..=32).contains(&self.rows)
            && [1, 2, 4, 8].contains(&self.vec)
            && self.warps % self.vec == 0
            && (1..=64).contains(&self.per_sm)
            && (self.stages == 0 || (2..=8).contains(&self.stages))
            && [1, 2, 4, 8].contains(&self.qsplit)
            && ((32 * self.warps / self.qsplit) % (32 * self.vec)) == 0;
        if !ok {
            return Err(AptError::Kernel(format!(
                "argument `tiles`: {self:?} needs 1 <= warps, rows <= 32, vec in 1, 2, 4, 8 dividing warps, 1 <= per_sm <= 64, stages 0 or 2..=8, qsplit 1, 2, 4 or 8 and the prologue's 32 · warps / qsplit words a multiple of 32 · vec"
            )));
        }
        // The planes' capacity: k / 32 words rounded up to a power of two (one kernel for
        // several k) and to the prologue's chunk.
        let chunk = (32 * self.warps / self.qsplit) as usize;
        let kwp = (k / 32).next_power_of_two().div_ceil(chunk) * chunk;
        // The token staged as f16 when the prologue reads it in one trip (at most two chunks).
        let token = if kwp <= 2 * chunk { 64 * kwp } else { 0 };
        let shared =
            4 * (abits as usize * kwp + self.stages as usize * self.ring_words(wbits)) + token;
        if shared > POPC_MAX_SHARED {
            return Err(AptError::Kernel(format!(
                "argument `tiles`: {self:?} needs {shared} bytes of shared memory for k = {k}, W{wbits}A{abits}; at most {POPC_MAX_SHARED}"
            )));
        }
        Ok(apt_gemv_popc::Config {
            WBITS: wbits as i32,
            ABITS: abits as i32,
            WARPS: self.warps,
            R: self.rows,
            VEC: self.vec,
            KWP: kwp as i32,
            STAGES: self.stages,
            QS: self.qsplit,
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

/// The integer-mma decode kernel's configurations the code-generation tests compile: the
/// rule's tiles for every width it takes on the Llama-70B layers (k whole on 57344 x 8192,
/// split on the narrower ones).
pub fn compile_check_imma_configs() -> Vec<kernel::apt_gemv_imma::Config> {
    let mut out = Vec::new();
    for (w, a) in [(1, 2), (2, 2), (3, 4), (4, 4), (5, 3)] {
        for (n, k) in [(57344, 8192), (8192, 28672), (10240, 8192), (8192, 8192)] {
            if let Some(c) =
                ImmaTiles::for_layer(n, k, w, a).and_then(|t| t.config(n, k, w, a, false).ok())
            {
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// The popc decode configurations `tests/codegen_cuda.rs` compiles: each bench width with the
/// rule's tiles on the paper's shapes, with 8-byte loads, with a 4-stage ring, and 16 warps
/// quantizing with four threads per word (two for 4-bit weights: with four, W4A4's 16 warps
/// need more than the 128 registers a 512-thread block leaves on sm_80, and spill 8 bytes there
/// since integer sums add in 32 bits; the rule's 16-warp tiles quantize with one thread per
/// word).
pub fn compile_check_popc_configs() -> Vec<apt_gemv_popc::Config> {
    let mut out = Vec::new();
    for (w, a) in bench::WIDTHS {
        for (n, k) in bench::PAPER_SHAPES {
            let t = PopcTiles::for_shape(n, k, w);
            let ring = PopcTiles { stages: 4, ..t };
            let wide = PopcTiles {
                warps: 16,
                rows: 2,
                per_sm: 1,
                qsplit: if w >= 4 { 2 } else { 4 },
                ..t
            };
            for tiles in [t, PopcTiles { vec: 2, ..t }, ring, wide] {
                // A ring that does not fit shared memory is refused, not compiled.
                if let Ok(c) = tiles.config(k, w, a, false) {
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
        }
    }
    out
}

/// The configurations `tests/codegen_cuda.rs` compiles: the tiling of each bench width at
/// m = 1, 64 and 4096 on a 4096-channel layer, with the rule's stages (and the decode tiles
/// with a ring too; the prefill tiles' 128 accumulators leave no room for register prefetch).
pub fn compile_check_configs() -> Vec<apt_gemm::Config> {
    let mut out = Vec::new();
    for (w, a) in bench::WIDTHS {
        for m in [1, 64, 4096] {
            let t = AptTiles::for_shape(m, 4096, 4096, w, a);
            let stages: &[i32] = if t.stages == 0 { &[0, 3] } else { &[t.stages] };
            for &stages in stages {
                let c = AptTiles { stages, ..t }.config(w, a, false);
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}
