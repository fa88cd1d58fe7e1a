//! Data types of the VM: sub-byte integers and floats, and the standard GPU types.
//!
//! Contract: every type decodes each of its bit patterns to an `f64`, and encodes an `f32` with
//! round-to-nearest-even and saturation; NaN input to an encode is an error. A bit pattern
//! ("code") is always carried in the low `bits()` bits of a `u32`.
//!
//! Semantics:
//! - `uN` (N in 1..=8, 32): plain binary. `iN` (N in 2..=8, 32): two's complement.
//! - `fNeEmM` ([`DType::Float`], N = 1+E+M, 3 <= N <= 8, E >= 1): sign, E exponent bits,
//!   M mantissa bits, bias 2^(E-1)-1. Exponent field 0 is subnormal, `(-1)^s 2^(1-bias) m/2^M`;
//!   otherwise `(-1)^s 2^(e-bias) (1 + m/2^M)`. There are no inf/nan codes: the all-ones
//!   exponent holds ordinary finite values. f4e2m1, f6e3m2 and f6e2m3 are bit for bit the OCP MX
//!   FP4/FP6 formats.
//! - `f8e4m3` is OCP E4M3 ("e4m3fn", bias 7, max 448, S.1111.111 is NaN, no inf) and `f8e5m2`
//!   is OCP E5M2 (bias 15, max 57344, IEEE inf/nan). Every other `f8eXmY` is generic.
//! - `f16`, `bf16`, `f32` are the IEEE-style formats.
//!
//! See [`DType::encode`] for rounding, saturation, infinities and negative zero.
//!
//! ```
//! use tilus_core::DType;
//! let f4: DType = "f4e2m1".parse().unwrap();
//! assert_eq!(f4.decode(0b0_11_1), 6.0);
//! assert_eq!(f4.encode(2.5).unwrap(), 0b0_10_0); // tie between 2 and 3: the even code
//! assert_eq!(f4.encode(100.0).unwrap(), 0b0_11_1); // saturates to 6
//! assert_eq!(f4.to_string(), "f4e2m1");
//! assert!("f4e3m1".parse::<DType>().is_err()); // 1 + 3 + 1 != 4
//! ```

mod float;
mod name;

use float::{FloatFormat, Specials};
use std::fmt;
use std::str::FromStr;

/// A VM data type. Widths of sub-byte types are in bits.
///
/// The variants are public, so an invalid value (`Int(1)`, `Float { exp: 0, .. }`) can be built
/// by hand; [`DType::validate`] says why it is not a type, and every API that takes a type from
/// outside checks it. Deserializing validates too.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "DTypeRepr", into = "DTypeRepr")]
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

/// The serialized form of [`DType`] (the same shape), so that deserializing can validate.
#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(rename = "DType")]
enum DTypeRepr {
    UInt(u8),
    Int(u8),
    Float { exp: u8, man: u8 },
    F8E4M3,
    F8E5M2,
    F16,
    BF16,
    F32,
}

impl From<DType> for DTypeRepr {
    fn from(d: DType) -> Self {
        match d {
            DType::UInt(b) => DTypeRepr::UInt(b),
            DType::Int(b) => DTypeRepr::Int(b),
            DType::Float { exp, man } => DTypeRepr::Float { exp, man },
            DType::F8E4M3 => DTypeRepr::F8E4M3,
            DType::F8E5M2 => DTypeRepr::F8E5M2,
            DType::F16 => DTypeRepr::F16,
            DType::BF16 => DTypeRepr::BF16,
            DType::F32 => DTypeRepr::F32,
        }
    }
}

impl TryFrom<DTypeRepr> for DType {
    type Error = DTypeError;
    fn try_from(r: DTypeRepr) -> Result<Self, DTypeError> {
        let d = match r {
            DTypeRepr::UInt(b) => DType::UInt(b),
            DTypeRepr::Int(b) => DType::Int(b),
            DTypeRepr::Float { exp, man } => DType::Float { exp, man },
            DTypeRepr::F8E4M3 => DType::F8E4M3,
            DTypeRepr::F8E5M2 => DType::F8E5M2,
            DTypeRepr::F16 => DType::F16,
            DTypeRepr::BF16 => DType::BF16,
            DTypeRepr::F32 => DType::F32,
        };
        d.validate().map(|()| d)
    }
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
    /// A hand-built value that is not one of the types (see [`DType::validate`]). Printed with
    /// `Debug` because `Display` of such a value is not a name that parses.
    #[error("{dtype:?} is not a valid data type: {reason}")]
    Invalid { dtype: DType, reason: String },
}

impl DType {
    /// Storage width in bits.
    pub fn bits(self) -> u32 {
        match self {
            DType::UInt(b) | DType::Int(b) => b as u32,
            DType::Float { exp, man } => 1 + exp as u32 + man as u32,
            DType::F8E4M3 | DType::F8E5M2 => 8,
            DType::F16 | DType::BF16 => 16,
            DType::F32 => 32,
        }
    }
    pub fn kind(self) -> Kind {
        match self {
            DType::UInt(_) => Kind::UInt,
            DType::Int(_) => Kind::Int,
            _ => Kind::Float,
        }
    }
    /// True for types narrower than 8 bits (stored packed).
    pub fn is_sub_byte(self) -> bool {
        self.bits() < 8
    }
    /// Value of bit pattern `code` (low `bits()` bits; higher bits must be zero).
    /// Floats with inf/nan codes decode to `f64::INFINITY`/`NAN`.
    ///
    /// Bits above `bits()` are ignored (masked off), so this never panics. Every value of every
    /// type is exactly representable in `f64`, so decoding is exact. For a hand-built invalid
    /// type the value is unspecified (possibly NaN): use [`DType::try_decode`] where the type
    /// comes from outside.
    pub fn decode(self, code: u32) -> f64 {
        let code = code & self.code_mask();
        match self {
            DType::UInt(_) => code as f64,
            DType::Int(b) => {
                // Sign-extend from bit b-1 (clamped so hand-built widths cannot overflow).
                let b = b.clamp(1, 32) as u32;
                let c = code as i64;
                (if c >> (b - 1) & 1 == 1 {
                    c - (1i64 << b)
                } else {
                    c
                }) as f64
            }
            DType::F16 => half::f16::from_bits(code as u16).to_f64(),
            DType::BF16 => half::bf16::from_bits(code as u16).to_f64(),
            DType::F32 => f32::from_bits(code) as f64,
            _ => self.small_float().map_or(f64::NAN, |f| f.decode(code)),
        }
    }
    /// Bit pattern nearest to `value`: round to nearest even, saturate to the largest finite
    /// value (integers: round half to even, clamp to the range). NaN is an error.
    ///
    /// Details, for every type but `f32`:
    /// - Rounding is exact (done on the binary representation, never through a fuzzy `f64`
    ///   comparison). A tie goes to the even code (mantissa LSB 0; for a format with no mantissa
    ///   bits, the even exponent field).
    /// - Saturation: a finite value beyond the range and an infinite input both give the largest
    ///   finite magnitude with the input's sign. This holds also for `f8e5m2`, `f16` and `bf16`,
    ///   which have infinity codes: `encode` never produces an infinity (nor a NaN).
    /// - `-0.0`, and a negative value that rounds to zero, give the sign-bit code (negative
    ///   zero), as IEEE rounding does. Integers have no negative zero: they give 0.
    ///
    /// `f32` is the identity on bits (`value.to_bits()`), infinities included.
    ///
    /// A hand-built invalid type is an error ([`DTypeError::Invalid`]), never a made-up code.
    pub fn encode(self, value: f32) -> Result<u32, DTypeError> {
        self.validate()?;
        if value.is_nan() {
            return Err(DTypeError::NaN { dtype: self });
        }
        let code = match self {
            DType::UInt(_) | DType::Int(_) => {
                let (lo, hi) = (self.min_value(), self.max_value());
                // f32 -> f64 is exact; clamp also maps the infinities to the ends.
                let v = (value as f64).round_ties_even().clamp(lo, hi) as i64;
                v as u32 & self.code_mask()
            }
            DType::F16 => {
                // half rounds to nearest even; we only replace its overflow to inf by saturation.
                let h = half::f16::from_f32(value);
                if h.is_infinite() {
                    saturate(value, half::f16::MAX.to_bits())
                } else {
                    h.to_bits() as u32
                }
            }
            DType::BF16 => {
                let h = half::bf16::from_f32(value);
                if h.is_infinite() {
                    saturate(value, half::bf16::MAX.to_bits())
                } else {
                    h.to_bits() as u32
                }
            }
            DType::F32 => value.to_bits(),
            _ => match self.small_float() {
                Some(f) => f.encode(value),
                None => 0,
            },
        };
        Ok(code)
    }

    /// The code of an arithmetic result (`add`.., `mul_add`, `dot`, reductions, math
    /// functions): rounded to nearest even like [`DType::encode`], except that in `f16` and
    /// `bf16`, the half types the GPU computes in, a value beyond the largest finite one is an
    /// infinity, as IEEE arithmetic (`fma.rn.f16x2`, `__float2half_rn`) gives it. Conversions
    /// (`encode`) saturate instead. `f32` keeps its infinities either way; the narrower floats
    /// (`f8e5m2` included) saturate. NaN is an error.
    pub fn round(self, value: f32) -> Result<u32, DTypeError> {
        match self {
            DType::F16 if !value.is_nan() => Ok(half::f16::from_f32(value).to_bits() as u32),
            DType::BF16 if !value.is_nan() => Ok(half::bf16::from_f32(value).to_bits() as u32),
            _ => self.encode(value),
        }
    }

    /// Mask of the low `bits()` bits, where a code lives.
    pub fn code_mask(self) -> u32 {
        match self.bits() {
            b if b >= 32 => u32::MAX,
            b => (1u32 << b) - 1,
        }
    }

    /// Value of bit pattern `code`, or [`DTypeError::Invalid`] for a hand-built invalid type
    /// (where [`DType::decode`] would give an unspecified value, e.g. NaN).
    pub fn try_decode(self, code: u32) -> Result<f64, DTypeError> {
        self.validate()?;
        Ok(self.decode(code))
    }

    /// True for the types this crate defines; see [`DType::validate`].
    pub fn is_valid(self) -> bool {
        self.validate().is_ok()
    }

    /// `Ok` for the types this crate defines: `UInt(1..=8 | 32)`, `Int(2..=8 | 32)`, `Float`
    /// with `exp >= 1` and `3 <= 1+exp+man <= 8`, except `Float { exp: 4, man: 3 }` and
    /// `Float { exp: 5, man: 2 }` (those names denote the OCP types `F8E4M3`/`F8E5M2`, so the
    /// generic variants could not be named), and the fixed types. Otherwise
    /// [`DTypeError::Invalid`] with the reason.
    ///
    /// The variants are public (hundreds of call sites build them), so a value can be built by
    /// hand; parsing only yields valid types, and every API that takes a type from outside
    /// (`encode`, `try_decode`, the `storage::try_*` functions, quantization, the runtime's
    /// `PackedTensor`) calls this before doing any work. On an invalid type the infallible
    /// accessors (`decode`, `max_value`, ...) stay panic-free but their values are unspecified.
    pub fn validate(self) -> Result<(), DTypeError> {
        let reason = match self {
            DType::UInt(b) if !matches!(b, 1..=8 | 32) => {
                format!("unsigned integers have 1..=8 or 32 bits, not {b}")
            }
            DType::Int(b) if !matches!(b, 2..=8 | 32) => format!(
                "signed integers have 2..=8 or 32 bits (a sign bit and a value bit at least), \
                 not {b}"
            ),
            DType::Float { exp: 0, .. } => {
                "a float needs at least one exponent bit (exp >= 1)".to_string()
            }
            DType::Float { exp, man } if !(3..=8).contains(&(1 + exp as u32 + man as u32)) => {
                format!(
                    "generic floats have 3..=8 bits, not 1 + {exp} + {man} = {}",
                    1 + exp as u32 + man as u32
                )
            }
            DType::Float { exp: 4, man: 3 } => {
                "e4m3 is the OCP type: use DType::F8E4M3 (`f8e4m3`)".to_string()
            }
            DType::Float { exp: 5, man: 2 } => {
                "e5m2 is the OCP type: use DType::F8E5M2 (`f8e5m2`)".to_string()
            }
            _ => return Ok(()),
        };
        Err(DTypeError::Invalid {
            dtype: self,
            reason,
        })
    }

    /// True for signed integers and all floats.
    pub fn is_signed(self) -> bool {
        !matches!(self, DType::UInt(_))
    }

    pub fn is_float(self) -> bool {
        self.kind() == Kind::Float
    }

    /// True if some code decodes to an infinity (`f8e5m2`, `f16`, `bf16`, `f32`).
    pub fn has_inf(self) -> bool {
        matches!(self, DType::F8E5M2 | DType::F16 | DType::BF16 | DType::F32)
    }

    /// The code of a load's fill value (what masked-off elements read as): [`DType::encode`],
    /// except that an infinity stays an infinity in the types that have one (`-inf` is the
    /// identity of a maximum, and saturating it to the largest finite value would let a masked
    /// element tie with a real one).
    pub fn fill_code(self, value: f64) -> Result<u32, DTypeError> {
        if value.is_infinite() && self.has_inf() {
            let sign = if value < 0.0 {
                1u32 << (self.bits() - 1)
            } else {
                0
            };
            // All-ones exponent, zero mantissa: sign | exponent bits.
            let exponent = match self {
                DType::F32 => 0x7f80_0000,
                DType::F16 => 0x7c00,
                DType::BF16 => 0x7f80,
                _ => 0x7c, // f8e5m2
            };
            return Ok(sign | exponent);
        }
        self.validate()?;
        if value.is_nan() {
            return Err(DTypeError::NaN { dtype: self });
        }
        if self.is_float() {
            self.encode(value as f32)
        } else {
            // Integers round half to even and clamp, exactly (no detour through f32).
            let v = value
                .round_ties_even()
                .clamp(self.min_value(), self.max_value()) as i64;
            Ok(v as u32 & self.code_mask())
        }
    }

    /// True if some code decodes to NaN (`f8e4m3` and the types with infinities).
    pub fn has_nan(self) -> bool {
        self.has_inf() || self == DType::F8E4M3
    }

    /// Exponent bias of a float type; `None` for integers.
    pub fn exponent_bias(self) -> Option<i32> {
        match self {
            DType::F16 => Some(15),
            DType::BF16 | DType::F32 => Some(127),
            _ => self.small_float().map(|f| f.bias()),
        }
    }

    /// Largest finite value.
    pub fn max_value(self) -> f64 {
        match self {
            DType::UInt(_) => self.code_mask() as f64,
            DType::Int(b) => ((1i64 << (b.clamp(1, 32) - 1)) - 1) as f64,
            DType::F16 => half::f16::MAX.to_f64(),
            DType::BF16 => half::bf16::MAX.to_f64(),
            DType::F32 => f32::MAX as f64,
            _ => self
                .small_float()
                .map_or(f64::NAN, |f| f.decode(f.max_finite_code())),
        }
    }

    /// Smallest (most negative) finite value.
    pub fn min_value(self) -> f64 {
        match self {
            DType::UInt(_) => 0.0,
            DType::Int(b) => -((1i64 << (b.clamp(1, 32) - 1)) as f64),
            _ => -self.max_value(),
        }
    }

    /// `values()[c]` is `decode(c)` for every code `c < 2^bits()`, for types of at most 8 bits
    /// (the ones a lookup table suits); `None` for the 16- and 32-bit types, and for a
    /// hand-built invalid type (so no table of made-up values is ever handed out).
    pub fn values(self) -> Option<Vec<f64>> {
        (self.bits() <= 8 && self.is_valid())
            .then(|| (0..=self.code_mask()).map(|c| self.decode(c)).collect())
    }

    /// Every valid type, narrowest first within each family.
    pub fn all() -> impl Iterator<Item = DType> {
        let uints = (1..=8).chain([32]).map(DType::UInt);
        let ints = (2..=8).chain([32]).map(DType::Int);
        let floats = (3u8..=8).flat_map(|n| {
            (1..n).map(move |exp| match (exp, n - 1 - exp) {
                (4, 3) => DType::F8E4M3,
                (5, 2) => DType::F8E5M2,
                (exp, man) => DType::Float { exp, man },
            })
        });
        uints
            .chain(ints)
            .chain(floats)
            .chain([DType::F16, DType::BF16, DType::F32])
    }

    /// Every valid type narrower than 8 bits.
    pub fn all_sub_byte() -> impl Iterator<Item = DType> {
        Self::all().filter(|t| t.is_sub_byte())
    }

    /// The format of the small floats (generic and FP8); `None` for everything else.
    fn small_float(self) -> Option<FloatFormat> {
        let (exp, man, specials) = match self {
            DType::Float { exp, man } => (exp, man, Specials::Finite),
            DType::F8E4M3 => (4, 3, Specials::AllOnesNan),
            DType::F8E5M2 => (5, 2, Specials::Ieee),
            _ => return None,
        };
        // Guard hand-built invalid values: the format math needs 1 <= exp, a width that fits a
        // u32 code, and exponents that stay inside f64's normal range.
        ((1..=8).contains(&exp) && exp as u32 + man as u32 <= 30).then_some(FloatFormat {
            exp: exp as u32,
            man: man as u32,
            specials,
        })
    }
}

/// Largest finite code of a 16-bit float with the sign of `value`.
fn saturate(value: f32, max_bits: u16) -> u32 {
    let sign = if value.is_sign_negative() { 0x8000 } else { 0 };
    sign | max_bits as u32
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DType::UInt(b) => write!(f, "u{b}"),
            DType::Int(b) => write!(f, "i{b}"),
            DType::Float { exp, man } => write!(f, "f{}e{exp}m{man}", self.bits()),
            DType::F8E4M3 => f.write_str("f8e4m3"),
            DType::F8E5M2 => f.write_str("f8e5m2"),
            DType::F16 => f.write_str("f16"),
            DType::BF16 => f.write_str("bf16"),
            DType::F32 => f.write_str("f32"),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Int => "int",
            Kind::UInt => "uint",
            Kind::Float => "float",
        })
    }
}

impl FromStr for DType {
    type Err = DTypeError;
    /// Parse a canonical name (`u4`, `i6`, `f6e3m2`, `f8e4m3`, `bf16`, ...). Any error carries
    /// a reason; the message also lists the names that exist.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        name::parse(s).map_err(|reason| DTypeError::UnknownName {
            name: s.to_string(),
            reason,
        })
    }
}
