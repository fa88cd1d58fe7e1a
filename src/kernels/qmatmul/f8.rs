//! The host side of [`QMatmulMethod::GemvF8`](super::QMatmulMethod::GemvF8): its tile rules
//! (the kernel is `kernel::qmatmul_gemv_f8`).
//!
//! **Weights.** A 1-, 2- or 4-bit code `c` masked into the low nibble of an e4m3 byte, with
//! every other bit zero, is the e4m3 value `c · 2^-9` exactly (subnormals below 8, then
//! exponent 1): one `lop3` on a 32-bit word makes four fp8 weights of `mma.m16n8k32`'s A operand,
//! against one per two f16 weights. A byte holds `P = 8 / bits` codes, field `f` at bits
//! `bits · f`; field `f` of every byte of a thread's tile belongs to the k-range
//! `[f · bk / P, (f + 1) · bk / P)` of the tile, so a thread's bytes are `P` fp8 fragments of
//! `bk / P` rows of k each. Field `f` is `(word >> 4 (f / Q)) & mask_f` with `Q = 4 / bits`
//! fields a nibble: the code times `γ_f = 2^(bits (f % Q) - 9)`. Signed codes are stored in
//! offset binary (`c + 2^(bits - 1)`, the sign bit flipped), the offset subtracted once per
//! group.
//!
//! **Activations.** fp8 has 4 significant bits; f16 has 11. Each scale group's activations,
//! scaled by `σ = 0.5 / max|x|` and by `1 / γ_f` of their field (so that every product is
//! `σ x c`), are split into three e4m3 terms `t1 + t2 + t3` (each the residual of the others,
//! rounded to nearest): together within `2^-12` of the scaled value or half an e4m3 subnormal
//! step, `2^-19 max|x|` of the activation, below f16's own rounding. At one token the mma's 8
//! columns are 7/8 padding; the three terms take three of them, so the split costs no mma.
//! The block splits its k-slice once, into shared memory, before its k loop. Per group the
//! accumulator is scaled by `s / σ` and the zero point's (or the offset's) `s z Σx` is taken
//! off; the three columns are added at the end.

use super::config::{config_err, QMatmulConfig, QMatmulError, Tiling};
use crate::DType;

/// The longest k-slice (`k / split_k`) a block splits into shared memory: three terms of
/// 4096 bytes.
pub const MAX_SLICE: usize = 4096;

/// Weight codes per byte for the method's weight types (1, 2 or 4 bits, integers).
pub(crate) fn fields_per_byte(wdtype: DType) -> Option<usize> {
    match wdtype {
        DType::UInt(b) | DType::Int(b) if matches!(b, 1 | 2 | 4) => Some(8 / b as usize),
        _ => None,
    }
}

/// [`QMatmulConfig::tiling`] of [`QMatmulMethod::GemvF8`](super::QMatmulMethod::GemvF8): one
/// token a block, `warps` warps along n of `bn / (16 warps)` fragments of 16 columns; errors
/// name the field at fault.
pub(crate) fn gemv_f8_tiling(c: &QMatmulConfig) -> Result<Tiling, QMatmulError> {
    let Some(p) = fields_per_byte(c.wdtype) else {
        return Err(config_err(
            "wdtype",
            format!(
                "the fp8 gemv masks 1-, 2- or 4-bit integer codes into e4m3 bytes, not {}",
                c.wdtype
            ),
        ));
    };
    if c.bm != 1 {
        return Err(config_err(
            "bm",
            format!("{}; the fp8 gemv computes one token a block (bm = 1)", c.bm),
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
            format!("{}; the fp8 gemv takes 1, 2, 4, 8 or 16 warps", c.warps),
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
    match c.group_rows {
        Some(g)
            if g.is_multiple_of(c.bk)
                && g <= MAX_SLICE
                && (MAX_SLICE / g).is_multiple_of(c.warps) => {}
        Some(g) => {
            return Err(config_err(
                "group_rows",
                format!(
                    "{g}: the fp8 gemv scales the accumulator once per group of whole k tiles \
                     (a multiple of bk = {}), and its warps split the activations a group \
                     each ({} / group a multiple of {} warps)",
                    c.bk, MAX_SLICE, c.warps
                ),
            ))
        }
        None => {
            return Err(config_err(
                "group_rows",
                "the fp8 gemv needs grouped scales: the activations are scaled per group",
            ))
        }
    }
    let why = if c.stream_k != 0 {
        Some(("stream_k", "a schedule of the warpgroup gemv"))
    } else if c.specialize {
        Some(("specialize", "a schedule of the warpgroup gemv"))
    } else if c.stage_tiles != 1 {
        Some(("stage_tiles", "a schedule of the warpgroup gemv"))
    } else if c.blocks_per_sm != 1 {
        Some(("blocks_per_sm", "1 for the fp8 gemv"))
    } else {
        None
    };
    if let Some((field, what)) = why {
        return Err(config_err(field, format!("{what}, not the fp8 gemv's")));
    }
    let bits = c.wdtype.bits() as usize;
    let rep_n = c.bn / (16 * c.warps);
    let locals_per_thread = c.bk * rep_n * 16 / 32;
    let bytes_per_thread = locals_per_thread * bits / 8;
    let vector_bytes = [16, 8, 4, 2, 1]
        .into_iter()
        .find(|v| bytes_per_thread.is_multiple_of(*v))
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
