//! Shared-memory addressing and sizes, used by the verifier (the per-block total) and the
//! interpreter (the bump allocator), so both agree byte for byte.
//!
//! A shared tensor is an allocation plus the unswizzled element offset `base` of its first
//! element (0, or where a `slice_shared` starts). Element `index` lives at
//! `swizzle(base + sum(index[d] * strides[d]))`: a slice is swizzled as part of the whole
//! allocation, exactly like `SharedLayout::offset` of the allocation would place it.

use crate::layout::SharedLayout;
use crate::DType;

/// Every shared tensor starts at a multiple of 16 bytes (cp.async 16B and ldmatrix need it).
pub(crate) const SHARED_ALIGN: usize = 16;

/// Element offset (from the allocation's start) of `index` of a tensor whose first element is
/// at unswizzled offset `base` of its allocation.
pub(crate) fn element_offset(layout: &SharedLayout, base: usize, index: &[usize]) -> usize {
    let linear: usize = index.iter().zip(&layout.strides).map(|(i, s)| i * s).sum();
    layout
        .swizzle
        .map_or(base + linear, |s| s.apply(base + linear))
}

/// The alignment, in bytes, of an allocation of `dtype` elements in `layout`: 16, or for a
/// swizzled layout the bytes of one swizzle block (1024 for the 128-byte swizzle), so that the
/// swizzle of element offsets is the swizzle of address bits the tensor-core and TMA units apply.
pub(crate) fn allocation_align(dtype: DType, layout: &SharedLayout) -> usize {
    let block_bytes = layout
        .swizzle
        .and_then(|s| 1usize.checked_shl(s.bits + s.base + s.shift))
        .map_or(0, |elements| (elements * dtype.bits() as usize).div_ceil(8));
    block_bytes.max(SHARED_ALIGN)
}

/// Bytes one `allocate_shared` takes, including the alignment padding that follows it
/// (saturating at `usize::MAX`; see [`checked_allocation_bytes`]).
pub(crate) fn allocation_bytes(dtype: DType, layout: &SharedLayout) -> usize {
    checked_allocation_bytes(dtype, layout).unwrap_or(usize::MAX)
}

/// [`allocation_bytes`], or `None` when the count does not fit in `usize`.
pub(crate) fn checked_allocation_bytes(dtype: DType, layout: &SharedLayout) -> Option<usize> {
    layout
        .checked_size()?
        .checked_mul(dtype.bits() as usize)?
        .div_ceil(8)
        .checked_next_multiple_of(allocation_align(dtype, layout))
}
