//! VQ-LLM (issue 18, `docs/vq.md`): the VQ-GEMV with a codebook cache and the naive "GC"
//! baseline ([`kernel`]), the layer ([`linear::VqLinear`], [`linear::GpuVqLinear`]), its
//! autotuning ([`tune`]) and `tilus bench vq` ([`bench`]). The weight format and k-means live in [`crate::vq`].

pub mod bench;
pub mod cache;
pub mod gemm;
pub mod kernel;
pub mod linear;
pub mod lut;
pub mod tune;

pub use linear::{GpuVqLinear, VqCache, VqLinear, VqLutScratch, VqPrefill};
