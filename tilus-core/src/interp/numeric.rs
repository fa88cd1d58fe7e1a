//! Element values: decoding, exact integer results, and the two ways of encoding a result.
//!
//! - *Conversions* (`cast`, initial values, immediates) saturate: floats round to nearest even
//!   and saturate to the largest finite value, integers round half to even and clamp, as
//!   `DType::encode` does. NaN is an error.
//! - *Arithmetic* (`add`.., `neg`, `dot`) is computed exactly (integers in `i64`, floats in `f64`)
//!   and then encoded once: a float result is rounded to the dtype (through `f32`, which is exact
//!   for every type narrower than `f32`'s results here). Past the largest finite value, f16,
//!   bf16 and f32 give an infinity, as the GPU's IEEE arithmetic does (`DType::round`), and the
//!   narrower floats saturate; a NaN result is an error. An integer result out of the dtype's
//!   range is an error, because wrapping and saturating would both hide bugs and the GPU code
//!   is free to do either.

use crate::dtype::Kind;
use crate::DType;

pub(super) fn is_int(dtype: DType) -> bool {
    dtype.kind() != Kind::Float
}

/// The inclusive range of an integer dtype.
fn int_range(dtype: DType) -> (i64, i64) {
    (dtype.min_value() as i64, dtype.max_value() as i64)
}

/// The integer value of a code of an integer dtype (exact: every such value fits `f64`).
pub(super) fn decode_int(dtype: DType, code: u32) -> i64 {
    dtype.decode(code) as i64
}

/// Saturating conversion of `value` to `dtype`.
pub(super) fn convert(value: f64, dtype: DType) -> Result<u32, String> {
    if value.is_nan() {
        return Err(format!("cannot convert NaN to {dtype}"));
    }
    if is_int(dtype) {
        let (lo, hi) = int_range(dtype);
        let v = value.round_ties_even().clamp(lo as f64, hi as f64) as i64;
        Ok(v as u32 & dtype.code_mask())
    } else {
        dtype.encode(value as f32).map_err(|e| e.to_string())
    }
}

/// An exact integer result, which must fit `dtype`.
pub(super) fn encode_int(dtype: DType, value: i64) -> Result<u32, String> {
    let (lo, hi) = int_range(dtype);
    if value < lo || value > hi {
        return Err(format!("the result {value} overflows {dtype}"));
    }
    Ok(value as u32 & dtype.code_mask())
}

/// A float result, rounded to `dtype` (`DType::round`: f16, bf16 and f32 overflow to an
/// infinity, the narrower floats saturate).
pub(super) fn encode_float(dtype: DType, value: f64) -> Result<u32, String> {
    if value.is_nan() {
        return Err(format!("the result is NaN (stored as {dtype})"));
    }
    dtype.round(value as f32).map_err(|e| e.to_string())
}
