//! Shared-memory addressing and sizes, used by the verifier (the per-block total) and the
//! interpreter (the bump allocator), so both agree byte for byte.
//!
//! `SharedLayout` has no offset function yet in `crate::layout`; this private helper follows its
//! documented contract: `offset(index) = swizzle(base + sum(index[d] * strides[d]))` in elements,
//! with the swizzle `o ^ (((o >> shift) & (2^bits - 1)) << base)`. `base` is the element offset
//! of a slice inside its allocation: slices are swizzled as part of the whole allocation.

use crate::layout::{SharedLayout, Swizzle};
use crate::DType;

/// Every shared tensor starts at a multiple of 16 bytes (cp.async 16B and ldmatrix need it).
pub(crate) const SHARED_ALIGN: usize = 16;

pub(crate) fn swizzle(sw: Option<Swizzle>, offset: usize) -> usize {
    match sw {
        None => offset,
        Some(s) => {
            let mask = (1usize << s.bits) - 1;
            offset ^ (((offset >> s.shift) & mask) << s.base)
        }
    }
}

/// Element offset (from the allocation's start) of `index` in a tensor whose first element sits
/// at unswizzled element offset `base`.
pub(crate) fn element_offset(layout: &SharedLayout, base: usize, index: &[usize]) -> usize {
    let linear: usize = index
        .iter()
        .zip(&layout.strides)
        .map(|(i, s)| i * s)
        .sum();
    swizzle(layout.swizzle, base + linear)
}

/// Elements an allocation must span: one past the largest offset any index can reach. The
/// swizzle only flips bits `[base, base + bits)`, so setting them all bounds it.
pub(crate) fn span_elements(layout: &SharedLayout) -> usize {
    if layout.shape.contains(&0) {
        return 0;
    }
    let max: usize = layout
        .shape
        .iter()
        .zip(&layout.strides)
        .map(|(n, s)| (n - 1) * s)
        .sum();
    let max = match layout.swizzle {
        Some(s) => max | (((1usize << s.bits) - 1) << s.base),
        None => max,
    };
    max + 1
}

/// Bytes one `AllocateShared` takes, including the alignment padding that follows it.
pub(crate) fn allocation_bytes(dtype: DType, layout: &SharedLayout) -> usize {
    (span_elements(layout) * dtype.bits() as usize)
        .div_ceil(8)
        .next_multiple_of(SHARED_ALIGN)
}
