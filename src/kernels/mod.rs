//! The kernel library: VM programs for LLM serving built with [`tilus_core::ir::ProgramBuilder`].
//!
//! - [`qmatmul`]: the quantized matmul family `C = A · dequant(W)` for 1-8 bit weights (paper
//!   sections 6.2 and 8), its offline weight re-layout (Figure 8) and a CPU runner on the
//!   interpreter.
//! - [`linear`]: [`linear::QuantizedLinear`], a layer that quantizes and re-lays-out a weight
//!   once and runs the matmul; [`linear::GpuQuantizedLinear`] runs it on the GPU, autotuned
//!   per `m` bucket on first use ([`linear_gpu`]).
//!
//! The design and the layouts per bit width are written up in `docs/qmatmul.md`.

pub mod linear;
pub mod linear_gpu;
pub mod qmatmul;
