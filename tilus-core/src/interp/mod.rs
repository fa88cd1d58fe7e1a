//! The CPU reference interpreter: the semantic oracle for CI and the CPU fallback.
//!
//! Contract (implementation lands with issue 3): runs a verified program over its whole grid on
//! host buffers, following the conventions documented in `crate::ir`.

use crate::ir::Program;

/// A kernel argument, in parameter order.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    I32(i32),
    /// The bytes behind a pointer parameter (compact storage for sub-byte dtypes). Written back
    /// in place for mutable parameters.
    Buffer(Vec<u8>),
}

/// A runtime error, naming the instruction (and index) that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InterpError {
    pub span: crate::ir::SpanId,
    pub message: String,
}

/// Run `program` for every block of its grid.
pub fn run(program: &Program, args: &mut [Arg]) -> Result<(), InterpError> {
    let _ = (program, args);
    todo!()
}
