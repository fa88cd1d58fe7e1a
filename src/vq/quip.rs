//! Loading weights quantized by QuIP# (Tseng et al.) in its 4-bit format (two E8P codes per
//! vector of 8, the second divided by 3.45: [`super::e8p`]), as its checkpoints store a layer's
//! `Qidxs`.
//!
//! **Codes.** Stage `s` of the `[out, in / 8]` vectors has a 16-bit code per vector, the meaning
//! of [`super::e8p`] (absolute vector in the high byte, signs in the low byte). QuIP# packs each
//! stage into `[out, in / 32]` int64 and concatenates the two along the last axis: `Qidxs [out,
//! in / 16]`, stage 0 in columns `0 .. in / 32`. Within a stage, with `I` the `[out, nv]` codes
//! (`nv = in / 8`):
//!
//! - the codes are taken in 2 x 2 blocks: block `(a, b)` holds `I[2a + r, 2b + c]` for `r, c`
//!   in `{0, 1}`, numbered `i = r + 2c`;
//! - its word is `signs << 32 | abs`: `abs` holds the high byte of code `i` in bits
//!   `8i .. 8i + 8`; `signs` holds bit `j` of code `i`'s low byte at bit `4j + i`;
//! - the `[out / 2, nv / 2]` words are stored in tiles of 8 x 4: word `(8p + q, 4u + v)` at
//!   flat position `((p · nv / 8 + u) · 8 + q) · 4 + v` of the stage's `out · nv / 4` words.
//!
//! **The rest of the layer.** QuIP# computes `y = SV ⊙ 32 · Hᵣ(Ŵ · Hₗᵀ(SU ⊙ x) / 32)` with
//! random-sign vectors `SU`, `SV` and Hadamard transforms `Hₗ`, `Hᵣ` (incoherence
//! processing). [`from_quip_rvq4`] gives `Ŵ`, the part a VQ-GEMV multiplies (scales all one);
//! the transforms of `x` and `y` stay with the caller.

use super::{arg_err, VqConfig, VqError, VqWeight};

/// Words of the packed codes of one stage for an `out x in` layer.
fn stage_words(out: usize, inp: usize) -> usize {
    out * inp / 32
}

/// Where word `(row, col)` of a stage's `[out / 2, nv / 2]` block words is stored (module docs).
fn word_at(row: usize, col: usize, nv: usize) -> usize {
    let (p, q, u, v) = (row / 8, row % 8, col / 4, col % 4);
    ((p * (nv / 8) + u) * 8 + q) * 4 + v
}

/// Converts QuIP#'s `Qidxs` of a 4-bit (`E8P12RVQ4B`) layer, `[out, in / 16]` int64 (module
/// docs), to a [`VqConfig::QUIP_4`] weight `[out, in]` with unit scales. `out` must be a
/// multiple of 16 and `in` of 64 (QuIP#'s tiles).
pub fn from_quip_rvq4(qidxs: &[i64], out: usize, inp: usize) -> Result<VqWeight, VqError> {
    if out == 0 || !out.is_multiple_of(16) {
        return Err(arg_err(
            "out",
            format!("{out}: must be a positive multiple of 16"),
        ));
    }
    if inp == 0 || !inp.is_multiple_of(64) {
        return Err(arg_err(
            "inp",
            format!("{inp}: must be a positive multiple of 64"),
        ));
    }
    let words = stage_words(out, inp);
    if qidxs.len() != 2 * words {
        return Err(arg_err(
            "qidxs",
            format!(
                "{} values, expected out · in / 16 = {} ([out, in / 16] int64)",
                qidxs.len(),
                2 * words
            ),
        ));
    }
    let nv = inp / 8;
    let (per_row, half) = (nv / 2, nv / 4);
    let mut codes = vec![0u16; 2 * out * nv];
    for s in 0..2 {
        for row in 0..out / 2 {
            for col in 0..nv / 2 {
                let f = word_at(row, col, nv);
                let w = qidxs[(f / half) * per_row + s * half + f % half] as u64;
                let (abs, signs) = (w as u32, (w >> 32) as u32);
                for i in 0..4 {
                    let (r, c) = (i % 2, i / 2);
                    let high = (abs >> (8 * i)) & 0xFF;
                    let low = (0..8).fold(0, |acc, j| acc | ((signs >> (4 * j + i)) & 1) << j);
                    codes[(s * out + 2 * row + r) * nv + 2 * col + c] = (high << 8 | low) as u16;
                }
            }
        }
    }
    VqWeight::from_e8p_codes(VqConfig::QUIP_4, out, inp, codes, Some(vec![1.0; out]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// QuIP#'s packing written as the module docs state it, block by block.
    fn pack(codes: &[u16], out: usize, inp: usize) -> Vec<i64> {
        let nv = inp / 8;
        let words = stage_words(out, inp);
        let mut q = vec![0i64; 2 * words];
        for s in 0..2 {
            let code = |r: usize, c: usize| codes[(s * out + r) * nv + c] as u64;
            for a in 0..out / 2 {
                for b in 0..nv / 2 {
                    let (mut abs, mut signs) = (0u64, 0u64);
                    for i in 0..4 {
                        let x = code(2 * a + i % 2, 2 * b + i / 2);
                        abs |= (x >> 8) << (8 * i);
                        for j in 0..8 {
                            signs |= ((x >> j) & 1) << (4 * j + i);
                        }
                    }
                    let f = word_at(a, b, nv);
                    q[(f / (nv / 4)) * (nv / 2) + s * (nv / 4) + f % (nv / 4)] =
                        (signs << 32 | abs) as i64;
                }
            }
        }
        q
    }

    #[test]
    fn quip_layout_round_trips_and_checks_its_arguments() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x9_0418);
        let (out, inp) = (48, 192);
        let codes: Vec<u16> = (0..2 * out * inp / 8).map(|_| rng.random()).collect();
        let q = pack(&codes, out, inp);
        // Every bit of a word is used: the sign half sets bit 63 somewhere.
        assert!(q.iter().any(|&w| w < 0));
        let w = from_quip_rvq4(&q, out, inp).unwrap();
        assert_eq!(w.codes, codes);
        assert_eq!(w.config, VqConfig::QUIP_4);
        assert_eq!(w.scales.as_deref(), Some(&vec![1.0; out][..]));
        let e = from_quip_rvq4(&q[1..], out, inp).unwrap_err().to_string();
        assert!(e.contains("`qidxs`"), "{e}");
        let e = from_quip_rvq4(&q, 40, inp).unwrap_err().to_string();
        assert!(e.contains("`out`"), "{e}");
        let e = from_quip_rvq4(&q, out, 96).unwrap_err().to_string();
        assert!(e.contains("`inp`"), "{e}");
    }
}
