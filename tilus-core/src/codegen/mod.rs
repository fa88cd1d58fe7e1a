//! CUDA C code generation from verified programs.
//!
//! [`emit`] turns a [`Program`] into one translation unit with one `extern "C" __global__` entry,
//! plus what the runtime needs to launch it: the parameter list (in call order, including the
//! hidden workspace pointers of `AllocateGlobal`), the grid, the dynamic shared memory size and
//! the [`Assumption`]s the launcher must check before launch.
//!
//! The generated code follows one shape (see `docs/codegen.md` for the long version):
//! - every register tensor is a per-thread array of `uint32_t` words holding its locals' packed
//!   bits, in the compact-storage order of `crate::storage`; every access to it uses compile-time
//!   indices (the code is fully unrolled per local), so the arrays stay in registers;
//! - a register layout is lowered to integer arithmetic: the logical index of (thread `t`,
//!   local `i`) is `A(t) + B(i)`, where `A` is a sum of `((t / stride) % size) * weight` terms
//!   computed once per layout at kernel entry and `B(i)` is a compile-time constant;
//! - scalars are `int`/`bool`, control flow maps 1:1, each VM instruction is preceded by a
//!   `// <instruction>` comment;
//! - shared tensors live in one dynamic shared buffer, placed by the planner in [`smem`].
//!
//! Module map, in dependency order (no module imports one above it in this list):
//! [`names`] (identifiers), [`writer`] (indented text), [`expr`] (scalar expressions and
//! divisibility proofs), [`regmap`] (layout analysis), [`regs`] (register bit access),
//! [`cast`] (vectorized and scalar conversions), [`scalar`] (element decode/encode), [`smem`]
//! (shared-memory planner), [`prelude`] (header and helper device functions), `context` (the
//! emitter state every family works on), `emitters/` (one module per instruction family:
//! global and shared memory, elementwise, mma), and `program` (the driver: walks the program,
//! dispatches to the families, assembles the translation unit). Launch metadata lives in
//! [`crate::launch`].

pub mod cast;
mod context;
mod emitters;
mod expr;
mod names;
mod prelude;
mod program;
mod proxy;
mod regmap;
mod regs;
mod scalar;
mod smem;
mod writer;

pub use crate::launch::{ArgValue, Assumption, KernelParam, LaunchSpec, ParamKind};
pub use smem::{SharedPlan, SharedSlot};

use crate::ir::{Program, SpanId};
use crate::target::Target;

/// A generated kernel: its source, and (through `Deref`) its [`LaunchSpec`], which is what a
/// launcher needs besides the source.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaKernel {
    /// Complete CUDA C source (includes its own prelude).
    pub source: String,
    /// Entry point, parameters, grid, block, shared memory, assumptions, buffer views.
    pub launch: LaunchSpec,
    /// Where each shared tensor was placed (for tests and `tilus emit`).
    pub shared_plan: SharedPlan,
    /// Where the generated code is correct but slower than the instruction promises (a
    /// `copy_async` lowered to a synchronous element copy): `tilus emit` prints them. Empty for
    /// most programs.
    pub notes: Vec<CodegenNote>,
}

/// A remark on the generated code of the instruction at `span` (see [`CudaKernel::notes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodegenNote {
    pub span: SpanId,
    pub message: String,
}

impl std::fmt::Display for CodegenNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::ops::Deref for CudaKernel {
    type Target = LaunchSpec;
    fn deref(&self) -> &LaunchSpec {
        &self.launch
    }
}

/// Code generation failures (a program the verifier accepted but codegen cannot lower yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodegenError {
    pub span: crate::ir::SpanId,
    pub message: String,
}

impl CodegenError {
    pub(crate) fn new(span: SpanId, message: impl Into<String>) -> CodegenError {
        CodegenError {
            span,
            message: message.into(),
        }
    }
}

/// Generate CUDA C for `program`, selecting instructions that `target` has.
///
/// The verifier's resource limits are checked first (cheaply), so that a program that skipped
/// verification still cannot make the generator unroll without bound.
pub fn emit(program: &Program, target: &Target) -> Result<CudaKernel, CodegenError> {
    if let Err(diags) = crate::verify::check_limits(program) {
        let d = &diags[0];
        return Err(CodegenError::new(d.span, d.message.clone()));
    }
    program::emit_program(program, target)
}
