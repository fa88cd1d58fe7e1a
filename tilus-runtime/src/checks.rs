//! Argument checks shared by buffers, launches and library calls; each error names the
//! argument.

use crate::error::{Result, RuntimeError};

/// `len` must equal `expected`.
pub fn check_len(arg: &str, len: usize, expected: usize) -> Result<()> {
    if len != expected {
        return Err(RuntimeError::invalid_arg(
            arg,
            format!("length {len}, expected {expected}"),
        ));
    }
    Ok(())
}

/// `len` must be at least `min`.
pub fn check_min_len(arg: &str, len: usize, min: usize) -> Result<()> {
    if len < min {
        return Err(RuntimeError::invalid_arg(
            arg,
            format!("length {len}, need at least {min}"),
        ));
    }
    Ok(())
}

/// The address `ptr` must be a multiple of `align` bytes (e.g. 16 for vectorized access).
pub fn check_align(arg: &str, ptr: u64, align: u64) -> Result<()> {
    if align == 0 || !ptr.is_multiple_of(align) {
        return Err(RuntimeError::invalid_arg(
            arg,
            format!("address {ptr:#x} is not {align}-byte aligned"),
        ));
    }
    Ok(())
}

/// `value` must be a multiple of `divisor` (e.g. `k` of the tile size).
pub fn check_divisible<T>(arg: &str, value: T, divisor: T) -> Result<()>
where
    T: Copy + PartialEq + Default + std::fmt::Display + std::ops::Rem<Output = T>,
{
    if divisor == T::default() || value % divisor != T::default() {
        return Err(RuntimeError::invalid_arg(
            arg,
            format!("{value} is not a multiple of {divisor}"),
        ));
    }
    Ok(())
}
