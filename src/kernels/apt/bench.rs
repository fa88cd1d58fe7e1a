//! `tilus bench apt` (filled in below).

/// The `(wbits, abits)` pairs of the bench: W1A2, W2A2, W3A4, W4A4, W2A8.
pub const WIDTHS: [(u32, u32); 5] = [(1, 2), (2, 2), (3, 4), (4, 4), (2, 8)];
