//! Host-side weight quantization: any 1-8 bit type, group-wise scales, optional zero points.
//!
//! A weight `W[k, n]` (row-major, `k` the reduction dimension) is split into groups of `group`
//! consecutive rows per column; each group gets one scale (and, for unsigned types quantized
//! asymmetrically, one zero point). Dequantization is `w = (decode(code) - zero) * scale`.
//!
//! Scales and zero points are rounded to the activation dtype (f16 or bf16) as soon as they are
//! chosen, and codes are computed against the *rounded* scale: the f64 reference built from
//! [`QuantizedWeight::dequantize`] is then exactly what a kernel multiplies with.

use crate::core::storage;
use crate::DType;
use half::{bf16, f16};

/// How many rows of `k` share one scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// One scale per output channel (per column, over all of `k`).
    PerChannel,
    /// One scale per `size` rows of each column (32, 64, 128, ... any divisor of `k`).
    Rows(usize),
}

impl Group {
    /// Rows per group for a weight with `k` rows.
    pub fn rows(self, k: usize) -> usize {
        match self {
            Group::PerChannel => k,
            Group::Rows(size) => size,
        }
    }
}

/// Bad input to [`QuantizedWeight::quantize`]; each names the argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantError {
    #[error("argument `weight`: expected k * n = {expected} values, got {got}")]
    WeightLen { expected: usize, got: usize },
    #[error("argument `weight`: value at row {row}, column {col} is not finite ({value})")]
    NotFinite { row: usize, col: usize, value: f32 },
    #[error("argument `dtype`: {dtype} is not a weight type; use u1..u8, i2..i8 or a float of 3 to 8 bits")]
    NotAWeightType { dtype: DType },
    #[error("argument `scale_dtype`: scales are stored as f16 or bf16, not {dtype}")]
    ScaleDType { dtype: DType },
    #[error("argument `group`: {rows} rows per group does not divide k = {k}")]
    Group { rows: usize, k: usize },
    #[error("argument `{name}`: must be positive")]
    Empty { name: &'static str },
    #[error("argument `asymmetric`: zero points apply to unsigned types only, not {dtype}")]
    ZeroPointType { dtype: DType },
}

/// A quantized weight matrix `[k, n]`, codes packed row-major with no gaps.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedWeight {
    pub dtype: DType,
    pub k: usize,
    pub n: usize,
    pub group: Group,
    /// Compact storage of the `k * n` codes, row-major.
    pub codes: Vec<u8>,
    /// The dtype scales (and zero points) are rounded to: f16 or bf16.
    pub scale_dtype: DType,
    /// `[k / rows, n]` scales, already rounded to `scale_dtype`.
    pub scales: Vec<f32>,
    /// `[k / rows, n]` zero points (in code units, rounded to `scale_dtype`), for asymmetric
    /// quantization of unsigned types.
    pub zeros: Option<Vec<f32>>,
}

/// The largest code value of a weight type (unsigned: `2^b - 1`), or `None` for non-weight types.
fn weight_range(dtype: DType) -> Option<f64> {
    match dtype {
        DType::UInt(b) if b <= 8 => Some(((1u32 << b) - 1) as f64),
        DType::Int(b) if b <= 8 => Some(((1u32 << (b - 1)) - 1) as f64),
        DType::Float { .. } | DType::F8E4M3 | DType::F8E5M2 => {
            let max_code = (0..1u32 << dtype.bits())
                .map(|c| dtype.decode(c))
                .filter(|v| v.is_finite())
                .fold(0.0f64, f64::max);
            Some(max_code)
        }
        _ => None,
    }
}

fn round_to(dtype: DType, v: f64) -> f32 {
    match dtype {
        DType::BF16 => bf16::from_f64(v).to_f32(),
        _ => f16::from_f64(v).to_f32(),
    }
}

impl QuantizedWeight {
    /// Quantize row-major `weight[k * n]` to `dtype` with round-to-nearest codes.
    ///
    /// Unsigned types use a zero point: per group when `asymmetric`, otherwise the fixed
    /// midpoint `(2^b - 1) / 2`. Signed integers and floats are symmetric (`scale = max|w| / max`).
    pub fn quantize(
        weight: &[f32],
        k: usize,
        n: usize,
        dtype: DType,
        group: Group,
        scale_dtype: DType,
        asymmetric: bool,
    ) -> Result<QuantizedWeight, QuantError> {
        if k == 0 {
            return Err(QuantError::Empty { name: "k" });
        }
        if n == 0 {
            return Err(QuantError::Empty { name: "n" });
        }
        if weight.len() != k * n {
            return Err(QuantError::WeightLen {
                expected: k * n,
                got: weight.len(),
            });
        }
        if let Some(pos) = weight.iter().position(|w| !w.is_finite()) {
            return Err(QuantError::NotFinite {
                row: pos / n,
                col: pos % n,
                value: weight[pos],
            });
        }
        let max_q = weight_range(dtype).ok_or(QuantError::NotAWeightType { dtype })?;
        if !matches!(scale_dtype, DType::F16 | DType::BF16) {
            return Err(QuantError::ScaleDType { dtype: scale_dtype });
        }
        let unsigned = matches!(dtype, DType::UInt(_));
        if asymmetric && !unsigned {
            return Err(QuantError::ZeroPointType { dtype });
        }
        let rows = group.rows(k);
        if rows == 0 || !k.is_multiple_of(rows) {
            return Err(QuantError::Group { rows, k });
        }

        let groups = k / rows;
        // Each group's range, streaming over rows (row-major, so the inner loop is contiguous).
        let mut lo = vec![f64::MAX; groups * n];
        let mut hi = vec![f64::MIN; groups * n];
        for (r, row) in weight.chunks_exact(n).enumerate() {
            let g = r / rows;
            let (lo, hi) = (&mut lo[g * n..(g + 1) * n], &mut hi[g * n..(g + 1) * n]);
            for ((l, h), &w) in lo.iter_mut().zip(hi.iter_mut()).zip(row) {
                *l = l.min(w as f64);
                *h = h.max(w as f64);
            }
        }
        // Unsigned codes without per-group zero points are centred on the half-integer midpoint,
        // so `u1` is the signs +-scale/2 and `u4` the levels -7.5..7.5 times the scale.
        let midpoint = if unsigned { max_q / 2.0 } else { 0.0 };
        let mut scales = vec![0f32; groups * n];
        let mut zeros = vec![0f32; groups * n];
        for (i, (&lo, &hi)) in lo.iter().zip(&hi).enumerate() {
            // Scale so the group's range fills the type's; an all-zero group keeps scale 1.
            let (scale, zero) = if asymmetric {
                let span = hi.max(0.0) - lo.min(0.0);
                let scale = if span > 0.0 { span / max_q } else { 1.0 };
                let scale = round_to(scale_dtype, scale) as f64;
                let zero = (-lo.min(0.0) / scale).round().clamp(0.0, max_q);
                (scale, round_to(scale_dtype, zero) as f64)
            } else {
                let amax = lo.abs().max(hi.abs());
                let range = if unsigned { midpoint } else { max_q };
                let scale = if amax > 0.0 { amax / range } else { 1.0 };
                (round_to(scale_dtype, scale) as f64, midpoint)
            };
            scales[i] = scale as f32;
            zeros[i] = zero as f32;
        }
        // Encoding is the expensive part: rows in parallel.
        let mut codes = vec![0u32; k * n];
        crate::parallel::for_each_chunk_mut(&mut codes, n, |r, out| {
            let g = r / rows;
            let row = &weight[r * n..(r + 1) * n];
            let (s, z) = (&scales[g * n..(g + 1) * n], &zeros[g * n..(g + 1) * n]);
            for (((c, &w), &scale), &zero) in out.iter_mut().zip(row).zip(s).zip(z) {
                let q = w as f64 / scale as f64 + zero as f64;
                *c = dtype
                    .encode(q as f32)
                    .expect("weights were checked to be finite");
            }
        });
        Ok(QuantizedWeight {
            dtype,
            k,
            n,
            group,
            codes: storage::pack(dtype, &codes),
            scale_dtype,
            scales,
            zeros: (asymmetric || unsigned).then_some(zeros),
        })
    }

    /// Rows of `k` per group.
    pub fn group_rows(&self) -> usize {
        self.group.rows(self.k)
    }

    /// The dequantized weight `[k, n]` in f64: the reference every kernel is checked against.
    pub fn dequantize(&self) -> Vec<f64> {
        let rows = self.group_rows();
        let codes = storage::unpack(self.dtype, &self.codes, self.k * self.n);
        let mut out = vec![0f64; self.k * self.n];
        for r in 0..self.k {
            for col in 0..self.n {
                let gi = (r / rows) * self.n + col;
                let zero = self.zeros.as_ref().map_or(0.0, |z| z[gi] as f64);
                let value = self.dtype.decode(codes[r * self.n + col]);
                out[r * self.n + col] = (value - zero) * self.scales[gi] as f64;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_weight(k: usize, n: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..k * n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
    }

    use crate::kernels::qmatmul::weight_types;

    /// Per element, for symmetric integer types: the scale of the element's (group, column) is
    /// the group's max |w| over the type's largest code, rounded to f16, and the element is
    /// within half a step of its dequantized value. Checks the group indexing of the (parallel)
    /// encoder against an independent computation.
    #[test]
    fn each_element_uses_its_own_group_scale() {
        let (k, n) = (192, 40);
        let seed = rand::random();
        let w = random_weight(k, n, seed);
        for (dtype, rows) in [("i4", 32), ("i8", 64), ("i3", 192), ("i6", 96)] {
            let dtype: DType = dtype.parse().unwrap();
            let group = Group::Rows(rows);
            let q = QuantizedWeight::quantize(&w, k, n, dtype, group, DType::F16, false).unwrap();
            let max_q = ((1u32 << (dtype.bits() - 1)) - 1) as f64;
            let deq = q.dequantize();
            for g in 0..k / rows {
                for c in 0..n {
                    let amax = (g * rows..(g + 1) * rows)
                        .map(|r| (w[r * n + c] as f64).abs())
                        .fold(0.0, f64::max);
                    let scale = f16::from_f64(amax / max_q).to_f64();
                    assert_eq!(
                        q.scales[g * n + c] as f64,
                        scale,
                        "{dtype} g{g} c{c} seed {seed}"
                    );
                    for r in g * rows..(g + 1) * rows {
                        let err = (w[r * n + c] as f64 - deq[r * n + c]).abs();
                        assert!(
                            err <= scale * 0.5 * (1.0 + 1e-3) + amax * 1e-3,
                            "{dtype} w[{r}, {c}] = {} dequantized to {} (scale {scale}) seed {seed}",
                            w[r * n + c],
                            deq[r * n + c]
                        );
                    }
                }
            }
        }
    }

    /// The quantization error of each element is bounded by half a step of its type at that
    /// magnitude; here we check the aggregate against a bound that shrinks with the bit width.
    #[test]
    fn dequantized_weight_tracks_the_original() {
        let (k, n) = (256, 24);
        let seed = rand::random();
        let w = random_weight(k, n, seed);
        for dtype in weight_types() {
            for group in [Group::Rows(32), Group::Rows(128), Group::PerChannel] {
                let q =
                    QuantizedWeight::quantize(&w, k, n, dtype, group, DType::F16, false).unwrap();
                let deq = q.dequantize();
                let err: f64 = w
                    .iter()
                    .zip(&deq)
                    .map(|(a, b)| (*a as f64 - b).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let norm: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
                if dtype.bits() == 1 {
                    // One bit keeps only the sign: +-scale/2 around the midpoint. The error
                    // norm of a max-abs scale is ~1 on uniform data, so check the sign instead.
                    for (a, b) in w.iter().zip(&deq) {
                        assert!(
                            *a == 0.0 || (*a as f64).signum() == b.signum(),
                            "{dtype} {group:?} seed {seed}: {a} dequantized to {b}"
                        );
                    }
                    continue;
                }
                let bound = match dtype.bits() {
                    2 => 0.6,
                    3 => 0.35,
                    _ => 0.2,
                };
                assert!(
                    err / norm < bound,
                    "{dtype} {group:?} seed {seed}: rel err {}",
                    err / norm
                );
            }
        }
    }

    #[test]
    fn asymmetric_unsigned_uses_per_group_zero_points() {
        let (k, n) = (64, 8);
        let mut rng = rand::rng();
        // A shifted distribution: zero points pay off.
        let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(0.5f32..3.0)).collect();
        let q =
            QuantizedWeight::quantize(&w, k, n, DType::UInt(4), Group::Rows(32), DType::BF16, true)
                .unwrap();
        let zeros = q.zeros.as_ref().unwrap();
        assert!(
            zeros.iter().all(|z| *z == 0.0),
            "min >= 0 gives zero point 0"
        );
        let deq = q.dequantize();
        for (a, b) in w.iter().zip(&deq) {
            let step = q.scales.iter().cloned().fold(0f32, f32::max) as f64;
            assert!((*a as f64 - b).abs() <= step * 0.5 + 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn bad_arguments_are_named() {
        let w = random_weight(64, 4, 1);
        let err = |r: Result<QuantizedWeight, QuantError>| r.unwrap_err().to_string();
        let q = |w: &[f32], k, n, dt, g, s, a| QuantizedWeight::quantize(w, k, n, dt, g, s, a);
        assert!(err(q(
            &w,
            64,
            5,
            DType::Int(4),
            Group::Rows(32),
            DType::F16,
            false
        ))
        .contains("`weight`"));
        assert!(
            err(q(&w, 64, 4, DType::F16, Group::Rows(32), DType::F16, false)).contains("`dtype`")
        );
        assert!(err(q(
            &w,
            64,
            4,
            DType::Int(4),
            Group::Rows(48),
            DType::F16,
            false
        ))
        .contains("`group`"));
        assert!(err(q(
            &w,
            64,
            4,
            DType::Int(4),
            Group::Rows(32),
            DType::F32,
            false
        ))
        .contains("`scale_dtype`"));
        assert!(err(q(
            &w,
            64,
            4,
            DType::Int(4),
            Group::Rows(32),
            DType::F16,
            true
        ))
        .contains("`asymmetric`"));
        let mut bad = w.clone();
        bad[7] = f32::NAN;
        let msg = err(q(
            &bad,
            64,
            4,
            DType::Int(4),
            Group::Rows(32),
            DType::F16,
            false,
        ));
        assert!(msg.contains("row 1, column 3"), "{msg}");
    }
}
