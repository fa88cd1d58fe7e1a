//! Runtime: lands with issue 6.
