//! The verifier: every rule a program must satisfy before it is interpreted or compiled.
//!
//! `verify` reports *all* problems it finds, in program order, each with the span of the
//! offending statement (kernel-wide problems carry `Program::span`), naming variables by name.
//!
//! What is checked:
//! - **Kernel header**: 1 to 3 grid dimensions over parameters only (constant extents must be
//!   positive); `num_threads` a positive multiple of 32, at most 1024; parameters are `i32`
//!   scalars or pointers.
//! - **Definitions**: every variable is defined before use and used only inside the block that
//!   defines it (lexical scoping, as in Rust); an instruction that writes an existing variable
//!   must produce exactly its type; loop variables are not assigned.
//! - **Scalars**: `i32` arithmetic and comparisons, `bool` conditions and logic.
//! - **Memory scopes**: each operand is in the scope its instruction reads or writes (e.g.
//!   `load_global` from a global view, `copy_async` from global into shared, `store_global` into
//!   a view of a mutable pointer, `dot` on register tensors).
//! - **Shapes**: offsets have the tensor's rank; a tile of rank `r` covers the trailing `r` dims
//!   and may not be larger than them where they are statically known (constant extents; shared
//!   tensors are always static, and constant offsets must keep shared tiles in bounds); store
//!   and copy dtypes match.
//! - **Register layouts**: the layout's thread count is the block's or a divisor of it
//!   (replication, see `crate::ir`); `view` keeps the thread count and the bits per thread.
//! - **Elementwise operands**: the right operand's shape broadcasts to the left one's (trailing
//!   alignment, extents equal or 1), with the same dtype, and its layout satisfies the
//!   *thread-local condition* ([`broadcast_thread_local`]).
//! - **Reductions and scans** (`reduce.rs`): the operand's dtype suits the operator (`sum` and
//!   `cumsum`: f16/bf16/f32 or 8-/32-bit integers; `any`/`all`: u1), `dim` is in range; the shared
//!   scratch of reductions and of scans across warps counts with the shared tensors.
//! - **Dot**: shapes `[m, k] x [k, n] + [m, n]`; dtypes and layouts per [`plan_dot`], or, with
//!   operands in shared memory, per [`wgmma::plan_wgmma`] (or [`wgmma::plan_wgmma_rs`] with `a`
//!   in registers and `b` shared).
//! - **Resource limits** (checked first; see `limits.rs` for the table and the reasons):
//!   threads per layout, 32-bit registers per thread of each register tensor, element counts
//!   and shared sizes in checked arithmetic, and unrolled element operations per thread. Past a
//!   limit only the limits are reported: the other rules build per-element tables.
//! - **Warp specialization** (`specialize.rs`): the region's shape and what a role may do.
//! - **Shared memory**: the sum of all `allocate_shared` sizes (each rounded up to 16 bytes) fits
//!   `Target::max_shared_bytes`; reported at the program span with the total and the tensors.

mod dot;
mod expr;
mod instr;
mod limits;
mod math;
mod plane_dot;
mod reduce;
pub(crate) mod shared;
pub mod specialize;
pub(crate) mod table;
pub mod tma;
pub mod wgmma;

pub use dot::{
    broadcast_thread_local, dot_shapes, dot_thread_local, mma_fragments, plan_dot, DotPlan, MmaKind,
};
pub(crate) use expr::const_eval;
pub use limits::{
    max_register_words, register_words, MAX_BLOCK_REGISTERS, MAX_BLOCK_THREADS, MAX_LAYOUT_CELLS,
    MAX_UNROLLED_OPS,
};
pub use plane_dot::{plan_plane_dot, plane_dot_bound, PlaneDotPlan, PlaneTerm};
pub use reduce::{check_reduce_dtype, plan_reduce, plan_scan, ReducePlan, ScanPlan, ScanStep};

use crate::ir::{Program, ScalarType, SpanId, Stmt, StmtKind, Unroll, VarId, VarType};

pub use crate::target::Target;

/// One problem, at one place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Diagnostic {
    pub span: SpanId,
    pub message: String,
}

/// Check `program`; `Err` holds every diagnostic found, in program order.
pub fn verify(program: &Program, target: &Target) -> Result<(), Vec<Diagnostic>> {
    let mut checker = Checker::new(program, target);
    checker.header();
    // A hand-built program may hold a dtype no API can construct (`DType::Int(1)`); every rule
    // below decodes values or sizes with them, so stop here.
    if !checker.dtypes_valid() {
        return Err(checker.diags);
    }
    // The rules below build per-element layout tables: past a resource limit they could take
    // unbounded time and memory, so stop at the limits.
    let over = limits::check(program, checker.block_threads);
    if !over.is_empty() {
        checker.diags.extend(over);
        return Err(checker.diags);
    }
    checker.block(&program.body);
    checker.shared_total();
    if checker.diags.is_empty() {
        Ok(())
    } else {
        Err(checker.diags)
    }
}

/// Check only the resource limits of [`verify`] (see `limits`: threads, registers per tensor,
/// shared allocation sizes, unrolled operations); cheap, builds no layout table.
pub fn check_limits(program: &Program) -> Result<(), Vec<Diagnostic>> {
    let threads = program.num_threads as usize;
    let valid = threads > 0 && threads <= MAX_BLOCK_THREADS;
    let diags = limits::check(program, if valid { threads } else { 0 });
    if diags.is_empty() {
        Ok(())
    } else {
        Err(diags)
    }
}

/// Bytes of shared memory `program` allocates per block (the verifier's and interpreter's
/// accounting: each `allocate_shared` once, rounded up to 16 bytes).
pub fn shared_bytes(program: &Program) -> usize {
    fn walk(stmts: &[Stmt], total: &mut usize) {
        for s in stmts {
            match &s.kind {
                StmtKind::Instr(crate::ir::Instruction::AllocateShared {
                    dtype, layout, ..
                }) if layout.strides.len() == layout.shape.len() => {
                    *total = total.saturating_add(shared::allocation_bytes(*dtype, layout));
                }
                StmtKind::Instr(crate::ir::Instruction::Mbarriers { count, .. }) => {
                    let bytes = 8usize.saturating_mul(*count as usize);
                    *total = total.saturating_add(bytes.next_multiple_of(shared::SHARED_ALIGN));
                }
                other => {
                    for body in other.bodies() {
                        walk(body, total);
                    }
                }
            }
        }
    }
    let mut total = 0;
    walk(&program.body, &mut total);
    total
}

pub(super) struct Checker<'p> {
    p: &'p Program,
    target: &'p Target,
    diags: Vec<Diagnostic>,
    defined: Vec<bool>,
    loop_var: Vec<bool>,
    /// The block's thread count, or 0 when it is invalid (layout checks are then skipped).
    block_threads: usize,
    /// Shared allocations: (tensor, bytes).
    shared: Vec<(VarId, usize)>,
    /// The largest shared scratch of a reduction (all reductions reuse one area): (result, bytes).
    reduce_scratch: Option<(VarId, usize)>,
    /// The output types the IR infers for the instruction being checked.
    inferred: Vec<(VarId, VarType)>,
    /// How many `if` bodies enclose the statement being checked.
    branch_depth: usize,
    /// The `mbarriers` tensors and their counts, found once.
    barriers: std::collections::HashMap<VarId, u32>,
    /// Inside a role of a `specialize!` region: what was defined before it.
    role: Option<specialize::RoleScope>,
}

impl<'p> Checker<'p> {
    fn new(p: &'p Program, target: &'p Target) -> Self {
        Checker {
            p,
            target,
            diags: Vec::new(),
            defined: vec![false; p.vars.len()],
            loop_var: vec![false; p.vars.len()],
            block_threads: 0,
            shared: Vec::new(),
            reduce_scratch: None,
            inferred: Vec::new(),
            branch_depth: 0,
            barriers: tma::barrier_tensors(p),
            role: None,
        }
    }

    fn err(&mut self, span: SpanId, message: String) {
        // One statement can trip the same rule twice (e.g. an undefined variable used twice).
        let dup = self
            .diags
            .iter()
            .rev()
            .take_while(|d| d.span == span)
            .any(|d| d.message == message);
        if !dup {
            self.diags.push(Diagnostic { span, message });
        }
    }

    /// `` `name` `` of a variable, for messages.
    fn name(&self, v: VarId) -> String {
        match self.p.vars.get(v.0 as usize) {
            Some(var) => format!("`{}`", var.name),
            None => format!("`%{}`", v.0),
        }
    }

    /// Report every variable whose data type is not a valid one; false when there is any.
    fn dtypes_valid(&mut self) -> bool {
        let mut ok = true;
        for var in &self.p.vars {
            let dtype = match &var.ty {
                VarType::Pointer { dtype, .. } => *dtype,
                VarType::Global(g) => g.dtype,
                VarType::Shared(s) => s.dtype,
                VarType::Register(r) => r.dtype,
                VarType::Scalar(_) | VarType::Unknown => continue,
            };
            if let Err(e) = dtype.validate() {
                ok = false;
                self.err(self.p.span, format!("`{}`: {e}", var.name));
            }
        }
        ok
    }

    fn header(&mut self) {
        let span = self.p.span;
        let nt = self.p.num_threads;
        // An SM holds at most 2048 threads (sm_80 and sm_90).
        let bps = self.p.blocks_per_sm;
        if bps == 0 || (bps as u64) * (nt as u64) > 2048 {
            self.err(
                span,
                format!("blocks_per_sm = {bps}: between 1 and 2048 / {nt} blocks of {nt} threads fit on an SM"),
            );
        }
        if nt == 0 || !nt.is_multiple_of(32) {
            self.err(
                span,
                format!("the block has {nt} threads; it must be a positive multiple of 32"),
            );
        } else if nt > 1024 {
            self.err(
                span,
                format!("the block has {nt} threads; at most 1024 are allowed"),
            );
        } else {
            self.block_threads = nt as usize;
        }
        for param in &self.p.params {
            let Some(var) = self.p.vars.get(param.var.0 as usize) else {
                self.err(
                    span,
                    format!("parameter refers to unknown variable id {}", param.var.0),
                );
                continue;
            };
            match var.ty {
                VarType::Scalar(_) | VarType::Pointer { .. } => {
                    self.defined[param.var.0 as usize] = true;
                }
                ref other => self.err(
                    span,
                    format!(
                        "parameter `{}` is {}; parameters must be i32, f32 or bool scalars or pointers",
                        var.name,
                        expr::describe(other)
                    ),
                ),
            }
        }
        let rank = self.p.grid.len();
        if rank == 0 || rank > 3 {
            self.err(
                span,
                format!("the grid has {rank} dimensions; it must have 1 to 3"),
            );
        }
        for (d, e) in self.p.grid.iter().enumerate() {
            let mut vars = Vec::new();
            expr::vars_of(e, &mut vars);
            let is_param = |v: &VarId| self.p.params.iter().any(|p| p.var == *v);
            let bad: Vec<VarId> = vars.into_iter().filter(|v| !is_param(v)).collect();
            for v in bad {
                let name = self.name(v);
                self.err(
                    span,
                    format!("grid extent {d} uses {name}, which is not a kernel parameter"),
                );
            }
            self.expect_expr(e, ScalarType::I32, span, &format!("grid extent {d}"));
            if let Some(v) = const_eval(e) {
                if v <= 0 {
                    self.err(
                        span,
                        format!("grid extent {d} is {v}; extents must be positive"),
                    );
                }
            }
        }
    }

    /// Check a statement list in its own scope: what it defines is gone afterwards.
    fn block(&mut self, stmts: &[Stmt]) {
        let saved = self.defined.clone();
        for s in stmts {
            self.stmt(s);
        }
        self.defined = saved;
    }

    fn stmt(&mut self, s: &Stmt) {
        let span = s.span;
        match &s.kind {
            StmtKind::Let { var, value } => {
                let t = self.expr_ty(value, span);
                let Some(v) = self.p.vars.get(var.0 as usize) else {
                    self.err(span, format!("let binds unknown variable id {}", var.0));
                    return;
                };
                match v.ty {
                    VarType::Scalar(st) => {
                        if let Some(t) = t.filter(|t| *t != st) {
                            self.err(
                                span,
                                format!(
                                    "let `{}`: the variable is {} but the value is {}",
                                    v.name,
                                    st.name(),
                                    t.name()
                                ),
                            );
                        }
                    }
                    ref other => self.err(
                        span,
                        format!(
                            "let `{}`: only scalars are bound by let, but `{}` is {}",
                            v.name,
                            v.name,
                            expr::describe(other)
                        ),
                    ),
                }
                self.defined[var.0 as usize] = true;
            }
            StmtKind::Assign { var, value } => {
                let t = self.expr_ty(value, span);
                let Some(ty) = self.use_var(*var, span) else {
                    return;
                };
                self.role_assign(*var, span);
                let name = self.name(*var);
                match ty {
                    VarType::Scalar(st) => {
                        if let Some(t) = t.filter(|t| t != st) {
                            let st = st.name();
                            self.err(
                                span,
                                format!("assignment to {name}: the variable is {st} but the value is {}", t.name()),
                            );
                        }
                        if self.loop_var[var.0 as usize] {
                            self.err(
                                span,
                                format!("{name} is a loop variable and cannot be assigned"),
                            );
                        }
                    }
                    other => self.err(
                        span,
                        format!(
                            "assignment to {name}: only scalars can be assigned, but it is {}",
                            expr::describe(other)
                        ),
                    ),
                }
            }
            StmtKind::If {
                cond,
                then_body,
                else_body,
            } => {
                self.expect_expr(cond, ScalarType::Bool, span, "the condition of an if");
                self.branch_depth += 1;
                self.block(then_body);
                self.block(else_body);
                self.branch_depth -= 1;
            }
            StmtKind::For {
                var,
                start,
                end,
                step,
                unroll,
                body,
            } => {
                if *step == 0 || *step > i32::MAX as u32 {
                    self.err(
                        span,
                        format!(
                            "the step of a for loop must be 1 to {}, found {step}",
                            i32::MAX
                        ),
                    );
                }
                if *unroll == Unroll::Factor(0) {
                    self.err(span, "an unroll factor must be at least 1".to_string());
                }
                // Loop variables are `int` on the GPU; an i64 bound is narrowed explicitly.
                self.expect_expr(
                    start,
                    ScalarType::I32,
                    span,
                    "the start of a for loop (loop bounds are i32)",
                );
                self.expect_expr(
                    end,
                    ScalarType::I32,
                    span,
                    "the end of a for loop (loop bounds are i32)",
                );
                let saved = self.defined.clone();
                match self.p.vars.get(var.0 as usize) {
                    Some(v) if v.ty == VarType::Scalar(ScalarType::I32) => {
                        self.defined[var.0 as usize] = true;
                        self.loop_var[var.0 as usize] = true;
                    }
                    Some(v) => {
                        let msg = format!(
                            "the loop variable `{}` must be an i32 scalar, but it is {}",
                            v.name,
                            expr::describe(&v.ty)
                        );
                        self.err(span, msg);
                    }
                    None => self.err(span, format!("loop over unknown variable id {}", var.0)),
                }
                self.block(body);
                self.defined = saved;
            }
            StmtKind::While { cond, body } => {
                self.expect_expr(
                    cond,
                    ScalarType::Bool,
                    span,
                    "the condition of a while loop",
                );
                self.block(body);
            }
            StmtKind::Specialize { roles } => {
                let top_last = self.branch_depth == 0
                    && self.role.is_none()
                    && self.p.body.last().is_some_and(|l| std::ptr::eq(l, s));
                self.specialize(roles, span, top_last)
            }
            StmtKind::Instr(ins) => {
                self.role_instr(ins, span);
                self.instr(ins, span)
            }
        }
    }

    /// The type of a variable being read, after checking it is defined here.
    fn use_var(&mut self, v: VarId, span: SpanId) -> Option<&'p VarType> {
        let p = self.p;
        let Some(var) = p.vars.get(v.0 as usize) else {
            self.err(span, format!("reference to unknown variable id {}", v.0));
            return None;
        };
        if !self.defined[v.0 as usize] {
            self.err(
                span,
                format!(
                    "`{}` is used before it is defined (or outside the block that defines it)",
                    var.name
                ),
            );
            return None;
        }
        self.role_use(v, span);
        Some(&var.ty)
    }

    fn shared_total(&mut self) {
        if let Some((v, b)) = self.reduce_scratch {
            // Counted like a tensor, named after the reduction's result.
            let b = b.next_multiple_of(shared::SHARED_ALIGN);
            self.shared.push((v, b));
        }
        let total = self
            .shared
            .iter()
            .fold(0usize, |t, (_, b)| t.saturating_add(*b));
        if total > self.target.max_shared_bytes {
            let parts: Vec<String> = self
                .shared
                .iter()
                .map(|(v, b)| format!("{} {b} B", self.name(*v)))
                .collect();
            self.err(
                self.p.span,
                format!(
                    "the kernel allocates {total} bytes of shared memory ({}), more than the target's {} bytes",
                    parts.join(", "),
                    self.target.max_shared_bytes
                ),
            );
        }
    }
}
