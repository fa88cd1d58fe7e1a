//! The kernel library: VM programs for LLM serving built with [`tilus_core::ir::ProgramBuilder`].

pub mod qmatmul;
