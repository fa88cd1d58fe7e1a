//! The host side of APT's decode GEMV on the integer tensor cores
//! ([`super::kernel::apt_gemv_imma`]): its tiles, their checks, and the weight's codes re-laid out
//! once into the byte layout of the weight-only integer-mma gemv
//! (`qmatmul_gemv_imma`, `docs/qmatmul.md`), which the kernel reads with the same layouts.
//!
//! Why: at one token the popc kernel counts plane pairs on the CUDA cores; the integer mma
//! multiplies a weight code by an activation code directly, four weights a `lop3`, and the
//! weight-only gemv built on it streams 2- and 3-bit weights at 87-90% of the memory floor
//! (perf notes 66 and 70), where the popc kernel reached 77-79%.

use super::kernel::apt_gemv_imma;
use crate::apt::AptError;
use crate::kernels::qmatmul::{relayout_kernel_codes, QMatmulConfig, QMatmulMethod};
use crate::DType;

/// The shared memory the kernel may use: the token (f16 and its s8 codes) and the weight ring.
pub const IMMA_MAX_SHARED: usize = 227 * 1024;

/// The tiles of [`apt_gemv_imma`]: blocks of `bn` output channels over `warps` warps (each
/// `bn / (16 warps)` mma tiles of 16 channels), k tiles of `bk` rows (whole k32 fragments for
/// each of a byte's fields), a cp.async ring of `stages` weight tiles, and k split into
/// `split` slices of whole tiles (exact i32 partials, added by each output block's last slice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImmaTiles {
    pub bn: i32,
    pub bk: i32,
    pub warps: i32,
    pub stages: i32,
    pub split: i32,
}

/// The blocks [`ImmaTiles::for_shape`] aims at: one a multiprocessor, 0.85 of an H200's 132.
const IMMA_BLOCKS: usize = 112;

/// The fewest k tiles a slice of a split keeps, so that its ring has tiles to stream.
const IMMA_MIN_SLICE_TILES: usize = 4;

/// The fields (codes) a weight byte holds for `wbits`-bit codes, 3 and 5 bits as a plane of
/// 2- or 4-bit fields and a 1-bit plane; `None` past 5 bits.
pub fn fields_per_byte(wbits: u32) -> Option<i32> {
    match wbits {
        1 | 2 | 4 => Some(8 / wbits as i32),
        3 | 5 => Some(8 / (wbits as i32 - 1)),
        _ => None,
    }
}

/// The highest bit a field's code starts at in its byte (`pos` of the last field): the i32
/// accumulator holds `2^pos Σ code_a code_w`.
fn top_position(wbits: u32) -> u32 {
    match wbits {
        3 | 5 => 8 - wbits,
        _ => wbits * (8 / wbits - 1),
    }
}

impl ImmaTiles {
    /// The tiling for `n x k` and `wbits`-bit weights: the widest block of 448, 256, 128 or 64
    /// channels dividing `n` that makes [`IMMA_BLOCKS`] blocks (one a multiprocessor), with k
    /// split into as many slices as that takes (each at least [`IMMA_MIN_SLICE_TILES`] tiles),
    /// else 64 channels and the most slices; two k32 fragments a field (one where two do not
    /// divide `k`), and a ring of up to 128 KB of weight tiles (2 to 8 of them, in the shared
    /// memory the token leaves). A guess from the weight-only
    /// gemv's measurements (perf note 70: one block a multiprocessor with the deepest ring that
    /// fits); `None` where the kernel does not serve the shape.
    pub fn for_shape(n: usize, k: usize, wbits: u32) -> Option<ImmaTiles> {
        let p = fields_per_byte(wbits)?;
        if n == 0 || k == 0 {
            return None;
        }
        let bk = if k.is_multiple_of(64 * p as usize) {
            64 * p
        } else {
            32 * p
        };
        if !k.is_multiple_of(bk as usize) {
            return None;
        }
        let ktiles = k / bk as usize;
        let max_split = (ktiles / IMMA_MIN_SLICE_TILES).max(1);
        let (bn, split) = [448, 256, 128, 64]
            .into_iter()
            .filter(|&bn| n.is_multiple_of(bn))
            .map(|bn| (bn, IMMA_BLOCKS.div_ceil(n / bn)))
            .find(|&(_, split)| split <= max_split)
            .or_else(|| n.is_multiple_of(64).then_some((64, max_split)))?;
        Self::with_ring(bn as i32, bk, split as i32, k, wbits)
    }

    /// [`Self::for_shape`]'s tiles where the kernel also takes the widths ([`Self::config`]):
    /// the rule for an `n x k` layer of `wbits`-bit weights and `abits`-bit activations.
    pub fn for_layer(n: usize, k: usize, wbits: u32, abits: u32) -> Option<ImmaTiles> {
        Self::for_shape(n, k, wbits).filter(|t| t.config(n, k, wbits, abits, false).is_ok())
    }

    /// Blocks of `bn` x `bk` over 4 warps in `split` slices with the ring the rule gives them:
    /// up to 128 KB of weight tiles (2 to 8 of them) in the shared memory the token leaves;
    /// `None` where two tiles do not fit.
    fn with_ring(bn: i32, bk: i32, split: i32, k: usize, wbits: u32) -> Option<ImmaTiles> {
        let tile = bn as usize * bk as usize * wbits as usize / 8;
        let ring = (IMMA_MAX_SHARED.checked_sub(3 * Self::token_capacity(k) + 16)?).min(128 * 1024);
        if ring < 2 * tile {
            return None;
        }
        Some(ImmaTiles {
            bn,
            bk,
            warps: 4,
            stages: (ring / tile).min(8) as i32,
            split,
        })
    }

    /// The points the one-token tuner ([`super::tune`]) measures besides the popc kernel's:
    /// the rule's tiles first, then every block of 448, 256, 128 or 64 columns dividing `n`
    /// with k whole, in the slices that make [`IMMA_BLOCKS`] blocks and in twice as many (each
    /// slice at least [`IMMA_MIN_SLICE_TILES`] tiles), the rule's `bk` and ring; only those the
    /// kernel takes for these widths. Empty where the rule serves no tiles.
    pub fn tune_points(n: usize, k: usize, wbits: u32, abits: u32) -> Vec<ImmaTiles> {
        let Some(rule) = Self::for_layer(n, k, wbits, abits) else {
            return Vec::new();
        };
        let max_split = (k / rule.bk as usize / IMMA_MIN_SLICE_TILES).max(1);
        let mut out = vec![rule];
        for bn in [448, 256, 128, 64]
            .into_iter()
            .filter(|&b| n.is_multiple_of(b))
        {
            let need = IMMA_BLOCKS.div_ceil(n / bn);
            for split in [1, need, 2 * need] {
                let Some(t) = (split <= max_split)
                    .then(|| Self::with_ring(bn as i32, rule.bk, split as i32, k, wbits))
                    .flatten()
                else {
                    continue;
                };
                if !out.contains(&t) && t.config(n, k, wbits, abits, false).is_ok() {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Whether these tiles give an `n`-channel layer at least [`IMMA_BLOCKS`] blocks (one a
    /// multiprocessor), slices counted: [`Self::for_shape`]'s tiles do, but its fallback.
    pub fn fills(&self, n: usize) -> bool {
        n / self.bn.max(1) as usize * self.split.max(1) as usize >= IMMA_BLOCKS
    }

    /// Elements of the split's `(workspace, semaphores)` for `m` tokens and `n` channels (1 each
    /// without a split).
    pub fn split_buffers_len(&self, m: usize, n: usize) -> (usize, usize) {
        if self.split <= 1 {
            return (1, 1);
        }
        (self.split as usize * m * n, m * n / self.bn as usize)
    }

    /// Bytes of one ring stage: the weight tile of `bn x bk` codes.
    pub fn tile_bytes(&self, wbits: u32) -> usize {
        self.bn as usize * self.bk as usize * wbits as usize / 8
    }

    /// The token's capacity in shared memory for `k`: a multiple of 4096, so one compiled kernel
    /// serves several `k`.
    fn token_capacity(k: usize) -> usize {
        k.next_multiple_of(4096)
    }

    /// The kernel's configuration for an `n x k` layer of `wbits`-bit weights and `abits`-bit
    /// activations; the argument `tiles` is refused (naming the rule broken) where the kernel
    /// cannot take it, and the widths where the integer mma cannot: weights of 1 to 5 bits
    /// (a byte's fields), activations of 1 to 7 (s8 codes), and each field's sum
    /// `2^pos K (2^A - 1)(2^W - 1)` within the i32 accumulator.
    pub fn config(
        &self,
        n: usize,
        k: usize,
        wbits: u32,
        abits: u32,
        store_acc: bool,
    ) -> Result<apt_gemv_imma::Config, AptError> {
        let bad = |why: String| {
            Err(AptError::Kernel(format!(
                "argument `tiles`: {self:?} {why}"
            )))
        };
        let Some(p) = fields_per_byte(wbits) else {
            return Err(AptError::Kernel(format!(
                "argument `wbits`: the integer-mma decode kernel takes 1- to 5-bit weights, not {wbits}"
            )));
        };
        if !(1..=7).contains(&abits) {
            return Err(AptError::Kernel(format!(
                "argument `abits`: the integer-mma decode kernel takes 1- to 7-bit activations (s8 codes), not {abits}"
            )));
        }
        let bound = (1i64 << top_position(wbits))
            * k as i64
            * ((1i64 << abits) - 1)
            * ((1i64 << wbits) - 1);
        if bound > i32::MAX as i64 {
            return Err(AptError::Overflow {
                reason: format!(
                    "the integer-mma decode kernel's field sums reach 2^{} · k · (2^abits - 1) · (2^wbits - 1) = {bound}, past the i32 accumulator (k = {k}, W{wbits}A{abits})",
                    top_position(wbits)
                ),
            });
        }
        if !matches!(self.warps, 1 | 2 | 4 | 8 | 16) {
            return bad("needs 1, 2, 4, 8 or 16 warps".into());
        }
        let (bn, bk) = (self.bn as usize, self.bk as usize);
        if bn == 0 || !bn.is_multiple_of(16 * self.warps as usize) || !n.is_multiple_of(bn) {
            return bad(format!(
                "needs bn a multiple of 16 x {} warps dividing n = {n}",
                self.warps
            ));
        }
        if bk == 0 || !bk.is_multiple_of(32 * p as usize) || !k.is_multiple_of(bk) {
            return bad(format!(
                "needs bk a multiple of 32 x {p} fields dividing k = {k}"
            ));
        }
        if !(2..=16).contains(&self.stages) {
            return bad("needs 2 to 16 stages".into());
        }
        if self.split < 1 || self.split as usize > k / bk {
            return bad(format!(
                "needs a split of 1 to the {} k tiles (k = {k}, bk = {bk})",
                k / bk
            ));
        }
        // A thread's bytes of the fields' plane (and of the 1-bit plane) in 16-, 8- or 4-byte
        // loads.
        let hb = if matches!(wbits, 3 | 5) {
            wbits - 1
        } else {
            wbits
        } as usize;
        let threads = 32 * self.warps as usize;
        let thread_bytes = bk * bn * hb / 8 / threads;
        let plane1 = if hb == wbits as usize {
            thread_bytes
        } else {
            thread_bytes / hb
        };
        let Some(vec) = [16, 8, 4]
            .into_iter()
            .find(|&v| thread_bytes.is_multiple_of(v) && plane1.is_multiple_of(v))
        else {
            return bad(format!(
                "gives a thread {thread_bytes} bytes of weight a tile, not a multiple of 4"
            ));
        };
        let Some(xv) = [8, 4, 2, 1]
            .into_iter()
            .find(|&v| k.is_multiple_of(threads * v))
        else {
            return bad(format!("needs k = {k} a multiple of its {threads} threads"));
        };
        let kc = Self::token_capacity(k);
        let shared = 3 * kc + 16 + self.stages as usize * self.tile_bytes(wbits);
        if shared > IMMA_MAX_SHARED {
            return bad(format!(
                "needs {shared} bytes of shared memory for k = {k}, W{wbits}; at most {IMMA_MAX_SHARED}"
            ));
        }
        Ok(apt_gemv_imma::Config {
            WBITS: wbits as i32,
            ABITS: abits as i32,
            BN: self.bn,
            BK: self.bk,
            WN: self.warps,
            STAGES: self.stages,
            KC: kc as i32,
            XV: xv as i32,
            VEC: vec as i32,
            STORE_ACC: store_acc as i32,
            SPLIT: self.split,
        })
    }

    /// The weight-only gemv's configuration whose tile layout the kernel reads (unsigned
    /// `wbits`-bit codes, one token a block, these tiles).
    fn qmatmul_config(&self, wbits: u32) -> QMatmulConfig {
        QMatmulConfig {
            wdtype: DType::UInt(wbits as u8),
            adtype: DType::F16,
            // The gemv's activation groups, which the layout does not depend on.
            group_rows: Some(self.bk as usize),
            has_zeros: false,
            bm: 1,
            bn: self.bn as usize,
            bk: self.bk as usize,
            warps: self.warps as usize,
            stages: self.stages as usize,
            split_k: 1,
            method: QMatmulMethod::GemvImma,
            stream_k: 0,
            blocks_per_sm: 1,
            specialize: false,
            stage_tiles: 1,
        }
    }

    /// The codes `[n, k]` (a row per output channel, `wbits` bits each) in the kernel's byte
    /// layout: `k x n x wbits / 8` bytes, read in place (no transposed copy: the bytes out are
    /// the only memory it takes).
    pub fn relayout(
        &self,
        codes: &[u8],
        n: usize,
        k: usize,
        wbits: u32,
    ) -> Result<Vec<u8>, AptError> {
        if codes.len() != n * k {
            return Err(AptError::Kernel(format!(
                "argument `codes`: {} codes for a {n} x {k} weight",
                codes.len()
            )));
        }
        let cfg = self.qmatmul_config(wbits);
        // Row `r` of k, column `c` of n: code `[c, r]` of the `[n, k]` bytes, read in place.
        relayout_kernel_codes(&cfg, k, n, |r, c| codes[c * k + r] as u32)
            .map_err(|e| AptError::Kernel(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule answers any shape without panicking (empty ones too); where it gives tiles,
    /// they are whole tiles of the layer, make at least the blocks it aims at when some slices
    /// can give them, and the kernel's checks take them unless the i32 bound refuses the layer
    /// (which any tiling would hit).
    #[test]
    fn the_rule_serves_or_declines_every_shape() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        let mut served = 0;
        for i in 0..4000 {
            let (n, k) = if i < 16 {
                (i % 4 * 64, i / 4 * 256)
            } else {
                (
                    64 * next(1024) + next(3) * 16,
                    256 * next(160) + next(2) * 32,
                )
            };
            let wbits = 1 + next(8) as u32;
            let Some(t) = ImmaTiles::for_shape(n, k, wbits) else {
                continue;
            };
            served += 1;
            assert!(n > 0 && k > 0, "{n} x {k}: {t:?}");
            assert!(n.is_multiple_of(t.bn as usize) && k.is_multiple_of(t.bk as usize));
            let (blocks, ktiles) = (n / t.bn as usize, k / t.bk as usize);
            assert!(t.split >= 1 && t.split as usize <= ktiles.max(1), "{t:?}");
            if t.split > 1 {
                assert!(ktiles / t.split as usize >= IMMA_MIN_SLICE_TILES, "{t:?}");
            }
            if (ktiles / IMMA_MIN_SLICE_TILES).max(1) * blocks >= IMMA_BLOCKS {
                assert!(blocks * t.split as usize >= IMMA_BLOCKS, "{n} x {k}: {t:?}");
            }
            match t.config(n, k, wbits, 2, false) {
                Ok(c) => assert_eq!((c.BN, c.SPLIT), (t.bn, t.split)),
                Err(AptError::Overflow { .. }) => {}
                Err(e) => panic!("{n} x {k} W{wbits}: {e}"),
            }
        }
        assert!(served > 200, "{served}");
    }
}
