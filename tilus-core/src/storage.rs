//! Compact storage of sub-byte values.
//!
//! Contract: value `j` of a `b`-bit type occupies stream bits `[j*b, (j+1)*b)`, where stream bit
//! `k` is bit `k % 8` (LSB first) of byte `k / 8`. Values may straddle two bytes. This matches
//! little-endian registers on the GPU, so a `u8`/`u32` tile viewed as `i6` is exactly this order.
//! The same rule covers 8-, 16- and 32-bit types, for which it is plain little-endian storage.
//!
//! Example: `u4` codes `[0x1, 0x2, 0x3]` pack to `[0x21, 0x03]`; `i6` codes `[a, b]` put `a` in
//! bits 0..6 of byte 0 and `b` in bits 6..8 of byte 0 (its low 2 bits) and bits 0..4 of byte 1.
//!
//! Bad input, by design:
//! - A code with bits set above the type's width: those bits are ignored (masked off), so a bad
//!   code never corrupts its neighbours.
//! - Too few bytes for `unpack`, or an index past the end in `get`/`set`: panics, like slice
//!   indexing, with a message naming the sizes. Extra trailing bytes are ignored and untouched.
//! - A hand-built invalid `DType` (see [`DType::validate`]), or a length whose bit count
//!   overflows `usize`: panics, naming it.
//!
//! The `try_` functions ([`try_packed_len`], [`try_pack`], [`try_unpack`]) report all of these
//! as a [`StorageError`] instead, before any work: use them for data and types that come from
//! outside.
//!
//! ```
//! use tilus_core::{storage, DType};
//! let i6 = DType::Int(6);
//! let bytes = storage::pack(i6, &[0b101010, 0b110111]);
//! assert_eq!(bytes, [0b11_101010, 0b1101]); // the second value straddles the byte boundary
//! assert_eq!(storage::unpack(i6, &bytes, 2), [0b101010, 0b110111]);
//! ```

use crate::dtype::DTypeError;
use crate::DType;

/// Bad input to the `try_` functions; each names the argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StorageError {
    #[error("argument `dtype`: {0}")]
    DType(#[from] DTypeError),
    #[error("argument `len`: {len} values of {dtype} are more bits than usize can count")]
    TooLong { len: usize, dtype: DType },
    #[error("argument `bytes`: {len} {dtype} values need {need} bytes, got {got}")]
    Short {
        len: usize,
        dtype: DType,
        need: usize,
        got: usize,
    },
}

/// Bytes needed to store `len` values of `dtype` with no gaps.
///
/// Panics (in release builds too, rather than wrapping to a short length) if `dtype` is invalid
/// or `len * bits` overflows; see [`try_packed_len`].
pub fn packed_len(dtype: DType, len: usize) -> usize {
    try_packed_len(dtype, len).unwrap_or_else(|e| panic!("packed_len: {e}"))
}

/// [`packed_len`], with an invalid type or an overflowing length as an error.
pub fn try_packed_len(dtype: DType, len: usize) -> Result<usize, StorageError> {
    dtype.validate()?;
    len.checked_mul(dtype.bits() as usize)
        .map(|bits| bits.div_ceil(8))
        .ok_or(StorageError::TooLong { len, dtype })
}

/// [`pack`], with an invalid type as an error.
pub fn try_pack(dtype: DType, codes: &[u32]) -> Result<Vec<u8>, StorageError> {
    try_packed_len(dtype, codes.len())?;
    Ok(pack(dtype, codes))
}

/// [`unpack`], with an invalid type, an overflowing `len` or too few bytes as an error.
pub fn try_unpack(dtype: DType, bytes: &[u8], len: usize) -> Result<Vec<u32>, StorageError> {
    let need = try_packed_len(dtype, len)?;
    if bytes.len() < need {
        return Err(StorageError::Short {
            len,
            dtype,
            need,
            got: bytes.len(),
        });
    }
    Ok(unpack(dtype, bytes, len))
}

/// Pack bit patterns (each in the low `dtype.bits()` bits) into bytes.
///
/// The result has exactly [`packed_len`] bytes; the padding bits of the last byte are zero.
pub fn pack(dtype: DType, codes: &[u32]) -> Vec<u8> {
    let b = width(dtype);
    let mask = dtype.code_mask() as u64;
    let mut out = Vec::with_capacity(packed_len(dtype, codes.len()));
    // Bit accumulator: fewer than 8 pending bits between codes, so 8 + 32 bits always fit.
    let mut acc = 0u64;
    let mut pending = 0u32;
    for &code in codes {
        acc |= (code as u64 & mask) << pending;
        pending += b;
        while pending >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            pending -= 8;
        }
    }
    if pending > 0 {
        out.push(acc as u8);
    }
    out
}

/// Unpack `len` bit patterns from packed bytes.
///
/// Panics if `bytes` is shorter than [`packed_len`]`(dtype, len)`; extra bytes are ignored.
pub fn unpack(dtype: DType, bytes: &[u8], len: usize) -> Vec<u32> {
    let b = width(dtype);
    let need = packed_len(dtype, len);
    assert!(
        bytes.len() >= need,
        "unpack: {len} {dtype} values need {need} bytes, got {}",
        bytes.len()
    );
    let mask = dtype.code_mask() as u64;
    let mut out = Vec::with_capacity(len);
    let mut acc = 0u64;
    let mut avail = 0u32;
    let mut next = bytes[..need].iter();
    for _ in 0..len {
        while avail < b {
            // Cannot run out: `need` bytes hold at least len * b bits.
            acc |= (*next.next().expect("enough bytes checked above") as u64) << avail;
            avail += 8;
        }
        out.push((acc & mask) as u32);
        acc >>= b;
        avail -= b;
    }
    out
}

/// Read value `index` from packed bytes.
///
/// Panics if the value does not lie wholly within `bytes`.
pub fn get(dtype: DType, bytes: &[u8], index: usize) -> u32 {
    let (first, shift, window) = locate(dtype, bytes.len(), index);
    let mut word = 0u64;
    for (i, &byte) in bytes[first..first + window].iter().enumerate() {
        word |= (byte as u64) << (8 * i);
    }
    ((word >> shift) & dtype.code_mask() as u64) as u32
}

/// Write value `index` into packed bytes, leaving every other value's bits untouched.
///
/// Bits of `code` above the type's width are ignored. Panics if the value does not lie wholly
/// within `bytes`.
pub fn set(dtype: DType, bytes: &mut [u8], index: usize, code: u32) {
    let (first, shift, window) = locate(dtype, bytes.len(), index);
    let mask = (dtype.code_mask() as u64) << shift;
    let value = ((code as u64) << shift) & mask;
    for (i, byte) in bytes[first..first + window].iter_mut().enumerate() {
        let m = (mask >> (8 * i)) as u8;
        *byte = (*byte & !m) | (value >> (8 * i)) as u8;
    }
}

/// The VM types a host buffer can hold directly: each is a Rust element type of the same name
/// (`f16` and `bf16` from the `half` crate). A buffer of any other type travels as its packed
/// bytes (`u8`) and the kernel reinterprets them. The runtime's `HostElement` is implemented
/// for exactly these, and `#[kernel]` accepts exactly these in `Global<T>`.
pub const HOST_TYPES: [DType; 7] = [
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::Int(8),
    DType::UInt(8),
    DType::Int(32),
    DType::UInt(32),
];

/// The host element type a buffer of `dtype` travels as: `dtype` itself when it is one of
/// [`HOST_TYPES`], else `u8` (packed bytes).
pub fn host_storage(dtype: DType) -> DType {
    if HOST_TYPES.contains(&dtype) {
        dtype
    } else {
        DType::UInt(8)
    }
}

/// Width in bits, rejecting hand-built invalid types.
fn width(dtype: DType) -> u32 {
    if let Err(e) = dtype.validate() {
        panic!("storage: {e}");
    }
    dtype.bits()
}

/// First byte, bit offset within it, and number of bytes (at most 5) spanned by value `index`.
fn locate(dtype: DType, len_bytes: usize, index: usize) -> (usize, u32, usize) {
    let b = width(dtype) as usize;
    // Bytes of a real slice times 8 cannot overflow on 64-bit, but saturate to be sure.
    let capacity = len_bytes.saturating_mul(8) / b;
    assert!(
        index < capacity,
        "index {index} out of range: {len_bytes} bytes hold {capacity} {dtype} values"
    );
    let start = index * b;
    let shift = start % 8;
    (start / 8, shift as u32, (shift + b).div_ceil(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_examples() {
        assert_eq!(pack(DType::UInt(4), &[1, 2, 3]), [0x21, 0x03]);
        // i6: a = 0b101010 fills byte 0 bits 0..6; b = 0b110111 puts 0b11 in byte 0 bits 6..8
        // and 0b1101 in byte 1 bits 0..4.
        let bytes = pack(DType::Int(6), &[0b101010, 0b110111]);
        assert_eq!(bytes, [0b1110_1010, 0b0000_1101]);
        assert_eq!(get(DType::Int(6), &bytes, 1), 0b110111);
        assert_eq!(
            pack(DType::F16, &[0x1234, 0xabcd]),
            [0x34, 0x12, 0xcd, 0xab]
        );
        assert_eq!(
            pack(DType::UInt(32), &[0x0102_0304]),
            0x0102_0304u32.to_le_bytes()
        );
    }

    #[test]
    fn high_bits_of_codes_are_ignored() {
        let t = DType::UInt(3);
        let bytes = pack(t, &[0xff, 0, 0xff]);
        assert_eq!(unpack(t, &bytes, 3), [7, 0, 7]);
        let mut bytes = vec![0u8; 2];
        set(t, &mut bytes, 1, 0xffff_fff8);
        assert_eq!(bytes, [0, 0]);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn get_past_the_end_panics() {
        // 2 bytes hold two u6 values (12 of 16 bits), not three.
        get(DType::UInt(6), &[0, 0], 2);
    }

    #[test]
    #[should_panic(expected = "need 3 bytes")]
    fn unpack_short_input_panics() {
        unpack(DType::UInt(5), &[0, 0], 4);
    }
}
