//! VQ-LLM (issue 18, `docs/vq.md`): the VQ-GEMV with a codebook cache and the naive "GC"
//! baseline ([`kernel`]), the layer ([`linear::VqLinear`], [`linear::GpuVqLinear`]) and
//! `tilus bench vq` ([`bench`]). The weight format and k-means live in [`crate::vq`].

pub mod bench;
pub mod kernel;
pub mod linear;
pub mod lut;

pub use linear::{GpuVqLinear, VqCache, VqLinear, VqLutScratch};
