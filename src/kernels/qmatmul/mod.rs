//! The quantized matmul family: `C[m, n] = A[m, k] · dequant(W)[k, n]` for weights of any type
//! of 1 to 8 bits, f16 or bf16 activations, group-wise or per-channel scales and optional zero
//! points (paper sections 6.2 and 8).

mod config;
mod layouts;
mod program;

pub use config::{is_weight_type, QMatmulConfig, QMatmulError, Tiling};
pub use layouts::{split_dim, QMatmulLayouts};
pub use program::{a_swizzle, build, config_name, reduce_layout, QMatmulKernel, TARGET};
