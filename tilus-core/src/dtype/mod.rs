//! Data types of the VM: sub-byte integers and floats, and the standard GPU types.
//!
//! Contract (implementation lands with issue 2): every type decodes each of its bit patterns to
//! an `f64`, and encodes an `f32` with round-to-nearest-even and saturation; NaN input to an
//! encode is an error. A bit pattern ("code") is always carried in the low `bits()` bits of a
//! `u32`.

use std::fmt;
use std::str::FromStr;

/// A VM data type. Widths of sub-byte types are in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(serde::Serialize, serde::Deserialize)]
pub enum DType {
    /// Unsigned integer of 1..=8 or 32 bits (`u1`..`u8`, `u32`).
    UInt(u8),
    /// Two's-complement signed integer of 2..=8 or 32 bits (`i2`..`i8`, `i32`).
    Int(u8),
    /// Generic small float `fNeEmM` (1 sign, `exp` exponent, `man` mantissa bits, 3 <= N <= 8,
    /// `exp >= 1`), with no inf/nan codes. `f8e4m3` and `f8e5m2` are *not* this variant.
    Float {
        exp: u8,
        man: u8,
    },
    /// OCP FP8 E4M3 ("e4m3fn"): no infinities, S.1111.111 is NaN.
    F8E4M3,
    /// OCP FP8 E5M2: IEEE-style infinities and NaNs.
    F8E5M2,
    F16,
    BF16,
    F32,
}

/// The coarse kind of a type, as printed by `tilus dtype --json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Int,
    UInt,
    Float,
}

/// Errors from parsing names and encoding values.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DTypeError {
    #[error("unknown data type `{name}`: {reason}; known types are u1..u8, i2..i8, u32, i32, fNeEmM (N = 1+E+M, 3 <= N <= 8, E >= 1), f8e4m3, f8e5m2, f16, bf16, f32")]
    UnknownName { name: String, reason: String },
    #[error("cannot encode NaN as {dtype}")]
    NaN { dtype: DType },
}

impl DType {
    /// Storage width in bits.
    pub fn bits(self) -> u32 {
        todo!()
    }
    pub fn kind(self) -> Kind {
        todo!()
    }
    /// True for types narrower than 8 bits (stored packed).
    pub fn is_sub_byte(self) -> bool {
        self.bits() < 8
    }
    /// Value of bit pattern `code` (low `bits()` bits; higher bits must be zero).
    /// Floats with inf/nan codes decode to `f64::INFINITY`/`NAN`.
    pub fn decode(self, code: u32) -> f64 {
        let _ = code;
        todo!()
    }
    /// Bit pattern nearest to `value`: round to nearest even, saturate to the largest finite
    /// value (integers: round half to even, clamp to the range). NaN is an error.
    pub fn encode(self, value: f32) -> Result<u32, DTypeError> {
        let _ = value;
        todo!()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f;
        todo!()
    }
}

impl FromStr for DType {
    type Err = DTypeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let _ = s;
        todo!()
    }
}
