//! QuIP#'s E8P lattice codebook (Tseng et al., "QuIP#: Even Better LLM Quantization with
//! Hadamard Incoherence and Lattice Codebooks"), the codebook of [`super::VqConfig::QUIP_4`].
//!
//! A 16-bit code names one of 2^16 points of `E8 + 1/4` in 8 dimensions without a stored
//! codebook: its high byte picks one of 256 **absolute vectors** (the 227 vectors of
//! `{1/2, 3/2, 5/2}^8` with squared norm at most 10, in lexicographic order, then 29 of squared
//! norm 12 with five 3/2 and three 1/2), its low byte eight **sign bits**, and the parity of the
//! sign bits the **shift**, `+1/4` when even and `-1/4` when odd. QuIP#'s 4-bit format adds two
//! such codes per vector, the second scaled by `1 / 3.45` ([`RESID_SCALE`]).
//!
//! Decoding code `c` of stage `s` (as QuIP#'s 4-bit codebook defines it, so that its codes mean
//! the same here):
//!
//! - `a = c >> 8`, `b = c & 255`, `p = popcount(b) & 1`, `b' = b ^ p` (the parity folds into
//!   bit 0);
//! - the absolute vector `A[a]`, with dimension 7 negated when the sum of `A[a]` is odd (so that
//!   every decoded point lies in the lattice);
//! - `value[i] = ±A[a][i] + (p ? -1/4 : +1/4)`, negative where bit `SIGN_BIT[i]` of `b'` is
//!   set; stage `s` divides the vector and the shift by `3.45^s`.
//!
//! In f16, as the kernels compute it: the scaled vector and shift are rounded to f16, the sign
//! is an XOR of the f16 sign bit, and the sum is rounded once. [`decode`] does exactly that, so
//! the expanded codebooks ([`codebooks`]) hold the kernels' values bit for bit.

use half::f16;

/// The second stage's divisor in QuIP#'s 4-bit format (two E8P codes per vector).
pub const RESID_SCALE: f32 = 3.45;

/// The sign bit (of the low byte) of each output dimension.
pub const SIGN_BIT: [u32; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// The dimensions holding `1/2` in the 29 absolute vectors of squared norm 12 (the others hold
/// `3/2`), in QuIP#'s order: absolute vectors 227..256.
const NORM12_HALVES: [[usize; 3]; 29] = [
    [1, 2, 3],
    [0, 2, 3],
    [0, 1, 3],
    [0, 1, 2],
    [3, 6, 7],
    [3, 5, 7],
    [3, 4, 7],
    [3, 5, 6],
    [3, 4, 6],
    [3, 4, 5],
    [2, 6, 7],
    [2, 5, 7],
    [2, 4, 7],
    [2, 5, 6],
    [2, 4, 6],
    [2, 4, 5],
    [1, 6, 7],
    [1, 5, 7],
    [1, 4, 7],
    [1, 5, 6],
    [1, 4, 6],
    [0, 4, 5],
    [0, 6, 7],
    [0, 5, 7],
    [0, 4, 7],
    [0, 5, 6],
    [0, 4, 6],
    [0, 1, 4],
    [2, 3, 7],
];

/// The 256 absolute vectors, dimension 7 negated where the vector's sum is odd (module docs).
pub fn abs_grid() -> Vec<[f32; 8]> {
    // Every vector of {1/2, 3/2, 5/2}^8 with squared norm <= 10, in lexicographic order
    // (digit d stands for d + 1/2; odometer order is lexicographic).
    let mut grid = Vec::with_capacity(256);
    for i in 0..3usize.pow(8) {
        let mut v = [0f32; 8];
        let mut rest = i;
        for d in (0..8).rev() {
            v[d] = (rest % 3) as f32 + 0.5;
            rest /= 3;
        }
        if v.iter().map(|x| x * x).sum::<f32>() <= 10.0 {
            grid.push(v);
        }
    }
    debug_assert_eq!(grid.len(), 227);
    for halves in NORM12_HALVES {
        let mut v = [1.5f32; 8];
        for d in halves {
            v[d] = 0.5;
        }
        grid.push(v);
    }
    for v in &mut grid {
        if v.iter().sum::<f32>() as i32 % 2 == 1 {
            v[7] = -v[7];
        }
    }
    grid
}

/// `x / RESID_SCALE^stage` rounded to f16.
fn scaled(x: f32, stage: usize) -> f16 {
    f16::from_f32(x / RESID_SCALE.powi(stage as i32))
}

/// The low byte's XOR masks of the f16 sign bits, dimension by dimension (module docs).
pub fn sign_mask(low: u8) -> [u16; 8] {
    let b = low ^ (low.count_ones() & 1) as u8;
    SIGN_BIT.map(|bit| if b >> bit & 1 == 1 { 0x8000 } else { 0 })
}

/// The shift of a low byte in stage `stage`, in f16.
pub fn shift(low: u8, stage: usize) -> f16 {
    scaled(
        if low.count_ones().is_multiple_of(2) {
            0.25
        } else {
            -0.25
        },
        stage,
    )
}

/// Code `code` of stage `stage`, decoded in f16 as the kernels do (module docs), as f32.
pub fn decode(grid: &[[f32; 8]], code: u16, stage: usize) -> [f32; 8] {
    let (a, low) = ((code >> 8) as usize, code as u8);
    let mask = sign_mask(low);
    let sh = shift(low, stage).to_f32();
    std::array::from_fn(|i| {
        let signed = f16::from_bits(scaled(grid[a][i], stage).to_bits() ^ mask[i]).to_f32();
        f16::from_f32(signed + sh).to_f32()
    })
}

/// The expanded codebooks of `residuals` stages, `[residuals, 65536, 8]`: entry `c` of stage
/// `s` is `decode(c, s)`.
pub fn codebooks(residuals: usize) -> Vec<f32> {
    let grid = abs_grid();
    let mut out = Vec::with_capacity(residuals << 19);
    for s in 0..residuals {
        for c in 0..=u16::MAX {
            out.extend_from_slice(&decode(&grid, c, s));
        }
    }
    out
}

/// Rows of [`kernel_table`] (8 f16 each) for `residuals` stages and `replicas` copies.
pub fn kernel_table_rows(residuals: usize, replicas: usize) -> usize {
    (residuals + 1) * 256 * replicas + 2 * residuals
}

/// What the codebook-centric kernel reads for an E8P format, `[kernel_table_rows, 8]` f16:
/// rows `s · 256 + a` the absolute vector `a` of stage `s` (scaled), rows `residuals · 256 + b`
/// the sign masks of low byte `b` (f16 bit patterns), each stored `replicas` times in a row
/// (row `i`'s copy `c` is row `i · replicas + c`, so that lanes reading distinct copies hit
/// distinct banks); then, once (a warp reads two of them: broadcasts), rows `(residuals + 1) ·
/// 256 · replicas + 2 s + p`, the shift of stage `s` for parity `p` in every dimension.
pub fn kernel_table(residuals: usize, replicas: usize) -> Vec<f16> {
    let grid = abs_grid();
    let mut rows = vec![[f16::ZERO; 8]; (residuals + 1) * 256];
    let mut shifts = Vec::with_capacity(2 * residuals);
    for s in 0..residuals {
        for (a, v) in grid.iter().enumerate() {
            rows[s * 256 + a] = v.map(|x| scaled(x, s));
        }
        for p in 0..2u8 {
            shifts.push([shift(p, s); 8]);
        }
    }
    for b in 0..=255u8 {
        rows[residuals * 256 + b as usize] = sign_mask(b).map(f16::from_bits);
    }
    rows.iter()
        .flat_map(|r| std::iter::repeat_n(r, replicas))
        .chain(&shifts)
        .flatten()
        .copied()
        .collect()
}
