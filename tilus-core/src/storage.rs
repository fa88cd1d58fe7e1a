//! Compact storage of sub-byte values.
//!
//! Contract (implementation lands with issue 2): value `j` of a `b`-bit type occupies stream bits
//! `[j*b, (j+1)*b)`, where stream bit `k` is bit `k % 8` (LSB first) of byte `k / 8`. Values may
//! straddle two bytes. This matches little-endian registers on the GPU, so a `u8`/`u32` tile
//! viewed as `i6` is exactly this order.

use crate::DType;

/// Bytes needed to store `len` values of `dtype` with no gaps.
pub fn packed_len(dtype: DType, len: usize) -> usize {
    (len * dtype.bits() as usize).div_ceil(8)
}

/// Pack bit patterns (each in the low `dtype.bits()` bits) into bytes.
pub fn pack(dtype: DType, codes: &[u32]) -> Vec<u8> {
    let _ = (dtype, codes);
    todo!()
}

/// Unpack `len` bit patterns from packed bytes.
pub fn unpack(dtype: DType, bytes: &[u8], len: usize) -> Vec<u32> {
    let _ = (dtype, bytes, len);
    todo!()
}

/// Read value `index` from packed bytes.
pub fn get(dtype: DType, bytes: &[u8], index: usize) -> u32 {
    let _ = (dtype, bytes, index);
    todo!()
}

/// Write value `index` into packed bytes, leaving every other value's bits untouched.
pub fn set(dtype: DType, bytes: &mut [u8], index: usize, code: u32) {
    let _ = (dtype, bytes, index, code);
    todo!()
}
