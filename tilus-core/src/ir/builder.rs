//! A builder for [`Program`]s, used by the `#[kernel]` macro and by tests.
//!
//! The builder never fails: it records what it is told and infers result types where it can
//! (`VarType::Unknown` where an operand is undefined). Checking is the verifier's job, so every
//! problem is reported with its span instead of panicking halfway through construction.

use super::*;

/// Where an instruction's result goes: a fresh variable with a name, or an existing variable
/// (the loop-carried accumulator of `acc = dot(a, b, acc)`).
#[derive(Clone, Debug)]
pub enum Dest {
    New(String),
    Existing(VarId),
}

impl From<&str> for Dest {
    fn from(name: &str) -> Dest {
        Dest::New(name.to_string())
    }
}

impl From<String> for Dest {
    fn from(name: String) -> Dest {
        Dest::New(name)
    }
}

impl From<VarId> for Dest {
    fn from(v: VarId) -> Dest {
        Dest::Existing(v)
    }
}

/// Builds a [`Program`]; see the module documentation.
pub struct ProgramBuilder {
    name: String,
    num_threads: u32,
    blocks_per_sm: u32,
    params: Vec<Param>,
    grid: Vec<Expr>,
    vars: Vec<Var>,
    /// Open statement lists: the body, then one per nested `for`/`if`/`while`.
    blocks: Vec<Vec<Stmt>>,
    span: SpanId,
    program_span: SpanId,
}

impl ProgramBuilder {
    pub fn new(name: &str, num_threads: u32) -> Self {
        ProgramBuilder {
            name: name.to_string(),
            num_threads,
            blocks_per_sm: 1,
            params: Vec::new(),
            grid: Vec::new(),
            vars: Vec::new(),
            blocks: vec![Vec::new()],
            span: SpanId::default(),
            program_span: SpanId::default(),
        }
    }

    /// Statements added from now on carry `span`.
    pub fn set_span(&mut self, span: SpanId) {
        self.span = span;
    }

    /// The span for diagnostics about the kernel as a whole (e.g. its shared-memory total).
    pub fn set_program_span(&mut self, span: SpanId) {
        self.program_span = span;
    }

    /// Declare a variable without defining it (for front ends that need the id early).
    pub fn new_var(&mut self, name: &str, ty: VarType) -> VarId {
        let id = VarId(self.vars.len() as u32);
        self.vars.push(Var {
            name: name.to_string(),
            ty,
        });
        id
    }

    pub fn ty(&self, v: VarId) -> VarType {
        self.vars
            .get(v.0 as usize)
            .map(|v| v.ty.clone())
            .unwrap_or(VarType::Unknown)
    }

    pub fn param_i32(&mut self, name: &str) -> VarId {
        let var = self.new_var(name, VarType::Scalar(ScalarType::I32));
        self.params.push(Param { var });
        var
    }

    /// A 64-bit integer parameter (`long long` on the GPU).
    pub fn param_i64(&mut self, name: &str) -> VarId {
        let var = self.new_var(name, VarType::Scalar(ScalarType::I64));
        self.params.push(Param { var });
        var
    }

    pub fn param_f32(&mut self, name: &str) -> VarId {
        let var = self.new_var(name, VarType::Scalar(ScalarType::F32));
        self.params.push(Param { var });
        var
    }

    pub fn param_bool(&mut self, name: &str) -> VarId {
        let var = self.new_var(name, VarType::Scalar(ScalarType::Bool));
        self.params.push(Param { var });
        var
    }

    pub fn param_ptr(&mut self, name: &str, dtype: DType, mutable: bool) -> VarId {
        let var = self.new_var(name, VarType::Pointer { dtype, mutable });
        self.params.push(Param { var });
        var
    }

    /// The occupancy hint [`Program::blocks_per_sm`] (default 1).
    pub fn blocks_per_sm(&mut self, blocks: u32) {
        self.blocks_per_sm = blocks;
    }

    /// Grid extents, over parameters only (1 to 3 dimensions).
    pub fn grid(&mut self, extents: Vec<Expr>) {
        self.grid = extents;
    }

    /// Append a statement to the innermost open block, with the current span.
    pub fn push(&mut self, kind: StmtKind) {
        let stmt = Stmt {
            kind,
            span: self.span,
        };
        self.blocks
            .last_mut()
            .expect("a block is always open")
            .push(stmt);
    }

    pub fn instr(&mut self, instr: Instruction) {
        self.push(StmtKind::Instr(instr));
    }

    /// Append the instruction `make` builds for its output `dest`; a new output variable gets
    /// the type the IR infers ([`Instruction::output_types`]), an existing one keeps its own
    /// (the verifier checks that they agree).
    pub(super) fn define(
        &mut self,
        dest: impl Into<Dest>,
        make: impl FnOnce(VarId) -> Instruction,
    ) -> VarId {
        let (out, fresh) = match dest.into() {
            Dest::New(name) => (self.new_var(&name, VarType::Unknown), true),
            Dest::Existing(v) => (v, false),
        };
        let instr = make(out);
        if fresh {
            for (v, ty) in instr.output_types(&|v| self.ty(v)) {
                self.vars[v.0 as usize].ty = ty;
            }
        }
        self.instr(instr);
        out
    }

    fn register_dtype(&self, v: VarId) -> Option<DType> {
        self.ty(v).as_register().map(|r| r.dtype)
    }

    // ---- scalar code -------------------------------------------------------------------------

    pub fn block_indices(&mut self, names: &[&str]) -> Vec<VarId> {
        let outs: Vec<VarId> = names
            .iter()
            .map(|n| self.new_var(n, VarType::Scalar(ScalarType::I32)))
            .collect();
        self.instr(Instruction::BlockIndices { outs: outs.clone() });
        outs
    }

    pub fn let_(&mut self, name: &str, ty: ScalarType, value: Expr) -> VarId {
        let var = self.new_var(name, VarType::Scalar(ty));
        self.push(StmtKind::Let { var, value });
        var
    }

    pub fn assign(&mut self, var: VarId, value: Expr) {
        self.push(StmtKind::Assign { var, value });
    }

    fn nested(&mut self, build: impl FnOnce(&mut Self)) -> Vec<Stmt> {
        self.blocks.push(Vec::new());
        build(self);
        self.blocks.pop().expect("pushed above")
    }

    /// `for name in start..end { body }`.
    pub fn for_range(
        &mut self,
        name: &str,
        start: Expr,
        end: Expr,
        body: impl FnOnce(&mut Self, VarId),
    ) {
        self.for_range_step(name, start, end, 1, Unroll::Auto, body)
    }

    /// `for name in (start..end).step_by(step) { body }`, with an unrolling hint.
    pub fn for_range_step(
        &mut self,
        name: &str,
        start: Expr,
        end: Expr,
        step: u32,
        unroll: Unroll,
        body: impl FnOnce(&mut Self, VarId),
    ) {
        let span = self.span;
        let var = self.new_var(name, VarType::Scalar(ScalarType::I32));
        let body = self.nested(|b| body(b, var));
        self.span = span;
        self.push(StmtKind::For {
            var,
            start,
            end,
            step,
            unroll,
            body,
        });
    }

    pub fn if_else(
        &mut self,
        cond: Expr,
        then_body: impl FnOnce(&mut Self),
        else_body: impl FnOnce(&mut Self),
    ) {
        let span = self.span;
        let then_body = self.nested(then_body);
        let else_body = self.nested(else_body);
        self.span = span;
        self.push(StmtKind::If {
            cond,
            then_body,
            else_body,
        });
    }

    pub fn while_(&mut self, cond: Expr, body: impl FnOnce(&mut Self)) {
        let span = self.span;
        let body = self.nested(body);
        self.span = span;
        self.push(StmtKind::While { cond, body });
    }

    /// A warp-specialized region ([`StmtKind::Specialize`]): one `(warps, registers)` per
    /// role, in warp order; `body(b, i)` builds role `i`'s body.
    pub fn specialize(
        &mut self,
        roles: &[(u32, Option<u32>)],
        mut body: impl FnMut(&mut Self, usize),
    ) {
        let span = self.span;
        let roles = roles
            .iter()
            .enumerate()
            .map(|(i, &(warps, registers))| Role {
                warps,
                registers,
                body: self.nested(|b| body(b, i)),
            })
            .collect();
        self.span = span;
        self.push(StmtKind::Specialize { roles });
    }

    // ---- memory ------------------------------------------------------------------------------

    pub fn allocate_global(&mut self, name: &str, dtype: DType, shape: Vec<Expr>) -> VarId {
        self.define(name, |out| Instruction::AllocateGlobal {
            out,
            dtype,
            shape,
        })
    }

    pub fn allocate_shared(&mut self, name: &str, dtype: DType, layout: SharedLayout) -> VarId {
        self.define(name, |out| Instruction::AllocateShared {
            out,
            dtype,
            layout,
        })
    }

    pub fn allocate_register(
        &mut self,
        dest: impl Into<Dest>,
        dtype: DType,
        layout: Layout,
        init: Option<f64>,
    ) -> VarId {
        self.define(dest, |out| Instruction::AllocateRegister {
            out,
            dtype,
            layout,
            init,
        })
    }

    /// A row-major view of pointer parameter `ptr` as `dtype` elements of `shape`.
    pub fn view_global(&mut self, name: &str, ptr: VarId, dtype: DType, shape: Vec<Expr>) -> VarId {
        self.define(name, |out| Instruction::ViewGlobal {
            out,
            ptr,
            dtype,
            shape,
        })
    }

    pub fn load_global(
        &mut self,
        dest: impl Into<Dest>,
        src: VarId,
        layout: Layout,
        offset: Vec<Expr>,
    ) -> VarId {
        self.define(dest, |out| Instruction::LoadGlobal {
            out,
            src,
            offset,
            layout,
            fill: None,
        })
    }

    /// `load_global` whose out-of-view elements read as `fill` (converted to the dtype) instead
    /// of zero, e.g. `f64::NEG_INFINITY` before a maximum.
    pub fn load_global_fill(
        &mut self,
        dest: impl Into<Dest>,
        src: VarId,
        layout: Layout,
        offset: Vec<Expr>,
        fill: f64,
    ) -> VarId {
        self.define(dest, |out| Instruction::LoadGlobal {
            out,
            src,
            offset,
            layout,
            fill: Some(fill),
        })
    }

    pub fn store_global(&mut self, src: VarId, dst: VarId, offset: Vec<Expr>) {
        self.instr(Instruction::StoreGlobal { src, dst, offset });
    }

    pub fn load_shared(
        &mut self,
        dest: impl Into<Dest>,
        src: VarId,
        layout: Layout,
        offset: Vec<Expr>,
    ) -> VarId {
        self.define(dest, |out| Instruction::LoadShared {
            out,
            src,
            offset,
            layout,
        })
    }

    pub fn store_shared(&mut self, src: VarId, dst: VarId, offset: Vec<Expr>) {
        self.instr(Instruction::StoreShared { src, dst, offset });
    }

    /// The sub-tile of `shape` at `offset`: same strides and swizzle as `src`.
    /// `permute_shared(src, dims)`: a view with dimension `d` taken from `src`'s `dims[d]`.
    pub fn permute_shared(&mut self, name: &str, src: VarId, dims: Vec<usize>) -> VarId {
        self.define(name, |out| Instruction::PermuteShared { out, src, dims })
    }

    /// `dot_async(a, b, c)`: a shared-operand `dot` left in flight until a `dot_wait`.
    pub fn dot_async(&mut self, dest: impl Into<Dest>, a: VarId, b: VarId, c: VarId) -> VarId {
        self.define(dest, |out| Instruction::DotAsync { out, a, b, c })
    }

    /// `dot_wait(n)`: at most `n` `dot_async` groups stay in flight.
    pub fn dot_wait(&mut self, n: u32) {
        self.instr(Instruction::DotWait { n });
    }

    pub fn slice_shared(
        &mut self,
        name: &str,
        src: VarId,
        offset: Vec<Expr>,
        shape: Vec<usize>,
    ) -> VarId {
        self.define(name, |out| Instruction::SliceShared {
            out,
            src,
            offset,
            shape,
        })
    }

    pub fn copy_async(&mut self, dst: VarId, src: VarId, src_offset: Vec<Expr>) {
        self.instr(Instruction::CopyAsync {
            dst,
            src,
            src_offset,
        });
    }

    /// `mbarriers(count, arrivals)`: `count` initialised mbarriers in shared memory.
    pub fn mbarriers(&mut self, name: &str, count: u32, arrivals: u32) -> VarId {
        self.define(name, |out| Instruction::Mbarriers {
            out,
            count,
            arrivals,
        })
    }

    /// `tma_load(src, dst, offset, barriers, i)`: a tensor-map copy completing on barrier `i`.
    pub fn tma_load(
        &mut self,
        src: VarId,
        dst: VarId,
        src_offset: Vec<Expr>,
        barrier: VarId,
        index: impl Into<Expr>,
    ) {
        self.instr(Instruction::TmaLoad {
            dst,
            src,
            src_offset,
            barrier,
            index: index.into(),
        });
    }

    /// `tma_store_wait()`: the sources of the earlier `tma_store`s may be written again.
    pub fn tma_store_wait(&mut self) {
        self.instr(Instruction::TmaStoreWait);
    }

    /// `tma_store(src, dst, offset)`: the shared tensor `src` to the tile at `offset` of `dst`
    /// through the copy engine.
    pub fn tma_store(&mut self, src: VarId, dst: VarId, dst_offset: Vec<Expr>) {
        self.instr(Instruction::TmaStore {
            src,
            dst,
            dst_offset,
        });
    }

    /// `mbarrier_arrive(barriers, i)`: every warp arrives once on barrier `i`.
    pub fn mbarrier_arrive(&mut self, barrier: VarId, index: impl Into<Expr>) {
        self.instr(Instruction::MbarrierArrive {
            barrier,
            index: index.into(),
        });
    }

    /// `mbarrier_wait(barriers, i, phase)`: wait for barrier `i`'s phase of parity `phase`.
    pub fn mbarrier_wait(
        &mut self,
        barrier: VarId,
        index: impl Into<Expr>,
        phase: impl Into<Expr>,
    ) {
        self.instr(Instruction::MbarrierWait {
            barrier,
            index: index.into(),
            phase: phase.into(),
        });
    }

    pub fn copy_async_commit_group(&mut self) {
        self.instr(Instruction::CopyAsyncCommitGroup);
    }

    pub fn copy_async_wait_group(&mut self, n: u32) {
        self.instr(Instruction::CopyAsyncWaitGroup { n });
    }

    // ---- arithmetic --------------------------------------------------------------------------

    pub fn binary(
        &mut self,
        dest: impl Into<Dest>,
        op: ElementOp,
        lhs: VarId,
        rhs: Operand,
    ) -> VarId {
        self.define(dest, |out| Instruction::Binary { out, op, lhs, rhs })
    }

    /// `a * b + c`, rounded once (f32 tensors; `b` broadcasts, `c` has `a`'s layout).
    pub fn mul_add(&mut self, dest: impl Into<Dest>, a: VarId, b: Operand, c: VarId) -> VarId {
        self.define(dest, |out| Instruction::MulAdd { out, a, b, c })
    }

    /// `op` of `x` along `dim`; the result keeps the rank (see [`Instruction::Reduce`]).
    pub fn reduce(&mut self, dest: impl Into<Dest>, x: VarId, op: ReduceOp, dim: usize) -> VarId {
        self.define(dest, |out| Instruction::Reduce { out, x, op, dim })
    }

    /// The dot product of bit planes `w` and `a` over their planes (dim 0) and `dim` (see
    /// [`Instruction::PlaneDot`]).
    pub fn plane_dot(&mut self, dest: impl Into<Dest>, w: VarId, a: VarId, dim: usize) -> VarId {
        self.define(dest, |out| Instruction::PlaneDot { out, w, a, dim })
    }

    /// Inclusive `op` scan of `x` along `dim` (see [`Instruction::Scan`]).
    pub fn scan(&mut self, dest: impl Into<Dest>, x: VarId, op: ScanOp, dim: usize) -> VarId {
        self.define(dest, |out| Instruction::Scan { out, x, op, dim })
    }

    pub fn neg(&mut self, dest: impl Into<Dest>, x: VarId) -> VarId {
        self.define(dest, |out| Instruction::Neg { out, x })
    }

    /// `op(x)` elementwise (`exp`, `sqrt`, `not`, ...); the result has `x`'s type.
    pub fn unary(&mut self, dest: impl Into<Dest>, op: MathOp, x: VarId) -> VarId {
        self.define(dest, |out| Instruction::Unary { out, op, x })
    }

    /// `lhs op rhs` elementwise, a `u1` mask with `lhs`'s layout (`rhs` broadcasts).
    pub fn compare(&mut self, dest: impl Into<Dest>, op: CmpOp, lhs: VarId, rhs: Operand) -> VarId {
        self.define(dest, |out| Instruction::Compare { out, op, lhs, rhs })
    }

    /// `cond ? a : b` elementwise (`where`); `cond` (u1) and `b` broadcast to `a`.
    pub fn select(&mut self, dest: impl Into<Dest>, cond: VarId, a: VarId, b: Operand) -> VarId {
        self.define(dest, |out| Instruction::Select { out, cond, a, b })
    }

    /// An i32 tensor in `layout` holding `index[dim] + offset` at each tile index.
    pub fn arange(
        &mut self,
        dest: impl Into<Dest>,
        layout: Layout,
        dim: usize,
        offset: impl Into<Expr>,
    ) -> VarId {
        let offset = offset.into();
        self.define(dest, |out| Instruction::Arange {
            out,
            layout,
            dim,
            offset,
        })
    }

    pub fn cast(&mut self, dest: impl Into<Dest>, x: VarId, dtype: DType) -> VarId {
        self.define(dest, |out| Instruction::Cast {
            out,
            x,
            dtype,
            layout: None,
            biased: false,
        })
    }

    /// `cast`, with the result in `layout`: `x`'s elements on the same threads in another local
    /// order (checked by the verifier).
    pub fn cast_to(
        &mut self,
        dest: impl Into<Dest>,
        x: VarId,
        dtype: DType,
        layout: Layout,
    ) -> VarId {
        self.define(dest, |out| Instruction::Cast {
            out,
            x,
            dtype,
            layout: Some(layout),
            biased: false,
        })
    }

    /// `cast_to`, biased: each element plus the constant of its position that the one-`lop3`
    /// integer cast leaves (see `Instruction::Cast`).
    pub fn cast_biased(
        &mut self,
        dest: impl Into<Dest>,
        x: VarId,
        dtype: DType,
        layout: Option<Layout>,
    ) -> VarId {
        self.define(dest, |out| Instruction::Cast {
            out,
            x,
            dtype,
            layout,
            biased: true,
        })
    }

    pub fn view(&mut self, dest: impl Into<Dest>, x: VarId, dtype: DType, layout: Layout) -> VarId {
        self.define(dest, |out| Instruction::View {
            out,
            x,
            dtype,
            layout,
        })
    }

    /// `a · b + c`; the result has `c`'s type.
    pub fn dot(&mut self, dest: impl Into<Dest>, a: VarId, b: VarId, c: VarId) -> VarId {
        self.define(dest, |out| Instruction::Dot { out, a, b, c })
    }

    pub fn synchronize(&mut self) {
        self.instr(Instruction::Synchronize);
    }

    /// `fence()`: a GPU-scope memory fence ([`Instruction::Fence`]).
    pub fn fence(&mut self) {
        self.instr(Instruction::Fence);
    }

    /// `wait_prior_grid()` / `launch_dependents()` ([`Instruction::GridDependency`]).
    pub fn grid_dependency(&mut self, g: GridDependency) {
        self.instr(Instruction::GridDependency(g));
    }

    pub fn exit(&mut self) {
        self.instr(Instruction::Exit);
    }

    pub fn print(&mut self, label: &str, x: Operand) {
        self.instr(Instruction::Print {
            label: label.to_string(),
            x,
        });
    }

    /// The dtype of a register tensor, for front ends that pick instructions by type.
    pub fn dtype_of(&self, v: VarId) -> Option<DType> {
        self.register_dtype(v)
    }

    pub fn finish(mut self) -> Program {
        // Closures of nested blocks always pop what they push, so only the body is left.
        let body = self.blocks.pop().unwrap_or_default();
        Program {
            name: self.name,
            params: self.params,
            grid: self.grid,
            num_threads: self.num_threads,
            blocks_per_sm: self.blocks_per_sm,
            vars: self.vars,
            body,
            span: self.program_span,
        }
    }
}
