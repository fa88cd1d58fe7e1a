//! Dense GEMM on Hopper's warpgroup MMA (`wgmma`), written with `#[kernel]`.

pub mod kernel;

pub use kernel::{gemm_bf16, gemm_f16, gemm_tma_bf16, gemm_tma_f16};
pub mod bench;
pub mod w4;
