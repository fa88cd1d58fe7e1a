//! Shared-memory layouts: strides plus an optional XOR swizzle.

/// XOR swizzle on element offsets, as in CUTLASS-style `Swizzle<bits, base, shift>`:
/// `offset ^ ((offset >> shift) & mask) << base` style, documented where implemented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Swizzle {
    pub bits: u32,
    pub base: u32,
    pub shift: u32,
}

/// A shared-memory tile: `offset(index) = swizzle(sum(index[d] * strides[d]))` in elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SharedLayout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub swizzle: Option<Swizzle>,
}
