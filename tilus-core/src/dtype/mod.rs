//! Data types of the VM: sub-byte integers and floats, and the standard GPU types.

/// A VM data type. Widths of sub-byte types are in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Unsigned integer of 1..=8 or 32 bits (`u1`..`u8`, `u32`).
    UInt(u8),
    /// Two's-complement signed integer of 2..=8 or 32 bits (`i2`..`i8`, `i32`).
    Int(u8),
    /// Generic small float `fNeEmM` (1 sign, `exp` exponent, `man` mantissa bits, 3 <= N <= 8,
    /// `exp >= 1`), with no inf/nan codes. `f8e4m3` and `f8e5m2` are *not* this variant.
    Float { exp: u8, man: u8 },
    /// OCP FP8 E4M3 ("e4m3fn"): no infinities, S.1111.111 is NaN.
    F8E4M3,
    /// OCP FP8 E5M2: IEEE-style infinities and NaNs.
    F8E5M2,
    F16,
    BF16,
    F32,
}
