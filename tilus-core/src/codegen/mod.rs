//! CUDA C code generation from verified programs.
//!
//! Contract (implementation lands with issue 5): `emit` turns a program into one translation unit
//! with one `extern "C" __global__` entry, plus what the runtime needs to launch it.

pub mod cast;

use crate::ir::Program;

/// A generated kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// Complete CUDA C source (includes its own prelude).
    pub source: String,
    /// Name of the `extern "C" __global__` function.
    pub entry: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory, in bytes.
    pub shared_bytes: usize,
}

/// Code generation failures (a program the verifier accepted but codegen cannot lower yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodegenError {
    pub span: crate::ir::SpanId,
    pub message: String,
}

pub fn emit(program: &Program) -> Result<CudaKernel, CodegenError> {
    let _ = program;
    todo!()
}
