//! Host-side weight quantization: any 1-8 bit type, group-wise scales, optional zero points.
//!
//! A weight `W[k, n]` (row-major, `k` the reduction dimension) is split into groups of `group`
//! consecutive rows per column; each group gets one scale (and, for unsigned types quantized
//! asymmetrically, one zero point). Dequantization is `w = (decode(code) - zero) * scale`.
//!
//! Scales and zero points are rounded to the activation dtype (f16 or bf16) as soon as they are
//! chosen, and codes are computed against the *rounded* scale: the f64 reference built from
//! [`QuantizedWeight::dequantize`] is then exactly what a kernel multiplies with.
//!
//! Choosing a scale (`target = extent / range`, the extent being max |w| for symmetric types
//! and `max(hi, 0) - min(lo, 0)` with zero points; `range` the largest code, or the midpoint
//! `(2^b - 1) / 2` for unsigned types without zero points):
//! - A group whose values are all zero gets scale **0**: every element dequantizes to exactly 0
//!   whatever its code (its codes are the type's zero code, or the midpoint).
//! - Otherwise the scale is `target` rounded to nearest in the scale type, except where that
//!   lands below the scale type's smallest normal (f16: 2^-14, bf16: 2^-126): there it is
//!   rounded **up**, to the nearest subnormal at or above `target` (the smallest subnormal
//!   for a group too small to round to anything else). Rounding up keeps every code within the
//!   type's range, so each element stays within half a step, `scale / 2`, of its weight, even
//!   where the subnormal spacing is coarse; nearest rounding there could round the scale to 0
//!   (then 0/0 reached the encoder) or far below `target` (codes saturate).
//! - A `target` beyond the scale type's largest finite value (f16: 65504, so a group with
//!   max |w| above ~4.6e5 for `i4`) is an error naming the group and the element; bf16 scales
//!   reach ~3.4e38.
//! - Kernels dequantize in the scale dtype, whose arithmetic overflows to infinity as the GPU's
//!   does, so every `(q - zero) * scale` over the type's codes (and `zero * scale`) must be
//!   finite there: a group past that (f16: max |w| above ~57000 for `i4`, whose code -8 reaches
//!   8/7 of the extent) is an error naming the group; [`QuantizedWeight::check`] applies the
//!   same rule, and the finiteness of every scale and zero point, to hand-built weights.
//!
//! Every size product (`k * n`) is checked: an overflow is an error naming the arguments, in
//! debug and release builds alike.

use crate::core::dtype::DTypeError;
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
    #[error("argument `{arg}`: {source}")]
    InvalidDType {
        arg: &'static str,
        source: DTypeError,
    },
    #[error("arguments `k`, `n`: k * n = {k} * {n} overflows usize")]
    TooLarge { k: usize, n: usize },
    #[error(
        "argument `weight`: the scale of the group at rows {rows_start}..{rows_end}, column {col} \
         overflows {scale_dtype}: its largest |w| is {amax:e} (row {row}), and with {dtype} codes \
         reaching {range} the scale would be {target:e}, above {scale_dtype}'s largest finite \
         value {scale_max}; use bf16 scales (`scale_dtype` = bf16) or scale the weight down"
    )]
    ScaleOverflow {
        rows_start: usize,
        rows_end: usize,
        col: usize,
        row: usize,
        amax: f64,
        dtype: DType,
        range: f64,
        target: f64,
        scale_dtype: DType,
        scale_max: f64,
    },
    #[error(
        "argument `weight`: the group at rows {rows_start}..{rows_end}, column {col} dequantizes \
         to {reach:e} with {dtype} codes (scale {scale:e}), above {scale_dtype}'s largest finite \
         value {scale_max}: kernels computing in {scale_dtype} would overflow to infinity; use \
         bf16 scales (`scale_dtype` = bf16) or scale the weight down"
    )]
    DequantOverflow {
        rows_start: usize,
        rows_end: usize,
        col: usize,
        dtype: DType,
        scale: f64,
        reach: f64,
        scale_dtype: DType,
        scale_max: f64,
    },
    /// A hand-built [`QuantizedWeight`] whose fields disagree (see [`QuantizedWeight::check`]).
    #[error("field `{field}` of the quantized weight: {reason}")]
    Inconsistent { field: &'static str, reason: String },
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

/// The largest magnitude a kernel forms while dequantizing codes of `dtype` with `scale` and
/// `zero`: `(q - zero) * scale` over every code `q` of the type, and `zero * scale` (the folded
/// form `q * s - z * s`). Kernels compute it in the scale dtype, whose arithmetic overflows to
/// infinity (IEEE, `DType::round`), so it must stay within that dtype's largest finite value.
fn dequant_reach(dtype: DType, scale: f64, zero: f64) -> f64 {
    let codes = (dtype.min_value() - zero)
        .abs()
        .max((dtype.max_value() - zero).abs());
    (codes * scale.abs()).max((zero * scale).abs())
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

/// The scale for `target = extent / range` (see the module docs), or `None` if it overflows
/// `dtype` (f16 or bf16). Exact in `f32`: every f16 and bf16 value is an `f32`.
fn choose_scale(dtype: DType, target: f64) -> Option<f32> {
    if target == 0.0 {
        return Some(0.0);
    }
    let nearest = round_to(dtype, target);
    if nearest.is_infinite() {
        return None;
    }
    let min_normal = match dtype {
        DType::BF16 => bf16::MIN_POSITIVE.to_f64(),
        _ => f16::MIN_POSITIVE.to_f64(),
    };
    if (nearest as f64) >= min_normal || nearest as f64 >= target {
        return Some(nearest);
    }
    // Below the normal range the spacing is coarse: take the next value up so no code
    // saturates (from 0 that is the smallest subnormal). Positive, so bits + 1 is the next up.
    Some(match dtype {
        DType::BF16 => bf16::from_bits(bf16::from_f32(nearest).to_bits() + 1).to_f32(),
        _ => f16::from_bits(f16::from_f32(nearest).to_bits() + 1).to_f32(),
    })
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
        // Types first: an invalid one must not reach `weight_range`, which walks its codes.
        dtype
            .validate()
            .map_err(|source| QuantError::InvalidDType {
                arg: "dtype",
                source,
            })?;
        scale_dtype
            .validate()
            .map_err(|source| QuantError::InvalidDType {
                arg: "scale_dtype",
                source,
            })?;
        let len = k.checked_mul(n).ok_or(QuantError::TooLarge { k, n })?;
        if weight.len() != len {
            return Err(QuantError::WeightLen {
                expected: len,
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
            // Scale so the group's range fills the type's (see the module docs for the rule).
            let (extent, range) = if asymmetric {
                (hi.max(0.0) - lo.min(0.0), max_q)
            } else {
                (
                    lo.abs().max(hi.abs()),
                    if unsigned { midpoint } else { max_q },
                )
            };
            let target = extent / range;
            let Some(scale) = choose_scale(scale_dtype, target) else {
                let (g, col) = (i / n, i % n);
                let rows_of = g * rows..(g + 1) * rows;
                // The element that sets the scale, for the message.
                let row = rows_of
                    .clone()
                    .max_by(|&a, &b| {
                        weight[a * n + col]
                            .abs()
                            .total_cmp(&weight[b * n + col].abs())
                    })
                    .unwrap_or(rows_of.start);
                return Err(QuantError::ScaleOverflow {
                    rows_start: rows_of.start,
                    rows_end: rows_of.end,
                    col,
                    row,
                    amax: lo.abs().max(hi.abs()),
                    dtype,
                    range,
                    target,
                    scale_dtype,
                    scale_max: scale_dtype.max_value(),
                });
            };
            let zero = if !asymmetric {
                midpoint
            } else if scale > 0.0 {
                (-lo.min(0.0) / scale as f64).round().clamp(0.0, max_q)
            } else {
                0.0
            };
            scales[i] = scale;
            zeros[i] = if asymmetric {
                round_to(scale_dtype, zero)
            } else {
                zero as f32
            };
            let reach = dequant_reach(dtype, scale as f64, zeros[i] as f64);
            if reach > scale_dtype.max_value() {
                let (g, col) = (i / n, i % n);
                return Err(QuantError::DequantOverflow {
                    rows_start: g * rows,
                    rows_end: (g + 1) * rows,
                    col,
                    dtype,
                    scale: scale as f64,
                    reach,
                    scale_dtype,
                    scale_max: scale_dtype.max_value(),
                });
            }
        }
        // Encoding is the expensive part: rows in parallel.
        let mut codes = vec![0u32; len];
        crate::parallel::for_each_chunk_mut(&mut codes, n, |r, out| {
            let g = r / rows;
            let row = &weight[r * n..(r + 1) * n];
            let (s, z) = (&scales[g * n..(g + 1) * n], &zeros[g * n..(g + 1) * n]);
            for (((c, &w), &scale), &zero) in out.iter_mut().zip(row).zip(s).zip(z) {
                // Scale 0 only for an all-zero group: any code dequantizes to 0; take the zero's.
                let q = if scale > 0.0 {
                    w as f64 / scale as f64 + zero as f64
                } else {
                    zero as f64
                };
                *c = dtype
                    .encode(q as f32)
                    .expect("q is finite: finite weights over a positive, finite scale");
            }
        });
        let codes = storage::try_pack(dtype, &codes).map_err(|e| QuantError::Inconsistent {
            field: "codes",
            reason: e.to_string(),
        })?;
        Ok(QuantizedWeight {
            dtype,
            k,
            n,
            group,
            codes,
            scale_dtype,
            scales,
            zeros: (asymmetric || unsigned).then_some(zeros),
        })
    }

    /// Rows of `k` per group.
    pub fn group_rows(&self) -> usize {
        self.group.rows(self.k)
    }

    /// Check that the (public) fields agree: valid types, `k * n` without overflow, a group
    /// size dividing `k`, and as many codes, scales and zero points as the shape needs.
    /// [`QuantizedWeight::quantize`] always gives a consistent weight; this is for weights
    /// built or edited by hand, before they are used.
    pub fn check(&self) -> Result<(), QuantError> {
        let bad = |field, reason: String| Err(QuantError::Inconsistent { field, reason });
        self.dtype
            .validate()
            .map_err(|source| QuantError::InvalidDType {
                arg: "dtype",
                source,
            })?;
        if weight_range(self.dtype).is_none() {
            return Err(QuantError::NotAWeightType { dtype: self.dtype });
        }
        if !matches!(self.scale_dtype, DType::F16 | DType::BF16) {
            return Err(QuantError::ScaleDType {
                dtype: self.scale_dtype,
            });
        }
        let (k, n) = (self.k, self.n);
        let len = k.checked_mul(n).ok_or(QuantError::TooLarge { k, n })?;
        let rows = self.group_rows();
        if k == 0 || n == 0 || rows == 0 || !k.is_multiple_of(rows) {
            return bad(
                "group",
                format!("{rows} rows per group for a {k} x {n} weight"),
            );
        }
        let bytes =
            storage::try_packed_len(self.dtype, len).map_err(|e| QuantError::Inconsistent {
                field: "codes",
                reason: e.to_string(),
            })?;
        if self.codes.len() != bytes {
            return bad(
                "codes",
                format!(
                    "{} bytes, but {k} x {n} {} codes take {bytes}",
                    self.codes.len(),
                    self.dtype
                ),
            );
        }
        let groups = (k / rows) * n;
        if self.scales.len() != groups {
            return bad(
                "scales",
                format!("{} values, expected {groups}", self.scales.len()),
            );
        }
        if let Some(z) = &self.zeros {
            if z.len() != groups {
                return bad("zeros", format!("{} values, expected {groups}", z.len()));
            }
        }
        // Every scale and zero point a finite value of the scale dtype, and every dequantized
        // value (and intermediate) finite in it: the kernels' half arithmetic would otherwise
        // produce infinities and NaN.
        let max = self.scale_dtype.max_value();
        for (i, &scale) in self.scales.iter().enumerate() {
            let zero = self.zeros.as_ref().map_or(0.0, |z| z[i]);
            let at = || format!("group {} (rows {}.., column {})", i, (i / n) * rows, i % n);
            for (field, what, v) in [("scales", "scale", scale), ("zeros", "zero point", zero)] {
                if !v.is_finite() || (v as f64).abs() > max {
                    let reason = format!(
                        "{what} of {} is {v}, not a finite {} value",
                        at(),
                        self.scale_dtype
                    );
                    return bad(field, reason);
                }
            }
            let reach = dequant_reach(self.dtype, scale as f64, zero as f64);
            if reach > max {
                return bad(
                    "scales",
                    format!(
                        "{}: scale {scale:e} (zero point {zero}) dequantizes {} codes to \
                         {reach:e}, above {}'s largest finite value {max}",
                        at(),
                        self.dtype,
                        self.scale_dtype
                    ),
                );
            }
        }
        Ok(())
    }

    /// The weights `parts` side by side, `[k, n0 + n1 + ...]`: one layer computing what they
    /// compute for the same input (q, k and v projections fused, or gate and up). They must
    /// agree in `k`, `dtype`, `group`, `scale_dtype` and in having zero points; an error names
    /// the first `parts[i]` that does not. Codes, scales and zero points are copied exactly.
    pub fn concat_columns(parts: &[&QuantizedWeight]) -> Result<QuantizedWeight, QuantError> {
        let Some(first) = parts.first() else {
            return Err(QuantError::Empty { name: "parts" });
        };
        for (i, p) in parts.iter().enumerate() {
            p.check()?;
            let mismatch = if p.k != first.k {
                Some(format!("k = {}, but parts[0] has k = {}", p.k, first.k))
            } else if p.dtype != first.dtype {
                Some(format!(
                    "{} codes, but parts[0] has {}",
                    p.dtype, first.dtype
                ))
            } else if p.group_rows() != first.group_rows() {
                Some(format!(
                    "{} rows per group, but parts[0] has {}",
                    p.group_rows(),
                    first.group_rows()
                ))
            } else if p.scale_dtype != first.scale_dtype {
                Some(format!(
                    "{} scales, but parts[0] has {}",
                    p.scale_dtype, first.scale_dtype
                ))
            } else if p.zeros.is_some() != first.zeros.is_some() {
                Some("zero points on one part and not the other".to_string())
            } else {
                None
            };
            if let Some(reason) = mismatch {
                return Err(QuantError::Inconsistent {
                    field: "parts",
                    reason: format!("parts[{i}]: {reason}"),
                });
            }
        }
        let n: usize = parts.iter().map(|p| p.n).sum();
        let k = first.k;
        let bits = first.dtype.bits() as usize;
        k.checked_mul(n)
            .and_then(|e| e.checked_mul(bits))
            .ok_or(QuantError::TooLarge { k, n })?;
        let mut codes = vec![0u8; storage::packed_len(first.dtype, k * n)];
        if parts.iter().all(|p| (p.n * bits).is_multiple_of(8)) {
            // Every part's rows are whole bytes: copy them.
            let mut at = 0;
            for r in 0..k {
                for p in parts {
                    let row = p.n * bits / 8;
                    codes[at..at + row].copy_from_slice(&p.codes[r * row..(r + 1) * row]);
                    at += row;
                }
            }
        } else {
            let mut col0 = 0;
            for p in parts {
                for r in 0..k {
                    for c in 0..p.n {
                        let code = storage::get(p.dtype, &p.codes, r * p.n + c);
                        storage::set(first.dtype, &mut codes, r * n + col0 + c, code);
                    }
                }
                col0 += p.n;
            }
        }
        let groups = k / first.group_rows();
        let side_by_side = |field: fn(&QuantizedWeight) -> &[f32]| -> Vec<f32> {
            let mut out = Vec::with_capacity(groups * n);
            for g in 0..groups {
                for p in parts {
                    out.extend_from_slice(&field(p)[g * p.n..(g + 1) * p.n]);
                }
            }
            out
        };
        let scales = side_by_side(|p| &p.scales);
        let zeros = first
            .zeros
            .as_ref()
            .map(|_| side_by_side(|p| p.zeros.as_deref().unwrap_or(&[])));
        let out = QuantizedWeight {
            dtype: first.dtype,
            k,
            n,
            group: first.group,
            codes,
            scale_dtype: first.scale_dtype,
            scales,
            zeros,
        };
        out.check()?;
        Ok(out)
    }

    /// The dequantized weight `[k, n]` in f64: the reference every kernel is checked against.
    ///
    /// Panics, naming the field, on a hand-built weight whose fields disagree (see
    /// [`QuantizedWeight::check`]).
    pub fn dequantize(&self) -> Vec<f64> {
        if let Err(e) = self.check() {
            panic!("dequantize: {e}");
        }
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
        // (k, n, dtype, group, scale dtype, asymmetric) and the argument the error names.
        let cases = [
            (
                (64, 5, DType::Int(4), Group::Rows(32), DType::F16, false),
                "`weight`",
            ),
            (
                (64, 4, DType::F16, Group::Rows(32), DType::F16, false),
                "`dtype`",
            ),
            (
                (64, 4, DType::Int(4), Group::Rows(48), DType::F16, false),
                "`group`",
            ),
            (
                (64, 4, DType::Int(4), Group::Rows(32), DType::F32, false),
                "`scale_dtype`",
            ),
            (
                (64, 4, DType::Int(4), Group::Rows(32), DType::F16, true),
                "`asymmetric`",
            ),
        ];
        for ((k, n, dt, g, s, a), named) in cases {
            let msg = err(q(&w, k, n, dt, g, s, a));
            assert!(msg.contains(named), "{named}: {msg}");
        }
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

    /// The largest gap between neighbouring non-negative values of a weight type, in code
    /// units: an element is within `scale * gap / 2` of its weight.
    fn max_gap(dtype: DType) -> f64 {
        let mut v: Vec<f64> = dtype
            .values()
            .unwrap()
            .into_iter()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v.windows(2).map(|w| w[1] - w[0]).fold(1.0, f64::max)
    }

    /// The reported panic: a group with max |w| far below f16's smallest subnormal scale and an
    /// exact 0 rounded its scale to 0, and 0/0 reached `encode(..).expect(..)`.
    #[test]
    fn tiny_group_with_a_zero_does_not_panic() {
        let (k, n) = (128, 32);
        let mut w = vec![0f32; k * n];
        w[0] = 1e-10;
        for (dtype, scale_dtype, asym) in [
            (DType::Int(4), DType::F16, false),
            (DType::Int(4), DType::BF16, false),
            (DType::UInt(4), DType::F16, true),
            (DType::UInt(4), DType::BF16, true),
            (DType::UInt(4), DType::F16, false),
        ] {
            let q = QuantizedWeight::quantize(&w, k, n, dtype, Group::Rows(128), scale_dtype, asym)
                .unwrap();
            let deq = q.dequantize();
            assert!(deq.iter().all(|v| v.is_finite()), "{dtype} {scale_dtype}");
            // Columns 1.. are all zero: scale 0, exactly 0 back.
            assert!(q.scales[1..].iter().all(|s| *s == 0.0));
            assert!(deq.iter().enumerate().all(|(i, v)| i % n == 0 || *v == 0.0));
            // Column 0 gets a positive scale within a subnormal step of its target, and the
            // element is within half a step.
            assert!(
                q.scales[0] > 0.0 && (q.scales[0] as f64) < 1e-7,
                "{}",
                q.scales[0]
            );
            assert!(
                (deq[0] - 1e-10).abs() <= q.scales[0] as f64 / 2.0,
                "{}",
                deq[0]
            );
        }
    }

    /// Fresh random groups at every magnitude down to f32 subnormals, some all zero and some
    /// with exact zeros, for every weight type, both scale types and zero points: never an error
    /// or NaN; all-zero groups come back exactly 0; every element is within half a step.
    #[test]
    fn tiny_and_zero_groups_quantize_within_the_error_bound() {
        let (k, n, rows) = (64, 24, 16);
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mags = [
            0.0f32, 1e-44, 1e-39, 1e-30, 1e-10, 1e-7, 1e-6, 3e-5, 1e-3, 1.0,
        ];
        let mut w = vec![0f32; k * n];
        for g in 0..k / rows {
            for c in 0..n {
                let mag = mags[rng.random_range(0..mags.len())];
                for r in g * rows..(g + 1) * rows {
                    w[r * n + c] = if rng.random_bool(0.3) {
                        0.0
                    } else {
                        rng.random_range(-1.0f32..1.0) * mag
                    };
                }
            }
        }
        for dtype in weight_types() {
            let unsigned = matches!(dtype, DType::UInt(_));
            for scale_dtype in [DType::F16, DType::BF16] {
                for asym in [false, true] {
                    if asym && !unsigned {
                        continue;
                    }
                    let q = QuantizedWeight::quantize(
                        &w,
                        k,
                        n,
                        dtype,
                        Group::Rows(rows),
                        scale_dtype,
                        asym,
                    )
                    .unwrap_or_else(|e| panic!("{dtype} {scale_dtype} seed {seed}: {e}"));
                    let deq = q.dequantize();
                    let gap = if dtype.is_float() {
                        max_gap(dtype)
                    } else {
                        1.0
                    };
                    for (i, (&a, &b)) in w.iter().zip(&deq).enumerate() {
                        let (r, c) = (i / n, i % n);
                        let gi = (r / rows) * n + c;
                        let scale = q.scales[gi] as f64;
                        let group =
                            (r / rows * rows..(r / rows + 1) * rows).map(|r| w[r * n + c] as f64);
                        let amax = group.clone().map(f64::abs).fold(0.0, f64::max);
                        let extent = if asym {
                            group.clone().fold(0.0, f64::max) - group.fold(0.0, f64::min)
                        } else {
                            amax
                        };
                        let ctx = format!("{dtype} {scale_dtype} asym {asym} seed {seed}: w[{r}, {c}] = {a:e} -> {b:e} (scale {scale:e})");
                        assert!(b.is_finite(), "{ctx}");
                        if amax == 0.0 {
                            assert_eq!((scale, b), (0.0, 0.0), "{ctx}");
                            continue;
                        }
                        assert!(scale > 0.0, "{ctx}");
                        // Half a step. A normal scale is rounded to nearest, so it may be below
                        // its target by a relative 2^-9 (bf16), and codes at the group's edge
                        // saturate by up to that much of the extent; a subnormal scale is
                        // rounded up, so none do.
                        let min_normal = if scale_dtype == DType::BF16 {
                            2f64.powi(-126)
                        } else {
                            2f64.powi(-14)
                        };
                        let slack = if scale < min_normal {
                            0.0
                        } else {
                            extent * 4e-3
                        };
                        // (+1e-4 codes: `q` passes through f32 on its way to `encode`.)
                        let bound = scale * (gap / 2.0 + 1e-4) + slack;
                        assert!((a as f64 - b).abs() <= bound, "{ctx}");
                    }
                }
            }
        }
    }

    /// A group whose scale overflows f16 was accepted and poisoned the layer with inf/NaN
    /// later; now it is an error naming the group, the element and the remedy.
    #[test]
    fn scale_overflow_is_an_error_naming_the_group() {
        let (k, n) = (64, 8);
        let seed = rand::random();
        let mut w = random_weight(k, n, seed);
        let (row, col) = (37, 5);
        w[row * n + col] = 5e5 * if seed % 2 == 0 { 1.0 } else { -1.0 };
        for dtype in [DType::Int(4), "f4e2m1".parse().unwrap()] {
            let e = QuantizedWeight::quantize(&w, k, n, dtype, Group::Rows(32), DType::F16, false)
                .unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, QuantError::ScaleOverflow { .. }), "{msg}");
            for want in [
                "rows 32..64, column 5",
                "(row 37)",
                "use bf16 scales",
                "f16",
            ] {
                assert!(msg.contains(want), "{dtype} seed {seed}: {msg}");
            }
            // bf16 scales reach far enough.
            let q = QuantizedWeight::quantize(&w, k, n, dtype, Group::Rows(32), DType::BF16, false)
                .unwrap();
            assert!(q.dequantize().iter().all(|v| v.is_finite()));
        }
        // Below the scale's limit (i4: 7 * 65504 = 458528) but past f16 once dequantized: the
        // code -8 reaches 8 / 7 of the extent, so f16 scales serve max |w| up to about 57316.
        w[row * n + col] = 4.5e5;
        let e =
            QuantizedWeight::quantize(&w, k, n, DType::Int(4), Group::Rows(32), DType::F16, false)
                .unwrap_err();
        assert!(
            matches!(
                e,
                QuantError::DequantOverflow {
                    col: 5,
                    rows_start: 32,
                    ..
                }
            ),
            "{e}"
        );
        w[row * n + col] = 5.8e4;
        let e =
            QuantizedWeight::quantize(&w, k, n, DType::Int(4), Group::Rows(32), DType::F16, false)
                .unwrap_err();
        assert!(e.to_string().contains("rows 32..64, column 5"), "{e}");
        w[row * n + col] = 5.7e4;
        let q =
            QuantizedWeight::quantize(&w, k, n, DType::Int(4), Group::Rows(32), DType::F16, false)
                .unwrap();
        assert!(q.dequantize().iter().all(|v| v.abs() <= 65504.0));
    }

    #[test]
    fn infinite_weight_is_an_error_naming_the_position() {
        let (k, n) = (32, 6);
        let mut w = random_weight(k, n, rand::random());
        w[9 * n + 4] = f32::NEG_INFINITY;
        let msg =
            QuantizedWeight::quantize(&w, k, n, DType::Int(4), Group::Rows(32), DType::F16, false)
                .unwrap_err()
                .to_string();
        assert!(
            msg.contains("row 9, column 4") && msg.contains("-inf"),
            "{msg}"
        );
    }

    /// `k * n` wrapped to 0 in release (then the allocation aborted) and panicked in debug.
    #[test]
    fn overflowing_sizes_are_errors() {
        let e = QuantizedWeight::quantize(
            &[],
            1 << 32,
            1 << 32,
            DType::Int(4),
            Group::PerChannel,
            DType::F16,
            false,
        )
        .unwrap_err();
        assert_eq!(
            e,
            QuantError::TooLarge {
                k: 1 << 32,
                n: 1 << 32
            }
        );
        assert!(
            e.to_string().contains("`k`, `n`") && e.to_string().contains("overflows"),
            "{e}"
        );
        let e = QuantizedWeight::quantize(
            &[0.5; 4],
            usize::MAX,
            2,
            DType::Int(4),
            Group::PerChannel,
            DType::F16,
            false,
        )
        .unwrap_err();
        assert!(matches!(e, QuantError::TooLarge { .. }), "{e}");
    }

    /// Hand-built invalid types are named errors before any work (`Float { 8, 22 }` walked 2^31
    /// codes for 13 s, `Int(0)` panicked on a shift, `Int(1)` gave NaN scales).
    #[test]
    fn invalid_dtypes_are_named_errors() {
        let (k, n) = (32, 4);
        let w = random_weight(k, n, rand::random());
        for d in [
            DType::Int(0),
            DType::Int(1),
            DType::UInt(0),
            DType::Float { exp: 0, man: 3 },
            DType::Float { exp: 8, man: 22 },
        ] {
            let start = std::time::Instant::now();
            let e = QuantizedWeight::quantize(&w, k, n, d, Group::PerChannel, DType::F16, false)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("argument `dtype`") && e.contains(&format!("{d:?}")),
                "{e}"
            );
            assert!(start.elapsed().as_secs_f64() < 1.0);
        }
        let e = QuantizedWeight::quantize(
            &w,
            k,
            n,
            DType::Int(4),
            Group::PerChannel,
            DType::Int(1),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("argument `scale_dtype`"), "{e}");
    }

    #[test]
    fn hand_built_inconsistent_weight_is_reported_by_check() {
        let w = random_weight(64, 8, rand::random());
        let q =
            QuantizedWeight::quantize(&w, 64, 8, DType::UInt(3), Group::Rows(32), DType::F16, true)
                .unwrap();
        assert_eq!(q.check(), Ok(()));
        let mut bad = q.clone();
        bad.codes.pop();
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("field `codes`"));
        let mut bad = q.clone();
        bad.zeros.as_mut().unwrap().push(0.0);
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("field `zeros`"));
        let mut bad = q.clone();
        bad.k = usize::MAX;
        assert!(matches!(bad.check(), Err(QuantError::TooLarge { .. })));
        let mut bad = q;
        bad.dtype = DType::UInt(0);
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("argument `dtype`"));
    }

    /// Side by side, the parts' codes, scales and zero points are exactly each part's: the
    /// dequantized concatenation is the parts' dequantizations column block by column block.
    /// u4 with n even takes the byte-copy path; u3 with odd n the per-code one.
    #[test]
    fn concat_columns_places_each_part_exactly() {
        for (dtype, ns, asym) in [
            (DType::UInt(4), [64, 16, 32], true),
            (DType::UInt(3), [7, 13, 5], true),
            (DType::Int(5), [9, 3, 6], false),
        ] {
            let k = 64;
            let parts: Vec<QuantizedWeight> = ns
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let w = random_weight(k, n, 40 + i as u64);
                    QuantizedWeight::quantize(&w, k, n, dtype, Group::Rows(32), DType::F16, asym)
                        .unwrap()
                })
                .collect();
            let refs: Vec<&QuantizedWeight> = parts.iter().collect();
            let fused = QuantizedWeight::concat_columns(&refs).unwrap();
            let n: usize = ns.iter().sum();
            assert_eq!((fused.k, fused.n), (k, n));
            let got = fused.dequantize();
            let mut col0 = 0;
            for p in &parts {
                let want = p.dequantize();
                for r in 0..k {
                    for c in 0..p.n {
                        assert_eq!(
                            got[r * n + col0 + c].to_bits(),
                            want[r * p.n + c].to_bits(),
                            "{dtype} row {r} column {col0} + {c}"
                        );
                    }
                }
                col0 += p.n;
            }
        }
    }

    #[test]
    fn concat_columns_names_the_part_that_disagrees() {
        let w = random_weight(64, 16, 1);
        let q = |k: usize, dtype: DType, group: usize| {
            QuantizedWeight::quantize(
                &w[..k * 16],
                k,
                16,
                dtype,
                Group::Rows(group),
                DType::F16,
                true,
            )
            .unwrap()
        };
        let a = q(64, DType::UInt(4), 32);
        for (b, what) in [
            (q(32, DType::UInt(4), 32), "k = 32"),
            (q(64, DType::UInt(3), 32), "u3"),
            (q(64, DType::UInt(4), 16), "16 rows per group"),
        ] {
            let e = QuantizedWeight::concat_columns(&[&a, &a, &b])
                .unwrap_err()
                .to_string();
            assert!(e.contains("parts[2]") && e.contains(what), "{e}");
        }
        let e = QuantizedWeight::concat_columns(&[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`parts`"), "{e}");
    }
}
