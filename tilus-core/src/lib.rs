//! The Tilus virtual machine: data types, compact sub-byte storage, the algebraic layout system,
//! and (in later modules) the program IR, its verifier, the CUDA code generator and a CPU
//! interpreter that serves as the semantic oracle.
//!
//! This crate has no GPU dependency: everything here runs and is tested on any host.

pub mod codegen;
pub mod dtype;
pub mod interp;
pub mod ir;
pub mod launch;
pub mod layout;
pub mod storage;
pub mod target;
pub mod verify;

pub use dtype::DType;
pub use layout::Layout;
pub use target::Target;
