//! The kernel library: VM programs for LLM serving.
//!
//! - [`qmatmul`]: the quantized matmul family `C = A · dequant(W)` for 1-8 bit weights (paper
//!   sections 6.2 and 8), its offline weight re-layout (Figure 8) and a CPU runner on the
//!   interpreter.
//! - [`linear`]: [`linear::QuantizedLinear`], a layer that quantizes and re-lays-out a weight
//!   once and runs the matmul; [`linear::GpuQuantizedLinear`] runs it on the GPU, autotuned
//!   per `m` bucket on first use ([`linear_gpu`]).
//! - [`rowwise`]: softmax, RMSNorm (plain and fused with the residual add), LayerNorm, argmax,
//!   SiLU-and-mul and rotary embedding for f16 and bf16, written with `#[kernel]`.
//!
//! - [`attention`]: decode attention over a contiguous or paged (optionally quantized) KV cache
//!   and causal prefill attention.
//! - [`gemm`]: dense f16/bf16 and 4-bit-weight GEMMs on Hopper's warpgroup MMA (`wgmma`,
//!   `docs/gemm.md`).
//!
//! Every kernel is a VM program written with `#[kernel]`. The quantized matmul's design and
//! its layouts per bit width are written up in `docs/qmatmul.md`.

pub mod apt;
pub mod attention;
pub mod gemm;
pub mod linear;
pub mod linear_gpu;
pub mod permute;
pub mod qmatmul;
pub mod rowwise;
pub mod timing;
pub mod vq;

/// Multiprocessors of the GPU the host-side rules and the tuning lists plan waves for: an H100
/// SXM's or an H200's 132. A layer made before it meets a device, and the interpreter, plan
/// for it; where a device is known its own count replaces it (attention's splits, APT's
/// grids, [`qmatmul::QMatmulConfig::for_multiprocessors`] for stream-k workers).
pub const REFERENCE_MULTIPROCESSORS: usize = 132;

/// 16 hex digits of a SHA-256 over `parts` in order: a tuner key's mark of the CUDA it measured,
/// so a changed kernel tunes afresh instead of reusing a winner measured on other code.
pub(crate) fn source_digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in parts {
        h.update(part);
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
