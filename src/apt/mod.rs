//! APT-LLM formats on the host: bipolar-INT numbers, per-row quantization of a matrix to them,
//! and the bit planes the 1-bit tensor-core GEMM reads (issue 20; `docs/apt.md`).
//!
//! - [`bipolar`]: the bipolar-INT format of 1..8 bits (each bit reads as -1 or +1), its
//!   encoding, and the lossless conversion from signed INT with a scale and zero point.
//! - [`matrix`]: [`AptMatrix`], a `[rows, k]` matrix quantized per row to bipolar-INT (weights
//!   per output channel, activations per token), its bit planes and row sums of codes.

pub mod bipolar;
pub mod matrix;

pub use bipolar::Bipolar;
pub use matrix::AptMatrix;

/// Bad input to the APT formats and layers; each names the argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AptError {
    #[error("argument `{arg}`: bipolar-INT has 1 to 8 bits, not {bits}")]
    Bits { arg: &'static str, bits: u32 },
    #[error("argument `value`: {value} is not a {bits}-bit bipolar-INT value (odd, |v| <= {max})")]
    Value { value: i64, bits: u32, max: i64 },
    #[error("argument `code`: {code} does not fit {bits} bits")]
    Code { code: u32, bits: u32 },
    #[error("argument `k`: {k} is not a positive multiple of {multiple}")]
    K { k: usize, multiple: usize },
    #[error("argument `{arg}`: must be positive")]
    Empty { arg: &'static str },
    #[error("argument `{arg}`: expected {expected} values, got {got}")]
    Len {
        arg: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("argument `{arg}`: value at row {row}, column {col} is not finite ({value})")]
    NotFinite {
        arg: &'static str,
        row: usize,
        col: usize,
        value: f32,
    },
    #[error("argument `group`: {reason}")]
    Group { reason: String },
    #[error("arguments `k`, `wbits`, `abits`: {reason}")]
    Overflow { reason: String },
    #[error("argument `split`: {split} k slices of the fused decode kernel (1 or 4, dividing k's {steps} steps)")]
    Split { split: i32, steps: usize },
    #[error("{0}")]
    Kernel(String),
}
