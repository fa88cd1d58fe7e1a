//! tilus: a virtual machine for arbitrary low-precision GPU kernels.
//!
//! This facade re-exports the VM (`tilus_core`), the `#[kernel]` macro (`tilus_macros`) and the
//! runtime (`tilus_runtime`).

pub use tilus_core as core;
pub use tilus_core::{DType, Layout};
pub use tilus_runtime as runtime;

pub mod gpu;
pub mod kernels;
pub mod quant;
