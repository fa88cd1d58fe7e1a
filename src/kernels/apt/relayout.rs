//! The weight's bit planes made on the GPU: [`apt_split_planes`] turns codes already on the
//! device (one byte each, `[rows, k]`, as [`AptMatrix::codes`](crate::apt::AptMatrix::codes)
//! holds them, e.g. read from a checkpoint) into the `[bits][rows][k / 32]` plane words and row
//! sums of codes that the GEMMs read, the same bits as the host's
//! [`AptMatrix::planes`](crate::apt::AptMatrix::planes) and
//! [`row_sums`](crate::apt::AptMatrix::row_sums). [`split_planes_cpu`] runs the same kernel on
//! the interpreter.

use super::kernel::apt_split_planes;
use super::linear::kernel_err;
use crate::apt::AptError;
use std::sync::Arc;
use tilus_runtime::{Context, DeviceBuffer};

/// The kernel's configuration for `len` codes of `rows x k` at `bits` bits, after checking
/// what both entry points share: 1 to 8 bits, `rows` positive, `k` a positive multiple of 32,
/// `rows · k` codes, and the sizes the kernel indexes in `i32` (`bits · rows` plane rows, a row
/// sum of up to `255 · k`).
fn config(
    len: usize,
    rows: usize,
    k: usize,
    bits: u32,
) -> Result<apt_split_planes::Config, AptError> {
    if !(1..=8).contains(&bits) {
        return Err(AptError::Bits { arg: "bits", bits });
    }
    if rows == 0 {
        return Err(AptError::Empty { arg: "rows" });
    }
    if k == 0 || !k.is_multiple_of(32) {
        return Err(AptError::K { k, multiple: 32 });
    }
    let too_large = |arg: &str, what: String| {
        AptError::Kernel(format!("argument `{arg}`: {what} does not fit an i32"))
    };
    if k.checked_mul(255).is_none_or(|s| s > i32::MAX as usize) {
        return Err(too_large("k", format!("a row sum of up to 255 · {k}")));
    }
    if rows
        .checked_mul(bits as usize)
        .is_none_or(|r| r > i32::MAX as usize)
    {
        return Err(too_large("rows", format!("{bits} · {rows} plane rows")));
    }
    if rows.checked_mul(k) != Some(len) {
        return Err(AptError::Len {
            arg: "codes",
            expected: rows.saturating_mul(k),
            got: len,
        });
    }
    Ok(apt_split_planes::Config {
        BITS: bits as i32,
        WARPS: 4,
    })
}

/// [`split_planes_gpu`] on the CPU interpreter, with every code checked to fit `bits` bits
/// (the GPU cannot check a device buffer's values without reading it back).
pub fn split_planes_cpu(
    codes: &[u8],
    rows: usize,
    k: usize,
    bits: u32,
) -> Result<(Vec<u32>, Vec<i32>), AptError> {
    let cfg = config(codes.len(), rows, k, bits)?;
    if let Some(&code) = codes.iter().find(|&&c| u32::from(c) >> bits != 0) {
        return Err(AptError::Code {
            code: code.into(),
            bits,
        });
    }
    let mut planes = vec![0u32; bits as usize * rows * (k / 32)];
    let mut sums = vec![0i32; rows];
    apt_split_planes::interpret(&cfg, rows as i32, k as i32, codes, &mut planes, &mut sums)
        .map_err(kernel_err)?;
    Ok((planes, sums))
}

/// The `[bits][rows][k / 32]` plane words and the `rows` sums of codes of `codes[rows, k]`
/// (`0..2^bits`, one byte each) on `ctx`'s GPU, in one launch on its stream. A code of more
/// than `bits` bits is not detected here: its low bits go to the planes and its whole value to
/// the sum (check codes from an untrusted source on the host, or with [`split_planes_cpu`]).
pub fn split_planes_gpu(
    ctx: &Arc<Context>,
    codes: &DeviceBuffer<u8>,
    rows: usize,
    k: usize,
    bits: u32,
) -> Result<(DeviceBuffer<u32>, DeviceBuffer<i32>), AptError> {
    let cfg = config(codes.len(), rows, k, bits)?;
    let mut planes =
        DeviceBuffer::zeros(ctx, bits as usize * rows * (k / 32)).map_err(kernel_err)?;
    let mut sums = DeviceBuffer::zeros(ctx, rows).map_err(kernel_err)?;
    apt_split_planes::launch(
        ctx,
        &cfg,
        rows as i32,
        k as i32,
        codes,
        &mut planes,
        &mut sums,
    )
    .map_err(kernel_err)?;
    Ok((planes, sums))
}
