//! Dense GEMM on Hopper's warpgroup MMA (`wgmma`), written with `#[kernel]`.

pub mod kernel;

pub use kernel::{
    gemm_bf16, gemm_f16, gemm_persistent_bf16, gemm_persistent_f16, gemm_tma_bf16, gemm_tma_e4m3,
    gemm_tma_e5m2, gemm_tma_f16, gemm_tma_i8, gemm_ws_bf16, gemm_ws_f16,
};
pub mod bench;
pub mod w4;
