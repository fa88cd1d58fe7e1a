//! The tight loops of an import: int32 words of GPTQ / AWQ into the project's compact
//! row-major codes (`tilus_core::storage`: value `j` at stream bits `[j b, (j + 1) b)`, LSB
//! first), rows in parallel. Words are read as little-endian from possibly unaligned bytes.

use crate::parallel::for_each_chunk_mut;

#[inline(always)]
fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// Pack `n` values `value(c)` of `BITS` bits into `out` (`n * BITS / 8` bytes, storage order).
#[inline(always)]
fn pack_row<const BITS: usize>(out: &mut [u8], n: usize, value: impl Fn(usize) -> u32) {
    match BITS {
        8 => {
            for (c, o) in out.iter_mut().enumerate().take(n) {
                *o = value(c) as u8;
            }
        }
        4 => {
            for (i, o) in out.iter_mut().enumerate().take(n / 2) {
                *o = (value(2 * i) | (value(2 * i + 1) << 4)) as u8;
            }
        }
        2 => {
            for (i, o) in out.iter_mut().enumerate().take(n / 4) {
                let c = 4 * i;
                *o = (value(c) | (value(c + 1) << 2) | (value(c + 2) << 4) | (value(c + 3) << 6))
                    as u8;
            }
        }
        _ => {
            // Any width: a bit accumulator (3-bit values straddle bytes).
            let (mut acc, mut have, mut at) = (0u64, 0usize, 0usize);
            for c in 0..n {
                acc |= (value(c) as u64) << have;
                have += BITS;
                while have >= 8 {
                    out[at] = acc as u8;
                    at += 1;
                    acc >>= 8;
                    have -= 8;
                }
            }
            if have > 0 {
                out[at] = acc as u8;
            }
        }
    }
}

/// GPTQ `qweight` (`[k * BITS / 32, n]` little-endian words, column `c`'s values a bit stream
/// down its words: value `r` at bits `[r BITS, (r + 1) BITS)` of the concatenated words) into
/// compact row-major `[k, n]` codes; output row `j` is checkpoint row `perm[j]` (or `j`).
/// The caller checked the sizes: `words.len() == k * BITS / 32 * n * 4`, `n * BITS % 8 == 0`.
fn unpack_k_packed_bits<const BITS: usize>(
    words: &[u8],
    k: usize,
    n: usize,
    perm: Option<&[u32]>,
) -> Vec<u8> {
    let row_bytes = n * BITS / 8;
    let mut codes = vec![0u8; k * row_bytes];
    let mask = (1u32 << BITS) - 1;
    for_each_chunk_mut(&mut codes, row_bytes, |j, out| {
        let r = perm.map_or(j, |p| p[j] as usize);
        let (w, off) = (r * BITS / 32, r * BITS % 32);
        let row = &words[w * n * 4..(w + 1) * n * 4];
        if off + BITS <= 32 {
            pack_row::<BITS>(out, n, |c| (word(row, c) >> off) & mask);
        } else {
            // Straddles two words (3-bit): the high bits come from the next word row.
            let next = &words[(w + 1) * n * 4..(w + 2) * n * 4];
            pack_row::<BITS>(out, n, |c| {
                ((word(row, c) >> off) | (word(next, c) << (32 - off))) & mask
            });
        }
    });
    codes
}

/// The 4-bit GPTQ case without a permutation, 8 rows at a time: one word holds rows
/// `8 w .. 8 w + 8` of a column, so two neighbouring columns' words give the 8 bytes of those
/// columns in the 8 rows (even rows from the low nibbles of each byte pair, odd from the high).
fn unpack_k_packed_u4_rows(words: &[u8], k: usize, n: usize) -> Vec<u8> {
    let row_bytes = n / 2;
    let mut codes = vec![0u8; k * row_bytes];
    for_each_chunk_mut(&mut codes, 8 * row_bytes, |w, out| {
        let row = &words[w * n * 4..(w + 1) * n * 4];
        for (i, pair) in row.chunks_exact(8).enumerate() {
            let a = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]);
            let b = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
            // Byte j of `even` is rows 2j of columns (2i, 2i + 1); of `odd`, rows 2j + 1.
            let even = (a & 0x0F0F_0F0F) | ((b & 0x0F0F_0F0F) << 4);
            let odd = ((a >> 4) & 0x0F0F_0F0F) | (b & 0xF0F0_F0F0);
            for j in 0..4 {
                out[(2 * j) * row_bytes + i] = (even >> (8 * j)) as u8;
                out[(2 * j + 1) * row_bytes + i] = (odd >> (8 * j)) as u8;
            }
        }
    });
    codes
}

pub(crate) fn unpack_k_packed(
    words: &[u8],
    bits: usize,
    k: usize,
    n: usize,
    perm: Option<&[u32]>,
) -> Vec<u8> {
    match bits {
        4 if perm.is_none() && k.is_multiple_of(8) => unpack_k_packed_u4_rows(words, k, n),
        2 => unpack_k_packed_bits::<2>(words, k, n, perm),
        3 => unpack_k_packed_bits::<3>(words, k, n, perm),
        4 => unpack_k_packed_bits::<4>(words, k, n, perm),
        8 => unpack_k_packed_bits::<8>(words, k, n, perm),
        _ => unreachable!("bit widths are checked before unpacking"),
    }
}

/// Values packed along a row as a bit stream over consecutive words (GPTQ `qzeros`,
/// `[rows, n * bits / 32]`): value `c` of row `g` at bits `[c bits, (c + 1) bits)`.
pub(crate) fn unpack_n_stream(words: &[u8], bits: usize, rows: usize, n: usize) -> Vec<u32> {
    let per_row = n * bits / 32;
    let mask = ((1u64 << bits) - 1) as u32;
    let mut out = Vec::with_capacity(rows * n);
    for g in 0..rows {
        for c in 0..n {
            let bit = c * bits;
            let (w, off) = (g * per_row + bit / 32, bit % 32);
            let mut v = word(words, w) as u64 >> off;
            if off + bits > 32 {
                v |= (word(words, w + 1) as u64) << (32 - off);
            }
            out.push(v as u32 & mask);
        }
    }
    out
}

/// AutoAWQ's packing order: nibble `j` of a word holds column `8 w + AWQ_ORDER[j]`.
pub const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
/// Its inverse: column `8 w + c` is in nibble `AWQ_REVERSE_ORDER[c]`.
pub const AWQ_REVERSE_ORDER: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// AWQ 4-bit `qweight` (`[k, n / 8]` words in AWQ order) into compact row-major `[k, n]`
/// codes. Columns `2 i, 2 i + 1` of a word (output byte `i`) sit in nibbles `i` and `i + 4`.
pub(crate) fn unpack_awq4(words: &[u8], k: usize, n: usize) -> Vec<u8> {
    let row_bytes = n / 2;
    let mut codes = vec![0u8; k * row_bytes];
    for_each_chunk_mut(&mut codes, row_bytes, |r, out| {
        // n / 8 words of 4 bytes: as many bytes as the output row.
        let row = &words[r * row_bytes..(r + 1) * row_bytes];
        for (w, o) in out.chunks_exact_mut(4).enumerate() {
            let v = word(row, w);
            for (i, b) in o.iter_mut().enumerate() {
                *b = (((v >> (4 * i)) & 0xF) | (((v >> (4 * i + 16)) & 0xF) << 4)) as u8;
            }
        }
    });
    codes
}

/// AWQ 4-bit `qzeros` (`[rows, n / 8]` words in AWQ order) as `[rows, n]` values.
pub(crate) fn unpack_awq4_values(words: &[u8], rows: usize, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; rows * n];
    for (w, chunk) in out.chunks_exact_mut(8).enumerate() {
        let v = word(words, w);
        for (c, o) in chunk.iter_mut().enumerate() {
            *o = (v >> (4 * AWQ_REVERSE_ORDER[c])) & 0xF;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilus_core::{storage, DType};

    fn to_bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn awq_orders_are_inverse() {
        for c in 0..8 {
            assert_eq!(AWQ_ORDER[AWQ_REVERSE_ORDER[c]], c);
        }
    }

    #[test]
    fn k_packed_matches_a_bit_by_bit_reading() {
        for bits in [2usize, 3, 4, 8] {
            let (k, n) = (64usize, 16usize);
            let words: Vec<u32> = (0..k * bits / 32 * n)
                .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7))
                .collect();
            let bytes = to_bytes(&words);
            // The identity and a reversal (the 4-bit fast path and the general one).
            let rev: Vec<u32> = (0..k as u32).rev().collect();
            for perm in [None, Some(&rev[..])] {
                let codes = unpack_k_packed(&bytes, bits, k, n, perm);
                let got = storage::unpack(DType::UInt(bits as u8), &codes, k * n);
                for j in 0..k {
                    let r = perm.map_or(j, |p| p[j] as usize);
                    for c in 0..n {
                        let mut v = 0u32;
                        for b in 0..bits {
                            let bit = r * bits + b;
                            let w = words[(bit / 32) * n + c];
                            v |= ((w >> (bit % 32)) & 1) << b;
                        }
                        assert_eq!(got[j * n + c], v, "bits {bits} row {j} col {c} {perm:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn awq_nibbles_follow_the_order() {
        // Column c of word 0 holds value c + 1: nibble j holds AWQ_ORDER[j] + 1.
        let w: u32 = (0..8).map(|j| ((AWQ_ORDER[j] as u32) + 1) << (4 * j)).sum();
        let bytes = to_bytes(&[w]);
        let codes = unpack_awq4(&bytes, 1, 8);
        assert_eq!(
            storage::unpack(DType::UInt(4), &codes, 8),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(unpack_awq4_values(&bytes, 1, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
