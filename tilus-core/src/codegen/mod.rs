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
//! Module map: [`names`] (identifiers), [`writer`] (indented text), [`expr`] (scalar expressions
//! and divisibility proofs), [`regmap`] (layout analysis), [`regs`] (register bit access),
//! [`scalar`] (element decode/encode), [`smem`] (shared-memory planner), [`global`] and
//! [`shared`] (memory instructions), [`dot`] (mma.sync and the thread-local fallback),
//! [`elementwise`] (Binary/Neg/Cast/View), [`cast`] (vectorized and scalar conversions), [`prelude`] (header and helper device functions),
//! [`select`] (the instruction-selection driver), [`assume`] (launch assumptions).

mod assume;
pub mod cast;
mod dot;
mod elementwise;
mod expr;
mod global;
mod names;
mod prelude;
mod regmap;
mod regs;
mod scalar;
mod select;
mod shared;
mod smem;
mod writer;

pub use assume::{ArgValue, Assumption};
pub use smem::{SharedPlan, SharedSlot};

use crate::ir::{Expr, Program, SpanId, VarId};
use crate::DType;

/// A generated kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaKernel {
    /// Complete CUDA C source (includes its own prelude).
    pub source: String,
    /// Name of the `extern "C" __global__` function.
    pub entry: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory, in bytes (the launcher must raise the function's dynamic shared
    /// memory limit when this exceeds 48 KiB).
    pub shared_bytes: usize,
    /// The kernel's parameters in call order.
    pub params: Vec<KernelParam>,
    /// Grid extents (1 to 3; launched as x, y, z), over the program's scalar parameters.
    pub grid: Vec<Expr>,
    /// Conditions on the arguments that the generated code relies on; check with
    /// [`CudaKernel::check_args`] before launch.
    pub assumptions: Vec<Assumption>,
    /// Where each shared tensor was placed (for tests and `tilus emit`).
    pub shared_plan: SharedPlan,
}

/// One parameter of the generated entry function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    /// Name in the generated source (the IR name, sanitized).
    pub name: String,
    /// Name of the IR variable (for error messages that name the argument).
    pub ir_name: String,
    pub kind: ParamKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// An `int` argument: the program's scalar parameter `var`.
    I32 { var: VarId },
    /// A device pointer (`const uint8_t*` or `uint8_t*` in the source): the program's pointer
    /// parameter `var`.
    Pointer {
        var: VarId,
        dtype: DType,
        mutable: bool,
    },
    /// A hidden pointer to a zero-initialised scratch buffer for an `AllocateGlobal`, one per
    /// launch, of `packed_len(dtype, product(shape))` bytes; `shape` is over scalar parameters.
    Workspace { dtype: DType, shape: Vec<Expr> },
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

/// Generate CUDA C for `program`.
///
/// The verifier's resource limits are checked first (cheaply), so that a program that skipped
/// verification still cannot make the generator unroll without bound.
pub fn emit(program: &Program) -> Result<CudaKernel, CodegenError> {
    if let Err(diags) = crate::verify::check_limits(program) {
        let d = &diags[0];
        return Err(CodegenError::new(d.span, d.message.clone()));
    }
    select::emit_program(program)
}

impl CudaKernel {
    /// The index of the parameter that carries program variable `var`.
    pub fn param_index(&self, var: VarId) -> Option<usize> {
        self.params.iter().position(|p| match p.kind {
            ParamKind::I32 { var: v } | ParamKind::Pointer { var: v, .. } => v == var,
            ParamKind::Workspace { .. } => false,
        })
    }

    /// Check every assumption against the launch arguments (one per entry of
    /// [`CudaKernel::params`], in order). The error names the argument.
    pub fn check_args(&self, args: &[ArgValue]) -> Result<(), String> {
        if args.len() != self.params.len() {
            return Err(format!(
                "kernel {} takes {} arguments, got {}",
                self.entry,
                self.params.len(),
                args.len()
            ));
        }
        for a in &self.assumptions {
            a.check(self, args)?;
        }
        Ok(())
    }

    /// Evaluate an expression over the scalar parameters (a workspace extent, a grid extent)
    /// for the given arguments, with C semantics; overflow and division by zero are errors.
    pub fn eval(&self, e: &Expr, args: &[ArgValue]) -> Result<i32, String> {
        assume::eval_param_expr(self, e, args)
    }

    /// Evaluate the grid for the given arguments: `[x, y, z]`.
    pub fn grid_dims(&self, args: &[ArgValue]) -> Result<[u32; 3], String> {
        let mut dims = [1u32; 3];
        for (d, e) in self.grid.iter().enumerate().take(3) {
            let v = assume::eval_param_expr(self, e, args)?;
            if v < 0 {
                return Err(format!("grid extent {d} is negative ({v})"));
            }
            dims[d] = v as u32;
        }
        Ok(dims)
    }
}
