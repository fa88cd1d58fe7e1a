//! [`AptMatrix`]: a `[rows, k]` matrix quantized per row to bipolar-INT codes, with one f32
//! scale per row: weights per output channel (a row is one output's `k` weights), activations
//! per token. A row's values are `scale · value(code)`.
//!
//! **Scales.** `amax` is the row's largest `|x|` (at least `2^-100`, so an all-zero row gets a
//! tiny scale instead of a division by zero), and `scale = amax / (2^b - 1)` ([`ScaleRule::Max`]:
//! the row's extremes land on `±(2^b - 1)`). For 1-bit weights the mean of `|x|` is the better
//! scale ([`ScaleRule::MeanAbs`], the least-squares scale of a sign matrix). Codes are then
//! `t = x · (1 / scale)` rounded to the nearest odd integer, `2·floor(t/2) + 1`, clamped: all in
//! f32, the operations the activation kernels perform, so host and GPU codes agree exactly. The
//! reciprocal is taken once per row: a product per element instead of an IEEE division (about
//! ten instructions and a slow-path call each on the GPU), and still exactly reproducible.
//!
//! **Bit planes** ([`AptMatrix::planes`]): plane `p` of the matrix holds bit `p` of every code,
//! packed 32 per `u32` along k, least significant bit first: word `w` of row `r` of plane `p`
//! has bit `i` = bit `p` of `code[r, 32 w + i]`. The planes are stored `[bits][rows][k / 32]`,
//! the layout the GEMM loads (`docs/apt.md`).

use super::{AptError, Bipolar};

/// How a row's scale is chosen (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleRule {
    /// `max |x| / (2^b - 1)`.
    Max,
    /// `mean |x|` (meant for 1 bit).
    MeanAbs,
}

/// The smallest `amax` a row's scale is computed from: `2^-100`.
pub const MIN_AMAX: f32 = 7.888_609e-31;

/// A `[rows, k]` matrix of bipolar-INT codes with a scale per row.
#[derive(Clone, Debug, PartialEq)]
pub struct AptMatrix {
    rows: usize,
    k: usize,
    format: Bipolar,
    codes: Vec<u8>,
    scales: Vec<f32>,
}

/// The scale of one row under `rule`.
pub fn row_scale(row: &[f32], format: Bipolar, rule: ScaleRule) -> f32 {
    match rule {
        ScaleRule::Max => {
            let amax = row.iter().fold(0f32, |m, &x| m.max(x.abs()));
            amax.max(MIN_AMAX) / format.max() as f32
        }
        ScaleRule::MeanAbs => {
            let mean = row.iter().map(|&x| x.abs() as f64).sum::<f64>() / row.len() as f64;
            (mean as f32).max(MIN_AMAX)
        }
    }
}

impl AptMatrix {
    /// Quantize row-major `x[rows * k]` to `bits`-bit bipolar-INT, one scale per row.
    pub fn quantize(
        x: &[f32],
        rows: usize,
        k: usize,
        bits: u32,
        rule: ScaleRule,
    ) -> Result<AptMatrix, AptError> {
        let format = Bipolar::new(bits)?;
        check_dims(rows, k)?;
        let len = rows.checked_mul(k).ok_or(AptError::Overflow {
            reason: format!("rows * k = {rows} * {k} overflows usize"),
        })?;
        if x.len() != len {
            return Err(AptError::Len {
                arg: "x",
                expected: len,
                got: x.len(),
            });
        }
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(AptError::NotFinite {
                arg: "x",
                row: i / k,
                col: i % k,
                value: x[i],
            });
        }
        let max = format.max();
        let mut codes = Vec::with_capacity(len);
        let mut scales = Vec::with_capacity(rows);
        for row in x.chunks(k) {
            let s = row_scale(row, format, rule);
            scales.push(s);
            let inv = 1.0 / s;
            codes.extend(
                row.iter()
                    .map(|&v| ((format.nearest(v * inv) + max) / 2) as u8),
            );
        }
        Ok(AptMatrix {
            rows,
            k,
            format,
            codes,
            scales,
        })
    }

    /// A matrix from its codes (`[rows * k]`, each below `2^bits`) and row scales.
    pub fn from_codes(
        codes: Vec<u8>,
        rows: usize,
        k: usize,
        bits: u32,
        scales: Vec<f32>,
    ) -> Result<AptMatrix, AptError> {
        let format = Bipolar::new(bits)?;
        check_dims(rows, k)?;
        if codes.len() != rows * k {
            return Err(AptError::Len {
                arg: "codes",
                expected: rows * k,
                got: codes.len(),
            });
        }
        if scales.len() != rows {
            return Err(AptError::Len {
                arg: "scales",
                expected: rows,
                got: scales.len(),
            });
        }
        if let Some(&c) = codes.iter().find(|&&c| (c as u32) >> bits != 0) {
            return Err(AptError::Code {
                code: c as u32,
                bits,
            });
        }
        Ok(AptMatrix {
            rows,
            k,
            format,
            codes,
            scales,
        })
    }

    /// The matrix whose bit planes are `planes` (`[bits][rows][k / 32]`, see the module docs).
    pub fn from_planes(
        planes: &[u32],
        rows: usize,
        k: usize,
        bits: u32,
        scales: Vec<f32>,
    ) -> Result<AptMatrix, AptError> {
        Bipolar::new(bits)?;
        check_dims(rows, k)?;
        if !k.is_multiple_of(32) {
            return Err(AptError::K { k, multiple: 32 });
        }
        let kw = k / 32;
        let expected = bits as usize * rows * kw;
        if planes.len() != expected {
            return Err(AptError::Len {
                arg: "planes",
                expected,
                got: planes.len(),
            });
        }
        let mut codes = vec![0u8; rows * k];
        for p in 0..bits as usize {
            for r in 0..rows {
                for w in 0..kw {
                    let word = planes[(p * rows + r) * kw + w];
                    for i in 0..32 {
                        codes[r * k + 32 * w + i] |= (((word >> i) & 1) as u8) << p;
                    }
                }
            }
        }
        AptMatrix::from_codes(codes, rows, k, bits, scales)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn bits(&self) -> u32 {
        self.format.bits()
    }
    pub fn format(&self) -> Bipolar {
        self.format
    }
    /// The codes, row-major `[rows, k]`.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }
    /// One scale per row.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// The bipolar value at `(r, c)`: `2·code - (2^bits - 1)`.
    pub fn value(&self, r: usize, c: usize) -> i32 {
        2 * self.codes[r * self.k + c] as i32 - self.format.max()
    }

    /// `Σ_k code` per row (the correction term of the AND form of the bipolar product).
    pub fn row_sums(&self) -> Vec<i32> {
        self.codes
            .chunks(self.k)
            .map(|r| r.iter().map(|&c| c as i32).sum())
            .collect()
    }

    /// The bit planes, `[bits][rows][k / 32]` words (k must be a multiple of 32).
    pub fn planes(&self) -> Result<Vec<u32>, AptError> {
        if !self.k.is_multiple_of(32) {
            return Err(AptError::K {
                k: self.k,
                multiple: 32,
            });
        }
        let (rows, kw) = (self.rows, self.k / 32);
        let mut out = vec![0u32; self.bits() as usize * rows * kw];
        for p in 0..self.bits() as usize {
            for r in 0..rows {
                for w in 0..kw {
                    let mut word = 0u32;
                    for i in 0..32 {
                        word |= (((self.codes[r * self.k + 32 * w + i] >> p) & 1) as u32) << i;
                    }
                    out[(p * rows + r) * kw + w] = word;
                }
            }
        }
        Ok(out)
    }

    /// `scale · value` per element, row-major, in f64.
    pub fn dequantize(&self) -> Vec<f64> {
        (0..self.rows * self.k)
            .map(|i| self.scales[i / self.k] as f64 * self.value(i / self.k, i % self.k) as f64)
            .collect()
    }
}

fn check_dims(rows: usize, k: usize) -> Result<(), AptError> {
    if rows == 0 {
        return Err(AptError::Empty { arg: "rows" });
    }
    if k == 0 {
        return Err(AptError::Empty { arg: "k" });
    }
    Ok(())
}

/// `Σ_k v_a[i, k] · v_w[j, k]` for every `(i, j)`, in i64 from the bipolar values: the exact
/// integer the GEMM's recovery computes, row-major `[a.rows, w.rows]`.
pub fn bipolar_products(a: &AptMatrix, w: &AptMatrix) -> Vec<i64> {
    let k = a.k();
    let mut out = vec![0i64; a.rows() * w.rows()];
    for i in 0..a.rows() {
        for j in 0..w.rows() {
            out[i * w.rows() + j] = (0..k)
                .map(|c| a.value(i, c) as i64 * w.value(j, c) as i64)
                .sum();
        }
    }
    out
}

/// `Σ_k code_a[i, k] · code_w[j, k]` (unsigned codes) for every `(i, j)`, in i64: what the
/// plane-pair MMAs and the shift-and-add recovery accumulate before the bipolar correction.
pub fn code_products(a: &AptMatrix, w: &AptMatrix) -> Vec<i64> {
    let k = a.k();
    let mut out = vec![0i64; a.rows() * w.rows()];
    for i in 0..a.rows() {
        for j in 0..w.rows() {
            out[i * w.rows() + j] = (0..k)
                .map(|c| a.codes()[i * k + c] as i64 * w.codes()[j * k + c] as i64)
                .sum();
        }
    }
    out
}
