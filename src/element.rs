//! Host element types: what the kernels' buffers and activations are made of. The encoding of
//! each type (its VM dtype, bytes, f32 conversion) is [`HostElement`] in the runtime; this
//! module names the bounds the library kernels use, so they depend on it rather than on each
//! other.

pub use crate::kernels::permute::PermuteElement;
pub use tilus_runtime::{Element, GemmElement, HostElement};

/// An activation element type of the library kernels: f16 or bf16, the types cuBLAS multiplies
/// (the prefill method and the baselines need it). A bound alias, implemented for every such
/// type.
pub trait Activation: HostElement + GemmElement + PermuteElement {}

impl<T: HostElement + GemmElement + PermuteElement> Activation for T {}
