//! The host side of [`QMatmulMethod::GemvImma`](super::QMatmulMethod::GemvImma) and
//! [`QMatmulMethod::GemvIgmma`](super::QMatmulMethod::GemvIgmma): their tile rules (the kernels
//! are `kernel::qmatmul_gemv_imma`, `qmatmul_gemv_imma_tokens` and `qmatmul_gemv_igmma`).
//!
//! One token of a 1- to 5-bit integer weight (or of `f3e1m1`, whose values are the integers
//! `-3..3`: read as `i3`, [`kernel_codes`](super::config::kernel_codes)) on the integer tensor
//! cores
//! (`mma.m16n8k32 .s32.u8.s8`, native on sm_80 and sm_90: `IMMA.16832.U8.S8`).
//!
//! **Weights.** A byte holds `P = 8 / bits` codes, field `f` at bits `bits · f`; field `f` of
//! every byte of a thread's tile belongs to the k-range `[f · bk / P, (f + 1) · bk / P)` of the
//! tile, so a thread's bytes are `P` u8 A fragments of `bk / P` rows of k each. Field `f`
//! masked in place, `word & mask_f`, is the code times `γ_f = 2^(bits · f)` as a u8: one `lop3`
//! makes four weights, with no shift and no conversion (the f16 gemv spends one `lop3` per two,
//! perf note 34). Signed codes are stored in offset binary (`c + 2^(bits - 1)`, the sign bit
//! flipped), the offset taken off once per group.
//!
//! **3- and 5-bit codes** ([`PlaneMap`]) do not fill a byte's fields, so a tile holds two
//! planes: a plane of `hb = bits - 1`-bit fields laid out as a 2- or 4-bit weight's, then a
//! 1-bit plane with the last bit of every code. A field's code is rebuilt in place by two
//! `lop3`s, `(w & m_f) | (w1 & b_f)`, at bit `pos_f` of its byte (`γ_f = 2^pos_f`; 3 bits 0, 2,
//! 4, 5; 5 bits 0, 3): the 1-bit plane's bit is the code's top bit, but for the last field,
//! whose bits end the byte, its lowest (`c = 2 hi + lo`). One 1-bit word serves `hb` words of
//! the fields' plane, each moving its bits into place by one shift. A 3-bit weight costs 0.56
//! integer instructions instead of 2 bits' 0.25, at 3/8 of a byte.
//!
//! **Activations.** Each scale group's activations are scaled by a power of two `σ` (so that
//! `max|x| σ < 2^30`, exactly) and by `1 / γ_f` of their field, rounded to the nearest integer
//! `V` and split into four balanced base-256 s8 digits `V = t0 2^24 + t1 2^16 + t2 2^8 + t3`,
//! taken from the least significant end (`t3 = V - 256 floor((V + 128) / 256)`, and so on), so
//! that every digit lies in `[-128, 127]` (rounding from the top end can reach 128). Only the
//! rounding to `V` loses anything: within `2^-23 max|x|` of the activation for every field of
//! every width, far below f16's own
//! rounding. At one token the mma's 8 columns are 7/8 padding; the four digits take four of
//! them, so the split costs no mma. The block splits its k-slice once, into shared memory,
//! before its k loop, from a copy of the slice that `cp.async` brings in ahead of the weight
//! ring's first tiles (loading it from global memory group by group queued each load behind
//! the ring's: 2-3 us of a 40 us kernel, perf note 63). A scale group is whole tiles, or (for
//! one-plane codes, one token a block or several) a run of whole fields of a tile, so that
//! 1-bit weights, whose tile is 256 rows, take groups of 128 (two groups of four fields) down
//! to 32 (one field). Per group the i32 accumulator (exact:
//! `|Σ| < 2^31` for groups up to 65536) is converted to f32 and scaled by `s / σ`, and the
//! zero point's (or the offset's) `s z Σx` is taken off; the four columns are weighted by
//! `2^24, 2^16, 2^8, 1` and added at the end.
//!
//! Session 42 built the same scheme on fp8 (`mma.m16n8k32 .e4m3`, three e4m3 digits): sm_90 has
//! no fp8 `mma.sync` in hardware, and ptxas's emulation made it 1.4x slower than the f16 gemv
//! (perf note 59). The integer mma is the hardware's own.

use super::config::{config_err, kernel_codes, QMatmulConfig, QMatmulError, Tiling};
use crate::DType;

/// The longest k-slice (`k / split_k`) a block splits into shared memory: four digits of
/// 4096 bytes.
pub const MAX_SLICE: usize = 4096;

/// The longest chunk (`k / split_k`) of the persistent one-token kernel: its activations'
/// buffer cannot borrow a ring stage (the ring never drains), so the digits and the
/// activations take 12 KiB less than [`MAX_SLICE`]'s and two 896-column blocks of a 3-stage
/// ring fit a multiprocessor.
pub const MAX_CHUNK: usize = 2048;

/// The k-ranges (fields) a byte of the weight covers, for the method's weight types (1 to 5
/// bits, integers, or floats the kernels read as integers, [`kernel_codes`]): `8 / bits`, and for
/// 3- and 5-bit codes their fields' plane's, 4 and 2.
pub(crate) fn fields_per_byte(wdtype: DType) -> Option<usize> {
    match kernel_codes(wdtype) {
        DType::UInt(b) | DType::Int(b) if matches!(b, 1 | 2 | 4) => Some(8 / b as usize),
        DType::UInt(b) | DType::Int(b) if matches!(b, 3 | 5) => Some(8 / (b as usize - 1)),
        _ => None,
    }
}

/// The shortest `bk` of [`QMatmulMethod::GemvImma`](super::QMatmulMethod::GemvImma) for
/// `wdtype` (one k32 fragment a field: 256 for 1 bit, 128 for 2 and 3, 64 for 4 and 5), or
/// `None` where the method does not take the type.
pub fn gemv_imma_bk(wdtype: DType) -> Option<usize> {
    fields_per_byte(wdtype).map(|p| 32 * p)
}

/// Whether `wdtype` comes as two planes (3- and 5-bit codes: a 2- or 4-bit plane of fields and
/// a 1-bit plane).
pub(crate) fn two_planes(wdtype: DType) -> bool {
    matches!(kernel_codes(wdtype), DType::UInt(3 | 5) | DType::Int(3 | 5))
}

/// [`QMatmulConfig::tiling`] of [`QMatmulMethod::GemvImma`](super::QMatmulMethod::GemvImma): one
/// token a block, `warps` warps along n of `bn / (16 warps)` fragments of 16 columns; errors
/// name the field at fault.
pub(crate) fn gemv_imma_tiling(c: &QMatmulConfig) -> Result<Tiling, QMatmulError> {
    let Some(p) = fields_per_byte(c.wdtype) else {
        return Err(config_err(
            "wdtype",
            format!(
                "the integer-mma gemv masks 1- to 5-bit integer codes in place (and f3e1m1's, \
                 read as i3), not {}",
                c.wdtype
            ),
        ));
    };
    if !matches!(c.bm, 1 | 4 | 8 | 16 | 32) {
        return Err(config_err(
            "bm",
            format!(
                "{}; the integer-mma gemv computes 1 token a block (digits split in the block) \
                 or 4, 8, 16 or 32 (digits from a pre-pass, two a token: whole mma columns)",
                c.bm
            ),
        ));
    }
    // `bm = 1` splits each group's activations a warp a group; with more tokens a pre-pass
    // does, and the combined digits' i32 sums must stay exact: `|Σ| <= G 15 (64 256 + 128)`.
    let tokens = c.bm > 1;
    if tokens && two_planes(c.wdtype) {
        return Err(config_err(
            "bm",
            format!(
                "{}; {} weights take the integer-mma gemv one token a block (bm = 1): the \
                 several-token kernel reads one plane of codes, not two",
                c.bm, c.wdtype
            ),
        ));
    }
    if tokens && p == 8 {
        // Two digits keep `2^-14 max|x|` of each group; a 1-bit weight's zero point (half the
        // scale on every code) sums those errors where the output cancels: 5.3e-4 of the f16
        // reference at k = 4096 (the 4-digit split's 2e-4), past f16's own rounding.
        return Err(config_err(
            "bm",
            format!(
                "{}; 1-bit weights take the integer-mma gemv one token a block (bm = 1), whose \
                 four digits keep its error at f16's",
                c.bm
            ),
        ));
    }
    if c.bk == 0 || !c.bk.is_multiple_of(32 * p) {
        return Err(config_err(
            "bk",
            format!(
                "{} is not a multiple of 32 x {p}: each of the {p} codes of a {} byte covers \
                 whole k32 fragments",
                c.bk, c.wdtype
            ),
        ));
    }
    if !c.warps.is_power_of_two() || c.warps > 16 {
        return Err(config_err(
            "warps",
            format!(
                "{}; the integer-mma gemv takes 1, 2, 4, 8 or 16 warps",
                c.warps
            ),
        ));
    }
    if !c.bn.is_multiple_of(16 * c.warps) || c.bn > 4096 {
        return Err(config_err(
            "bn",
            format!(
                "{} is not a multiple of 16 x {} warps of at most 4096",
                c.bn, c.warps
            ),
        ));
    }
    // One-plane codes also take groups shorter than a tile: a run of whole fields (`bk / p`
    // rows each) of every byte.
    let fk = c.bk / p;
    let in_tile =
        |g: usize| !two_planes(c.wdtype) && g > 0 && c.bk.is_multiple_of(g) && g.is_multiple_of(fk);
    match c.group_rows {
        Some(g)
            if (g.is_multiple_of(c.bk) || in_tile(g))
                && g <= MAX_SLICE
                && (tokens || (MAX_SLICE / g).is_multiple_of(c.warps)) => {}
        Some(g) => {
            return Err(config_err(
                "group_rows",
                format!(
                    "{g}: the integer-mma gemv scales the accumulator once per group of whole k \
                     tiles (a multiple of bk = {}) or, for 1-, 2- or 4-bit codes, of whole \
                     fields of a tile (a divisor of bk and a multiple of bk / \
                     {p} = {fk}), and its warps split the activations a group each ({} / group \
                     a multiple of {} warps)",
                    c.bk, MAX_SLICE, c.warps
                ),
            ))
        }
        None => {
            return Err(config_err(
                "group_rows",
                "the integer-mma gemv needs grouped scales: the activations are scaled per group",
            ))
        }
    }
    // Persistent workers (`stream_k`): one token of one-plane codes, claiming units of a
    // column tile and `k / split_k` rows (`qmatmul_gemv_imma_persistent`).
    if c.stream_k > 0 {
        let why = if tokens {
            Some(format!(
                "persistent workers take one token a block (bm = 1), not bm = {}",
                c.bm
            ))
        } else if two_planes(c.wdtype) {
            Some(format!(
                "persistent workers read one plane of codes (1, 2 or 4 bits), not {}'s two",
                c.wdtype
            ))
        } else if c.stream_k > 65535 {
            Some(format!(
                "{} workers exceed 65535, the most blocks along the grid's y dimension",
                c.stream_k
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(config_err("stream_k", why));
        }
    }
    // The warpgroup gemv's other schedules.
    refuse_wgmma_schedules(&QMatmulConfig { stream_k: 0, ..*c }, "the integer-mma gemv")?;
    c.check_blocks_registers("the integer-mma gemv")?;
    let bits = c.wdtype.bits() as usize;
    let rep_n = c.bn / (16 * c.warps);
    let locals_per_thread = c.bk * rep_n * 16 / 32;
    let bytes_per_thread = locals_per_thread * bits / 8;
    // Two planes: each plane's bytes (the fields' and the 1-bit plane's `1 / bits` of them) in
    // runs of the same width.
    let plane_bytes = if two_planes(c.wdtype) {
        bytes_per_thread / bits
    } else {
        bytes_per_thread
    };
    let vector_bytes = [16, 8, 4, 2, 1]
        .into_iter()
        .find(|v| plane_bytes.is_multiple_of(*v))
        .unwrap_or(1);
    Ok(Tiling {
        warps_m: 1,
        warps_n: c.warps,
        rep_m: 1,
        rep_n,
        rep_k: c.bk / 16,
        groups_per_tile: 1,
        locals_per_thread,
        bytes_per_thread,
        vector_bytes,
        tile_bytes: c.bk * c.bn * bits / 8,
    })
}

/// The f16 warpgroup gemv's schedules (stream-k, warp specialization, two k tiles a stage)
/// are not `kernel`'s: an error naming the field set.
fn refuse_wgmma_schedules(c: &QMatmulConfig, kernel: &str) -> Result<(), QMatmulError> {
    let field = if c.stream_k != 0 {
        "stream_k"
    } else if c.specialize {
        "specialize"
    } else if c.stage_tiles != 1 {
        "stage_tiles"
    } else {
        return Ok(());
    };
    Err(config_err(
        field,
        format!("a schedule of the warpgroup gemv, not {kernel}'s"),
    ))
}

/// [`QMatmulConfig::tiling`] of [`QMatmulMethod::GemvIgmma`](super::QMatmulMethod::GemvIgmma):
/// `bm` tokens a block (8, 16, 32 or 64: `2 bm` digit columns, a width the integer wgmma has),
/// `warps / 4` warpgroups of `bn / (16 warps)` 16-row fragments each (`rep` tiles of 64 columns
/// a warpgroup), each field of a byte a k-range of `bk / P` (whole k32 steps, at most one
/// 128-byte swizzled row of digits). Errors name the field at fault.
pub(crate) fn gemv_igmma_tiling(c: &QMatmulConfig) -> Result<Tiling, QMatmulError> {
    let p = match fields_per_byte(c.wdtype) {
        Some(p) if p <= 4 && !two_planes(c.wdtype) => p,
        _ => {
            return Err(config_err(
                "wdtype",
                format!(
                    "the integer warpgroup gemv shifts 2- or 4-bit integer codes to their bytes' \
                     low bits, not {} (1-bit weights lose f16's accuracy on two digits; they \
                     take METHOD=gemv_imma with bm = 1)",
                    c.wdtype
                ),
            ))
        }
    };
    if !matches!(c.bm, 8 | 16 | 32 | 64) {
        return Err(config_err(
            "bm",
            format!(
                "{}; the integer warpgroup gemv computes 8, 16, 32 or 64 tokens a block (2 bm \
                 digit columns: 16 to 128, widths of wgmma .s32.u8.s8)",
                c.bm
            ),
        ));
    }
    if !matches!(c.bk, 128 | 256) || c.bk / p < 32 || c.bk / p > 128 {
        return Err(config_err(
            "bk",
            format!(
                "{}; the integer warpgroup gemv takes 128 or 256 rows a tile, each of the {p} \
                 codes of a {} byte covering 32 to 128 of them (whole k32 steps inside one \
                 128-byte row of digits)",
                c.bk, c.wdtype
            ),
        ));
    }
    if !matches!(c.warps, 4 | 8) {
        return Err(config_err(
            "warps",
            format!(
                "{}; the integer warpgroup gemv runs one or two warpgroups (4 or 8 warps)",
                c.warps
            ),
        ));
    }
    if c.bn == 0 || !c.bn.is_multiple_of(16 * c.warps) || c.bn > 512 {
        return Err(config_err(
            "bn",
            format!(
                "{} is not a multiple of 16 x {} warps (64 columns a warpgroup) of at most 512",
                c.bn, c.warps
            ),
        ));
    }
    match c.group_rows {
        Some(g) if g.is_multiple_of(c.bk) => {}
        Some(g) => {
            return Err(config_err(
                "group_rows",
                format!(
                    "{g}: the integer warpgroup gemv scales each k tile by its group's scale \
                     and digits' 1 / σ, so a group is whole tiles (a multiple of bk = {})",
                    c.bk
                ),
            ))
        }
        None => {
            return Err(config_err(
                "group_rows",
                "the integer warpgroup gemv needs grouped scales: the activations are scaled \
                 per group",
            ))
        }
    }
    if c.stages < 3 {
        return Err(config_err(
            "stages",
            format!(
                "{}; the integer warpgroup gemv refills a stage two tiles after it was read, \
                 so it needs at least 3",
                c.stages
            ),
        ));
    }
    refuse_wgmma_schedules(c, "the integer warpgroup gemv")?;
    c.check_blocks_registers("the integer warpgroup gemv")?;
    let bits = c.wdtype.bits() as usize;
    let rep_n = c.bn / (16 * c.warps);
    let bytes_per_thread = c.bk * c.bn * bits / 8 / (32 * c.warps);
    let vector_bytes = [16, 8, 4]
        .into_iter()
        .find(|v| bytes_per_thread.is_multiple_of(*v))
        .unwrap_or(4);
    Ok(Tiling {
        warps_m: 1,
        warps_n: c.warps,
        rep_m: 1,
        rep_n,
        rep_k: c.bk / p / 32,
        groups_per_tile: 1,
        locals_per_thread: bytes_per_thread * p,
        bytes_per_thread,
        vector_bytes,
        tile_bytes: c.bk * c.bn * bits / 8,
    })
}

/// The 1-bit plane's bit of field `f` for word `j` of the fields' plane, 3 bits (`j` of a
/// pair): word 0's as they stand, word 1's moved into place by the kernel's `>> 1` (even `f`)
/// or `<< 4` (odd).
const LAST_BIT_3: [[u32; 4]; 2] = [[2, 4, 6, 5], [3, 0, 7, 1]];

/// The same for 5 bits (`j` of four words): each word's two bits moved into place by `>> 3`,
/// `>> 1`, `<< 1` or `<< 3`.
const LAST_BIT_5: [[u32; 4]; 4] = [[7, 6, 0, 0], [5, 4, 0, 0], [3, 2, 0, 0], [1, 0, 0, 0]];

/// How a thread's 3- or 5-bit codes go into the two planes of a tile of
/// [`QMatmulMethod::GemvImma`](super::QMatmulMethod::GemvImma) (the module docs).
///
/// A thread's codes, in the order of the codes layout `q` (byte `i` of the fields' plane holds
/// codes `p i .. p i + p`, field `f` at bits `hb f`, `hb = bits - 1`, `p = 8 / hb`), are split
/// as `c = lo + 2^hb hi` (`lo` to the fields' plane, `hi` to the 1-bit plane) but for the last
/// field, `c = 2 hi + lo` (`hi` to the fields' plane), so that the kernel's two masks and an
/// `or` leave each code in place: at bits `hb f` with its last bit above, or for the last field
/// at bit `8 - bits`, its last bit below. The words of the fields' plane go in groups of `hb`
/// in the kernel's `[rep_f, 2, 4, warps, rep_n, 2, 8]` word layout (along dim 1 for 3 bits,
/// dims 1 and 5 for 5 bits), each group taking its last bits from one word of the 1-bit plane,
/// byte for byte, at [`LAST_BIT_3`] or [`LAST_BIT_5`].
pub(crate) struct PlaneMap {
    /// `[thread][word of the fields' plane]`: its 1-bit word and `j`.
    group: Vec<Vec<(usize, usize)>>,
    /// The fields' plane's bits (`hb`).
    hb: usize,
    /// Bytes of the fields' plane a thread.
    pub(crate) bytes_fields: usize,
}

impl PlaneMap {
    /// The map of `c`'s tiles (a validated 3- or 5-bit configuration of the method).
    pub(crate) fn new(c: &QMatmulConfig, t: &Tiling) -> PlaneMap {
        use tilus_core::layout::Layout;
        let hb = c.wdtype.bits() as usize - 1;
        let wn = t.warps_n;
        let rep_f = c.bk / (8 / hb) / 32;
        let words = Layout::spatial(&[1, 1, 1, wn, 1, 1, 1])
            .compose(&Layout::column_local(&[rep_f, 1, 1, 1, t.rep_n, 1, 1]))
            .and_then(|l| l.compose(&Layout::local(&[1, 2, 1, 1, 1, 2, 1])))
            .and_then(|l| l.compose(&Layout::column_spatial(&[1, 1, 4, 1, 1, 1, 8])))
            .expect("the kernel's word layout composes");
        let reduced: &[usize] = if hb == 2 { &[1] } else { &[1, 5] };
        let plane1 = words.reduce(reduced).expect("dims 1 and 5 exist");
        let group = (0..32 * wn)
            .map(|th| {
                let at: std::collections::HashMap<Vec<usize>, usize> = (0..plane1.num_locals())
                    .map(|v| (plane1.eval(th, v), v))
                    .collect();
                (0..words.num_locals())
                    .map(|u| {
                        let mut x = words.eval(th, u);
                        let j = if hb == 2 { x[1] } else { 2 * x[1] + x[5] };
                        for &d in reduced {
                            x[d] = 0;
                        }
                        (at[&x], j)
                    })
                    .collect()
            })
            .collect();
        PlaneMap {
            group,
            hb,
            bytes_fields: t.locals_per_thread * hb / 8,
        }
    }

    fn last_bit(&self, j: usize, f: usize) -> u32 {
        if self.hb == 2 {
            LAST_BIT_3[j][f]
        } else {
            LAST_BIT_5[j][f]
        }
    }

    /// Thread `th`'s codes (`q` order) as its bytes: those of the fields' plane, then those of
    /// the 1-bit plane.
    pub(crate) fn pack(&self, th: usize, codes: &[u32]) -> Vec<u8> {
        let mut bytes = vec![0u8; self.bytes_fields + codes.len() / 8];
        let (fields, one) = bytes.split_at_mut(self.bytes_fields);
        let (hb, p) = (self.hb, 8 / self.hb);
        for (i, byte) in fields.iter_mut().enumerate() {
            let (v, j) = self.group[th][i / 4];
            *byte = 0;
            for f in 0..p {
                let c = codes[p * i + f];
                let (lo, bit) = if f + 1 < p {
                    (c & ((1 << hb) - 1), c >> hb)
                } else {
                    (c >> 1, c & 1)
                };
                *byte |= (lo << (hb * f)) as u8;
                one[4 * v + i % 4] |= (bit << self.last_bit(j, f)) as u8;
            }
        }
        bytes
    }

    /// [`PlaneMap::pack`] undone: thread `th`'s `locals` codes from its bytes.
    pub(crate) fn unpack(&self, th: usize, bytes: &[u8], locals: usize) -> Vec<u32> {
        let mut codes = vec![0u32; locals];
        let (fields, one) = bytes.split_at(self.bytes_fields);
        let (hb, p) = (self.hb, 8 / self.hb);
        for (i, &byte) in fields.iter().enumerate() {
            let (v, j) = self.group[th][i / 4];
            for f in 0..p {
                let lo = (byte as u32 >> (hb * f)) & ((1 << hb) - 1);
                let bit = (one[4 * v + i % 4] as u32 >> self.last_bit(j, f)) & 1;
                codes[p * i + f] = if f + 1 < p {
                    lo | bit << hb
                } else {
                    lo << 1 | bit
                };
            }
        }
        codes
    }

    /// Where thread `th`'s bytes ([`PlaneMap::pack`]'s order) lie in a tile: each plane is
    /// `local(bytes / v).spatial(threads).local(v)`, the 1-bit plane after the fields' plane.
    pub(crate) fn offsets(&self, t: &Tiling, th: usize) -> Vec<usize> {
        let (v, threads) = (t.vector_bytes, 32 * t.warps_n);
        let at = |i: usize| (i / v) * threads * v + th * v + i % v;
        let fields = (0..self.bytes_fields).map(at);
        let one = (0..t.locals_per_thread / 8).map(|i| threads * self.bytes_fields + at(i));
        fields.chain(one).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{from_kernel_code, to_kernel_code};
    use super::*;

    /// Of the family's types only f3e1m1 is read as another type, i3, code by code by value:
    /// every code comes back but the negative zero, which comes back as `+0`.
    #[test]
    fn only_f3e1m1_is_read_as_an_integer_type() {
        for wd in super::super::weight_types() {
            let int = kernel_codes(wd);
            if wd != (DType::Float { exp: 1, man: 1 }) {
                assert_eq!(int, wd);
                continue;
            }
            assert_eq!(int, DType::Int(3));
            for c in 0..8 {
                let kc = to_kernel_code(wd, c);
                assert_eq!(int.decode(kc), wd.decode(c), "code {c:#05b}");
                let back = from_kernel_code(wd, kc);
                assert_eq!(back, if c == 0b100 { 0 } else { c }, "code {c:#05b}");
            }
        }
    }
}
