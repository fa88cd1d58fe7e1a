//! The dequantization program of [`QMatmulMethod::DequantizeThenGemm`]: the re-laid-out weight
//! becomes a dense row-major `[k, n]` matrix of the activation type, which a GEMM then
//! multiplies (cuBLAS on the GPU, a host loop on the CPU runner).
//!
//! The program is [`super::kernel::qmatmul_dequant`]; this module checks the tile shape it
//! needs.
//!
//! [`QMatmulMethod::DequantizeThenGemm`]: super::config::QMatmulMethod

use super::config::{config_err, QMatmulError};

/// The rows of a `[bk, bn]` tile that `threads` threads store in one pass of 16-byte accesses
/// (eight consecutive elements each, `bn / 8` threads per row), or an error naming the field
/// that does not fit: the `ROWS` of [`super::kernel::qmatmul_dequant`].
pub(crate) fn store_rows(threads: usize, bk: usize, bn: usize) -> Result<usize, QMatmulError> {
    let cols = bn / 8;
    if !bn.is_multiple_of(8) || cols == 0 || !threads.is_multiple_of(cols) {
        return Err(config_err(
            "bn",
            format!("{bn} does not split into 16-byte rows over {threads} threads"),
        ));
    }
    let rows = threads / cols;
    if !bk.is_multiple_of(rows) {
        return Err(config_err(
            "bk",
            format!("{bk} rows are not a multiple of the {rows} rows one pass of {threads} threads stores"),
        ));
    }
    Ok(rows)
}
