//! Shared-memory layouts: strides plus an optional XOR swizzle.
//!
//! `offset(index) = swizzle(sum(index[d] * strides[d]))`, in elements. The swizzle permutes
//! offsets inside aligned blocks so that accesses which would hit the same shared-memory banks
//! (e.g. the first 16-byte chunk of each row of a 128-byte-wide tile) are spread out.

use super::LayoutError;

/// XOR swizzle on element offsets, in the CUTLASS `Swizzle<B, M, S>` convention
/// (`bits` = B, `base` = M, `shift` = S):
///
/// ```text
/// apply(x) = x ^ (((x >> (base + shift)) & ((1 << bits) - 1)) << base)
/// ```
///
/// The `bits` bits starting at `base + shift` are XORed into the `bits` bits starting at
/// `base`. Units of `2^base` elements (e.g. 16-byte chunks: `base = 3` for f16) stay together;
/// the chunk index within a row of `2^shift` chunks is XORed with the row number modulo
/// `2^bits`. With `shift >= bits` (checked by [`Swizzle::new`]) the source bits are left
/// unchanged, so `apply` is its own inverse and a bijection on every aligned block of
/// `2^(bits + base + shift)` offsets; only bits below `base + bits` ever change. A swizzle
/// written as a struct literal should meet the same conditions; `apply` never panics either
/// way, but `block` and [`SharedLayout::size`] assume `bits + base + shift` fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Swizzle {
    pub bits: u32,
    pub base: u32,
    pub shift: u32,
}

impl Swizzle {
    /// A validated swizzle: `shift >= bits` and `bits + base + shift` below the pointer width.
    pub fn new(bits: u32, base: u32, shift: u32) -> Result<Swizzle, LayoutError> {
        if shift < bits {
            return Err(LayoutError::Invalid(format!(
                "swizzle: shift {shift} must be at least bits {bits}, or the XOR reads the bits \
                 it writes"
            )));
        }
        if bits as u64 + base as u64 + shift as u64 >= usize::BITS as u64 {
            return Err(LayoutError::Invalid(format!(
                "swizzle: bits + base + shift = {} does not fit in an offset",
                bits as u64 + base as u64 + shift as u64
            )));
        }
        Ok(Swizzle { bits, base, shift })
    }

    /// The swizzled offset; see the type documentation.
    pub fn apply(&self, offset: usize) -> usize {
        // Checked shifts: out-of-range amounts (only possible without `new`) shift to 0.
        let mask = 1usize.checked_shl(self.bits).map_or(usize::MAX, |b| b - 1);
        let source = offset
            .checked_shr(self.base.saturating_add(self.shift))
            .unwrap_or(0);
        offset ^ (source & mask).checked_shl(self.base).unwrap_or(0)
    }

    /// `2^(bits + base + shift)`: the swizzle is a permutation of each aligned block this long.
    pub fn block(&self) -> usize {
        1 << (self.bits + self.base + self.shift)
    }
}

/// A shared-memory tile: `offset(index) = swizzle(sum(index[d] * strides[d]))` in elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SharedLayout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub swizzle: Option<Swizzle>,
}

impl SharedLayout {
    /// Compact row-major tile (last dimension contiguous), no swizzle.
    pub fn row_major(shape: &[usize]) -> SharedLayout {
        let mut strides = vec![0; shape.len()];
        let mut stride: usize = 1;
        for d in (0..shape.len()).rev() {
            strides[d] = stride;
            // Saturating: a tile too large to address gets `size() == usize::MAX`, which the
            // verifier rejects, instead of wrapped strides.
            stride = stride.saturating_mul(shape[d]);
        }
        SharedLayout {
            shape: shape.to_vec(),
            strides,
            swizzle: None,
        }
    }

    /// Compact column-major tile (dimension 0 contiguous), no swizzle.
    pub fn column_major(shape: &[usize]) -> SharedLayout {
        let mut strides = vec![0; shape.len()];
        let mut stride: usize = 1;
        for d in 0..shape.len() {
            strides[d] = stride;
            stride = stride.saturating_mul(shape[d]);
        }
        SharedLayout {
            shape: shape.to_vec(),
            strides,
            swizzle: None,
        }
    }

    /// A tile with explicit strides (e.g. padded rows), no swizzle.
    pub fn strided(shape: &[usize], strides: &[usize]) -> Result<SharedLayout, LayoutError> {
        if shape.len() != strides.len() {
            return Err(LayoutError::RankMismatch {
                op: "strides",
                left: shape.len(),
                right: strides.len(),
            });
        }
        Ok(SharedLayout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            swizzle: None,
        })
    }

    /// The same tile with `swizzle` applied to every offset.
    pub fn with_swizzle(self, swizzle: Swizzle) -> SharedLayout {
        SharedLayout {
            swizzle: Some(swizzle),
            ..self
        }
    }

    /// The same bytes with dimension `d` of the result taken from dimension `dims[d]`; `dims`
    /// must be a permutation of `0..rank`.
    pub fn permute(&self, dims: &[usize]) -> Result<SharedLayout, LayoutError> {
        let rank = self.rank();
        let mut seen = vec![false; rank];
        let is_permutation = dims.len() == rank
            && dims
                .iter()
                .all(|&d| d < rank && !std::mem::replace(&mut seen[d], true));
        if !is_permutation {
            return Err(LayoutError::Invalid(format!(
                "permute: {dims:?} is not a permutation of the {rank} dimensions"
            )));
        }
        Ok(SharedLayout {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            swizzle: self.swizzle,
        })
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Offset of element `index`, in elements.
    ///
    /// # Panics
    /// If `index` has the wrong rank; in debug builds also if it is outside the shape.
    pub fn offset(&self, index: &[usize]) -> usize {
        assert_eq!(
            index.len(),
            self.rank(),
            "SharedLayout::offset: rank-{} index into a rank-{} layout",
            index.len(),
            self.rank()
        );
        debug_assert!(
            index.iter().zip(&self.shape).all(|(&x, &n)| x < n),
            "SharedLayout::offset: index {index:?} outside shape {:?}",
            self.shape
        );
        let linear: usize = index.iter().zip(&self.strides).map(|(x, s)| x * s).sum();
        self.swizzle.map_or(linear, |s| s.apply(linear))
    }

    /// Elements the allocation must hold: one past the largest unswizzled offset, rounded up
    /// to a multiple of `2^(base + bits)` when swizzled (the swizzle only changes bits below
    /// `base + bits`, so this bounds every swizzled offset; it is exact whenever the tile spans
    /// whole blocks, as swizzled tiles do in practice). 0 for an empty shape extent.
    /// Saturates at `usize::MAX`; see [`SharedLayout::checked_size`].
    pub fn size(&self) -> usize {
        self.checked_size().unwrap_or(usize::MAX)
    }

    /// [`SharedLayout::size`], or `None` when it does not fit in `usize`.
    pub fn checked_size(&self) -> Option<usize> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        let mut span: usize = 1;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            span = span.checked_add((n - 1).checked_mul(s)?)?;
        }
        match self.swizzle {
            Some(s) => {
                let block = 1usize.checked_shl(s.base.checked_add(s.bits)?)?;
                span.checked_next_multiple_of(block)
            }
            None => Some(span),
        }
    }
}
