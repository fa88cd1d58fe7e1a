//! tilus: a virtual machine for arbitrary low-precision GPU kernels.
//!
//! This facade re-exports the VM (`tilus_core`), the `#[kernel]` macro (`tilus_macros`), the
//! kernel language behind it (`tilus_lang`, used at run time by `#[kernel(lazy, ..)]` kernels)
//! and the runtime (`tilus_runtime`).

pub use tilus_core as core;
pub use tilus_core::{DType, Layout};
pub use tilus_lang as lang;
pub use tilus_runtime as runtime;

// Generated code names the facade as `::tilus`, also inside this crate's own kernels.
extern crate self as tilus;

/// `#[kernel]`: a Tilus VM program written as a Rust function; see `docs/macro.md`.
pub use tilus_macros::{helpers, kernel};

pub mod macro_support;

/// What kernel code and its callers need: `use tilus::prelude::*;`.
pub mod prelude {
    pub use crate::kernel;
    pub use crate::macro_support::{
        bf16, f16, DTypeParam, Global, GlobalMut, HostElement, KernelError, KernelInfo,
    };
    pub use tilus_core::DType;
}

pub mod apt;
#[cfg(feature = "candle")]
pub mod candle;
pub mod checkpoint;
pub mod element;
pub mod gpu;
pub mod kernels;
mod parallel;
pub mod programs;
pub mod quant;
pub mod vq;
