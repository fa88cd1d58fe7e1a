//! The verifier: every rule a program must satisfy before it is interpreted or compiled.
//!
//! Contract (implementation lands with issue 3): `verify` reports *all* problems it finds, each
//! with the span of the offending statement, so the `#[kernel]` macro can point at user tokens.

use crate::ir::{Program, SpanId};

/// What the program is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Shared memory one block may use, in bytes (227 KiB on sm_90, 163 KiB on sm_80).
    pub max_shared_bytes: usize,
}

impl Target {
    pub const SM90: Target = Target {
        max_shared_bytes: 227 * 1024,
    };
    pub const SM80: Target = Target {
        max_shared_bytes: 163 * 1024,
    };
}

impl Default for Target {
    fn default() -> Self {
        Target::SM90
    }
}

/// One problem, at one place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Diagnostic {
    pub span: SpanId,
    pub message: String,
}

/// Check `program`; `Err` holds every diagnostic found, in program order.
pub fn verify(program: &Program, target: &Target) -> Result<(), Vec<Diagnostic>> {
    let _ = (program, target);
    todo!()
}
