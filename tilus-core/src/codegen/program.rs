//! The instruction-selection driver: walks the program, keeps the emitter state ([`Ctx`]) and
//! dispatches each instruction to its emitter; then assembles the translation unit.

use super::context::{Ctx, GlobalInfo, SharedInfo, SMEM, TID};
use super::emitters::{
    addressing, elementwise, fence, global, math, mma, plane_dot, reduce, shared, tma, wgmma,
};
use super::expr::{c_expr, ScalarFacts};
use super::names::Namer;
use super::prelude::Features;
use super::smem::{self};
use super::writer::Writer;
use super::{CodegenError, CudaKernel, KernelParam, LaunchSpec, ParamKind};
use crate::ir::{
    Expr, Instruction, Operand, Program, ScalarType, Stmt, StmtKind, Unroll, VarId, VarType,
};
use crate::target::Target;
use crate::DType;
use std::collections::{BTreeMap, HashMap};

impl<'p> Ctx<'p> {
    // ---- statements --------------------------------------------------------------------------

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        for s in stmts {
            self.span = s.span;
            match &s.kind {
                StmtKind::Let { var, value } | StmtKind::Assign { var, value } => {
                    let line = format!("{} = {};", self.name(*var), self.expr(value));
                    self.w.line(line);
                }
                StmtKind::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    self.w.open(format!("if ({})", self.expr(cond)));
                    self.stmts(then_body)?;
                    if !else_body.is_empty() {
                        self.w.else_();
                        self.stmts(else_body)?;
                    }
                    self.w.close();
                }
                StmtKind::For {
                    var,
                    start,
                    end,
                    step,
                    unroll,
                    body,
                } => {
                    let v = self.name(*var);
                    let end_name = self.fresh(&format!("{v}_end"));
                    let inc = if *step == 1 {
                        format!("++{v}")
                    } else {
                        format!("{v} += {step}")
                    };
                    let head = format!(
                        "for (int {v} = {}, {end_name} = {}; {v} < {end_name}; {inc})",
                        self.expr(start),
                        self.expr(end)
                    );
                    match unroll {
                        Unroll::Auto => {}
                        Unroll::Full => self.w.line("#pragma unroll"),
                        Unroll::Factor(n) => self.w.line(format!("#pragma unroll {n}")),
                    }
                    self.w.open(head);
                    self.stmts(body)?;
                    self.w.close();
                }
                StmtKind::While { cond, body } => {
                    self.w.open(format!("while ({})", self.expr(cond)));
                    self.stmts(body)?;
                    self.w.close();
                }
                StmtKind::Instr(i) => {
                    let comment = self.describe(i);
                    self.w.line(format!("// {comment}"));
                    self.instr(i)?;
                }
                StmtKind::Specialize { roles } => self.specialize(roles)?,
            }
        }
        Ok(())
    }

    /// A `specialize!` region: each role's warps run its body, with the thread index and the
    /// block barrier of the role, after re-sizing their registers (`setmaxnreg`: up from the
    /// kernel's cap with `.inc`, down with `.dec`). The runtime checks before a launch that
    /// the compiled kernel holds the registers the roles ask for.
    fn specialize(&mut self, roles: &[crate::ir::Role]) -> Result<(), CodegenError> {
        let cap = crate::verify::specialize::kernel_register_cap(
            self.p.num_threads,
            self.p.blocks_per_sm,
        );
        let saved = (self.block_threads, self.role);
        let mut start = 0usize;
        for (i, r) in roles.iter().enumerate() {
            let threads = r.warps as usize * 32;
            let end = start + threads;
            self.w.line(format!(
                "// role {i}: warps {} to {}",
                start / 32,
                end / 32 - 1
            ));
            self.w
                .open(format!("if ({TID} >= {start} && {TID} < {end})"));
            if let Some(n) = r.registers {
                let dir = if n >= cap { "inc" } else { "dec" };
                self.w.line(format!(
                    "asm volatile(\"setmaxnreg.{dir}.sync.aligned.u32 {n};\\n\" ::: \"memory\");"
                ));
            }
            self.w
                .line(format!("const int tilus_role_tid = {TID} - {start};"));
            self.w.open("");
            self.w.line(format!("const int {TID} = tilus_role_tid;"));
            self.block_threads = threads;
            // Named barrier 0 is `__syncthreads`.
            self.role = Some((i as u32 + 1, threads));
            // The role's layouts place its threads by the role's thread index: their thread
            // parts are declared here, not at kernel entry.
            let outer_ids = std::mem::take(&mut self.layout_ids);
            let outer_decls = std::mem::take(&mut self.layout_decls);
            let nested = self.w.nested();
            let outer_w = std::mem::replace(&mut self.w, nested);
            let body = self.stmts(&r.body).map(|()| {
                // The role's thread 0 issued its `tma_store`s: it waits for their reads.
                tma::drain(self);
            });
            let text = std::mem::replace(&mut self.w, outer_w).finish();
            let decls = std::mem::replace(&mut self.layout_decls, outer_decls);
            self.layout_ids = outer_ids;
            body?;
            for (name, line) in &decls {
                if uses_identifier(&text, name) {
                    self.w.line(line);
                }
            }
            self.w.append(&text);
            self.w.close();
            self.w.close();
            start = end;
        }
        (self.block_threads, self.role) = saved;
        Ok(())
    }

    fn instr(&mut self, i: &Instruction) -> Result<(), CodegenError> {
        match i {
            Instruction::BlockIndices { outs } => {
                for (d, o) in outs.iter().enumerate() {
                    let axis = ["x", "y", "z"]
                        .get(d)
                        .ok_or_else(|| self.err("block_indices has more than 3 dimensions"))?;
                    let line = format!("{} = (int)blockIdx.{axis};", self.name(*o));
                    self.w.line(line);
                }
            }
            Instruction::AllocateGlobal { out, dtype, shape } => {
                let ws = self.name(*out);
                let param = format!("{ws}_ws");
                self.workspaces.push(KernelParam {
                    name: param.clone(),
                    ir_name: self.ir_name(*out),
                    kind: ParamKind::Workspace {
                        dtype: *dtype,
                        shape: shape.clone(),
                    },
                });
                for e in shape {
                    if !self.facts.is_param_only(e) {
                        return Err(self.err(format!(
                            "allocate_global {}: extents must depend on parameters only (the \
                             runtime allocates the workspace before launch)",
                            self.ir_name(*out)
                        )));
                    }
                }
                self.define_global(*out, *dtype, param, None, shape);
            }
            Instruction::ViewGlobal {
                out,
                ptr,
                dtype,
                shape,
            } => {
                let p = self.name(*ptr);
                let pname = Some(self.ir_name(*ptr));
                self.define_global(*out, *dtype, p, pname, shape);
            }
            Instruction::AllocateShared { out, dtype, layout } => {
                let slot = self
                    .plan
                    .slot(*out)
                    .cloned()
                    .ok_or_else(|| self.err("shared tensor missing from the plan"))?;
                if slot.barrier_before {
                    self.w.line(format!(
                        "__syncthreads();  // {} reuses shared bytes of a tensor that died before it",
                        self.ir_name(*out)
                    ));
                }
                self.w.line(format!(
                    "// {} lives at shared bytes [{}, {})",
                    self.ir_name(*out),
                    slot.offset,
                    slot.offset + slot.bytes
                ));
                self.shared.insert(
                    *out,
                    SharedInfo {
                        dtype: *dtype,
                        root_layout: layout.clone(),
                        root_offset: slot.offset,
                        origin: vec![Expr::Int(0); layout.rank()],
                        shape: layout.shape.clone(),
                    },
                );
            }
            Instruction::SliceShared {
                out,
                src,
                offset,
                shape,
            } => {
                let s = self.shared_info(*src)?;
                let root_rank = s.root_layout.rank();
                let rank = s.shape.len();
                if offset.len() != rank || shape.len() > rank || rank > root_rank {
                    return Err(self.err("slice_shared: offset rank must match the source"));
                }
                let lead = root_rank - rank;
                let mut origin = s.origin.clone();
                for (d, e) in offset.iter().enumerate() {
                    origin[lead + d] = simplify_add(&origin[lead + d], e);
                }
                self.shared.insert(
                    *out,
                    SharedInfo {
                        origin,
                        shape: shape.clone(),
                        ..s
                    },
                );
            }
            // A new root over the same bytes: the trailing dims of the root (this tensor's) are
            // permuted, leading ones (pipeline stages of a slice) kept.
            Instruction::PermuteShared { out, src, dims } => {
                let s = self.shared_info(*src)?;
                let lead = s.root_layout.rank() - s.shape.len();
                let root_dims: Vec<usize> =
                    (0..lead).chain(dims.iter().map(|d| lead + d)).collect();
                let root_layout = s
                    .root_layout
                    .permute(&root_dims)
                    .map_err(|e| self.err(format!("permute_shared: {e}")))?;
                let origin = root_dims.iter().map(|&d| s.origin[d].clone()).collect();
                let shape = dims.iter().map(|&d| s.shape[d]).collect();
                self.shared.insert(
                    *out,
                    SharedInfo {
                        root_layout,
                        origin,
                        shape,
                        ..s
                    },
                );
            }
            Instruction::LoadGlobal {
                out,
                src,
                offset,
                layout,
                fill,
            } => global::load(self, *out, *src, offset, layout, *fill)?,
            Instruction::StoreGlobal { src, dst, offset } => {
                global::store(self, *src, *dst, offset)?
            }
            Instruction::LoadShared {
                out,
                src,
                offset,
                layout,
            } => shared::load(self, *out, *src, offset, layout)?,
            Instruction::StoreShared { src, dst, offset } => {
                shared::store(self, *src, *dst, offset)?
            }
            Instruction::CopyAsync {
                dst,
                src,
                src_offset,
            } => shared::copy_async(self, *dst, *src, src_offset)?,
            Instruction::CopyAsyncCommitGroup => {
                self.w
                    .line("asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");");
            }
            Instruction::CopyAsyncWaitGroup { n } => {
                self.w.line(format!(
                    "asm volatile(\"cp.async.wait_group {n};\\n\" ::: \"memory\");"
                ));
            }
            Instruction::AllocateRegister {
                out,
                dtype,
                layout,
                init,
            } => elementwise::allocate(self, *out, *dtype, layout, *init)?,
            Instruction::Binary { out, op, lhs, rhs } => {
                elementwise::binary(self, *out, *op, *lhs, rhs)?
            }
            Instruction::MulAdd { out, a, b, c } => elementwise::mul_add(self, *out, *a, b, *c)?,
            Instruction::Neg { out, x } => elementwise::neg(self, *out, *x)?,
            Instruction::Cast {
                out,
                x,
                dtype,
                biased,
                ..
            } => elementwise::cast(self, *out, *x, *dtype, *biased)?,
            Instruction::View { out, x, .. } => elementwise::view(self, *out, *x)?,
            Instruction::Dot { out, a, b, c }
                if self.shared.contains_key(a) || self.shared.contains_key(b) =>
            {
                wgmma::dot(self, *out, *a, *b, *c, true)?
            }
            Instruction::DotAsync { out, a, b, c } => wgmma::dot(self, *out, *a, *b, *c, false)?,
            Instruction::DotWait { n } => wgmma::wait(self, *n)?,
            Instruction::Mbarriers {
                out,
                count,
                arrivals,
            } => tma::mbarriers(self, *out, *count, *arrivals)?,
            Instruction::TmaLoad {
                dst,
                src,
                src_offset,
                barrier,
                index,
            } => tma::tma_load(self, *dst, *src, src_offset, *barrier, index)?,
            Instruction::TmaStore {
                src,
                dst,
                dst_offset,
            } => tma::tma_store(self, *src, *dst, dst_offset)?,
            Instruction::TmaStoreWait => tma::tma_store_wait(self),
            Instruction::MbarrierArrive { barrier, index } => tma::arrive(self, *barrier, index)?,
            Instruction::MbarrierWait {
                barrier,
                index,
                phase,
            } => tma::wait(self, *barrier, index, phase)?,
            Instruction::Dot { out, a, b, c } => mma::dot(self, *out, *a, *b, *c)?,
            Instruction::Reduce { out, x, op, dim } => reduce::reduce(self, *out, *x, *op, *dim)?,
            Instruction::PlaneDot { out, w, a, dim } => {
                plane_dot::plane_dot(self, *out, *w, *a, *dim)?
            }
            Instruction::Scan { out, x, dim, .. } => reduce::scan(self, *out, *x, *dim)?,
            Instruction::Synchronize => {
                if self.uses_wgmma && !self.unfenced_barriers.contains(&(i as *const Instruction)) {
                    // Shared writes of this thread (generic proxy) become visible to the tensor
                    // cores' reads (async proxy) of a later wgmma (`super::proxy`).
                    self.w.line(
                        "asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");",
                    );
                }
                self.w.line(self.block_barrier())
            }
            Instruction::Fence => fence::emit(self),
            Instruction::GridDependency(g) => fence::grid_dependency(self, *g),
            Instruction::Exit => {
                tma::drain(self);
                self.w.line("return;");
            }
            Instruction::Print { label, x } => self.print(label, x)?,
            Instruction::Unary { out, op, x } => math::unary(self, *out, *op, *x)?,
            Instruction::Compare { out, op, lhs, rhs } => {
                math::compare(self, *out, *op, *lhs, rhs)?
            }
            Instruction::Select { out, cond, a, b } => math::select(self, *out, *cond, *a, b)?,
            Instruction::Arange {
                out,
                layout,
                dim,
                offset,
            } => math::arange(self, *out, layout, *dim, offset)?,
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => addressing::emit(self, i)?,
        }
        Ok(())
    }

    fn define_global(
        &mut self,
        out: VarId,
        dtype: DType,
        ptr: String,
        ptr_param: Option<String>,
        shape: &[Expr],
    ) {
        let base = self.name(out);
        let rank = shape.len();
        let mut dims = Vec::new();
        for (d, e) in shape.iter().enumerate() {
            let n = self.fresh(&format!("{base}_n{d}"));
            let line = format!("const int {n} = {};", self.expr(e));
            self.w.line(line);
            dims.push(n);
        }
        let mut strides = vec!["1".to_string(); rank];
        for d in (0..rank.saturating_sub(1)).rev() {
            let n = self.fresh(&format!("{base}_st{d}"));
            // `int`, so that each address is one 32x32->64-bit multiply; the launcher refuses a
            // view whose strides do not fit (`LaunchSpec::check_buffers`).
            let inner = if d + 1 == rank - 1 {
                dims[d + 1].clone()
            } else {
                format!("{} * {}", strides[d + 1], dims[d + 1])
            };
            self.w.line(format!("const int {n} = {inner};"));
            strides[d] = n;
        }
        self.globals.insert(
            out,
            GlobalInfo {
                dtype,
                ptr,
                ptr_param,
                dims,
                strides,
                shape: shape.to_vec(),
            },
        );
    }

    fn print(&mut self, label: &str, x: &Operand) -> Result<(), CodegenError> {
        let label = c_string(label);
        let block = "blockIdx.x, blockIdx.y, blockIdx.z";
        match x {
            Operand::Scalar(e) => {
                let (f, ty) = if self.is_i64(e) {
                    ("%lld", "long long")
                } else {
                    ("%d", "int")
                };
                let line = format!(
                    "if ({TID} == 0) printf(\"[block %d,%d,%d] {label} = {f}\\n\", {block}, ({ty})({}));",
                    self.expr(e)
                );
                self.w.line(line);
            }
            Operand::Imm(v) => {
                // The value as text in the format (like the interpreter's `to_string`).
                let text = c_string(&v.to_string());
                self.w.line(format!(
                    "if ({TID} == 0) printf(\"[block %d,%d,%d] {label} = {text}\\n\", {block});"
                ));
            }
            Operand::Tensor(t) => elementwise::print_tensor(self, &label, *t)?,
        }
        Ok(())
    }

    /// One-line rendering of an instruction for the `//` comment (the IR printer's, made safe
    /// inside a comment).
    fn describe(&self, i: &Instruction) -> String {
        self.p
            .instruction_text(i)
            .replace("*/", "* /")
            .replace('\n', " ")
    }
}

/// Whether identifier `name` occurs in `text` (not as part of a longer identifier).
fn uses_identifier(text: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// `a + b` without a `0 +`.
fn simplify_add(a: &Expr, b: &Expr) -> Expr {
    match (a, b) {
        (Expr::Int(0), x) | (x, Expr::Int(0)) => x.clone(),
        (Expr::Int(x), Expr::Int(y)) => Expr::Int(x.wrapping_add(*y)),
        _ => Expr::binary(crate::ir::BinaryOp::Add, a.clone(), b.clone()),
    }
}

/// Escape `s` for a C string literal (and printf).
fn c_string(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '%' => out.push_str("%%"),
            '\n' => out.push_str("\\n"),
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            _ => out.push('?'),
        }
    }
    out
}

/// Facts about scalars for divisibility proofs.
fn scalar_facts(p: &Program) -> ScalarFacts {
    let mut facts = ScalarFacts::default();
    for param in &p.params {
        if matches!(p.ty(param.var), VarType::Scalar(_)) {
            facts.params.insert(param.var);
        }
    }
    fn walk(stmts: &[Stmt], lets: &mut HashMap<VarId, Expr>, assigned: &mut Vec<VarId>) {
        for s in stmts {
            match &s.kind {
                StmtKind::Let { var, value } => {
                    lets.insert(*var, value.clone());
                }
                StmtKind::Assign { var, .. } => assigned.push(*var),
                StmtKind::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    walk(then_body, lets, assigned);
                    walk(else_body, lets, assigned);
                }
                StmtKind::For { body, .. } | StmtKind::While { body, .. } => {
                    walk(body, lets, assigned)
                }
                StmtKind::Specialize { roles } => {
                    for r in roles {
                        walk(&r.body, lets, assigned);
                    }
                }
                StmtKind::Instr(_) => {}
            }
        }
    }
    let mut lets = HashMap::new();
    let mut assigned = Vec::new();
    walk(&p.body, &mut lets, &mut assigned);
    for (v, e) in lets {
        if !assigned.contains(&v) {
            facts.defs.insert(v, e);
        }
    }
    facts
}

/// Variables that get a declaration at the top of the kernel: scalars (not loop variables) and
/// register tensors, in id order.
fn top_level_vars(p: &Program) -> (Vec<VarId>, Vec<VarId>) {
    let mut loop_vars = Vec::new();
    fn walk(stmts: &[Stmt], out: &mut Vec<VarId>) {
        for s in stmts {
            match &s.kind {
                StmtKind::For { var, body, .. } => {
                    out.push(*var);
                    walk(body, out);
                }
                other => {
                    for body in other.bodies() {
                        walk(body, out);
                    }
                }
            }
        }
    }
    walk(&p.body, &mut loop_vars);
    let params: Vec<VarId> = p.params.iter().map(|x| x.var).collect();
    let mut scalars = Vec::new();
    let mut regs = Vec::new();
    for (i, v) in p.vars.iter().enumerate() {
        let id = VarId(i as u32);
        if params.contains(&id) || loop_vars.contains(&id) {
            continue;
        }
        match v.ty {
            VarType::Scalar(_) => scalars.push(id),
            VarType::Register(_) => regs.push(id),
            _ => {}
        }
    }
    (scalars, regs)
}

/// Generate the kernel for `p`.
pub(crate) fn emit_program(p: &Program, target: &Target) -> Result<CudaKernel, CodegenError> {
    let mut namer = Namer::new();
    namer.claim(TID);
    namer.claim(SMEM);
    // Parameters keep their names where possible; then every other variable in id order.
    let mut names = vec![String::new(); p.vars.len()];
    for param in &p.params {
        let i = param.var.0 as usize;
        if i < names.len() {
            names[i] = namer.fresh(&p.vars[i].name);
        }
    }
    for (i, v) in p.vars.iter().enumerate() {
        if names[i].is_empty() {
            names[i] = namer.fresh(&v.name);
        }
    }
    let entry = namer.fresh(&p.name);
    /// Whether any `dot` reads a shared operand (the warpgroup MMA).
    fn has_shared_dot(p: &Program, body: &[Stmt]) -> bool {
        body.iter().any(|s| match &s.kind {
            StmtKind::Instr(Instruction::Dot { a, b, .. }) => {
                p.ty(*a).as_shared().is_some() || p.ty(*b).as_shared().is_some()
            }
            StmtKind::Instr(Instruction::DotAsync { .. }) => true,
            other => other.bodies().into_iter().any(|b| has_shared_dot(p, b)),
        })
    }
    let mut cx = Ctx {
        target: *target,
        p,
        namer,
        names,
        facts: scalar_facts(p),
        ranges: crate::ir::value_ranges(p),
        block_threads: p.num_threads as usize,
        layout_ids: HashMap::new(),
        layouts: Vec::new(),
        layout_decls: Vec::new(),
        assumptions: Vec::new(),
        plan: smem::plan(p),
        globals: HashMap::new(),
        shared: HashMap::new(),
        features: Features::default(),
        cast_fns: BTreeMap::new(),
        w: Writer::new(1),
        span: p.span,
        workspaces: Vec::new(),
        tensor_maps: Vec::new(),
        uses_wgmma: has_shared_dot(p, &p.body),
        unfenced_barriers: super::proxy::unfenced_barriers(&p.body),
        uses_tma_store: {
            let mut any = false;
            p.visit_instructions(&mut |i| any |= matches!(i, Instruction::TmaStore { .. }));
            any
        },
        async_accumulators: wgmma::async_accumulators(p),
        zero_registers: wgmma::zero_registers(p),
        role: None,
        notes: Vec::new(),
    };
    if cx.block_threads == 0 || cx.block_threads > 1024 {
        return Err(cx.err(format!(
            "a block of {} threads cannot be launched",
            cx.block_threads
        )));
    }

    // Parameters.
    let mut params = Vec::new();
    for param in &p.params {
        let v = param.var;
        let kind = match p.ty(v) {
            VarType::Scalar(ScalarType::I32) => ParamKind::I32 { var: v },
            VarType::Scalar(ScalarType::F32) => ParamKind::F32 { var: v },
            VarType::Scalar(ScalarType::I64) => ParamKind::I64 { var: v },
            VarType::Scalar(ScalarType::Bool) => ParamKind::Bool { var: v },
            VarType::Pointer { dtype, mutable } => ParamKind::Pointer {
                var: v,
                dtype: *dtype,
                mutable: *mutable,
            },
            other => {
                return Err(cx.err(format!(
                    "parameter {} must be an i32 or a pointer, not {}",
                    cx.ir_name(v),
                    other.describe()
                )))
            }
        };
        params.push(KernelParam {
            name: cx.name(v),
            ir_name: cx.ir_name(v),
            kind,
        });
    }

    cx.stmts(&p.body)?;
    tma::drain(&mut cx);
    params.append(&mut cx.workspaces);
    params.append(&mut cx.tensor_maps);

    // Assemble.
    let mut src = super::prelude::header(&p.name);
    let grid: Vec<String> = p
        .grid
        .iter()
        .map(|e| c_expr(e, &|v| cx.ir_name(v)))
        .collect();
    src.push_str(&format!(
        "// Launch: grid [{}] (x, y, z), {} threads, {} bytes of dynamic shared memory.\n",
        grid.join(", "),
        p.num_threads,
        cx.plan.total_bytes
    ));
    if !cx.assumptions.is_empty() {
        let a: Vec<String> = cx.assumptions.iter().map(|a| a.to_string()).collect();
        src.push_str(&format!(
            "// Assumes (checked before launch): {}.\n",
            a.join("; ")
        ));
    }
    src.push_str(&super::prelude::helpers(&cx.features));
    for f in cx.cast_fns.values() {
        src.push('\n');
        src.push_str(f);
    }
    let sig: Vec<String> = params
        .iter()
        .map(|prm| match &prm.kind {
            ParamKind::I32 { .. } => format!("int {}", prm.name),
            ParamKind::F32 { .. } => format!("float {}", prm.name),
            ParamKind::I64 { .. } => format!("long long {}", prm.name),
            // An int on the ABI (0 or 1): C conditions read it as a truth value.
            ParamKind::Bool { .. } => format!("int {}", prm.name),
            ParamKind::Pointer { mutable: false, .. } => {
                format!("const uint8_t* __restrict__ {}", prm.name)
            }
            ParamKind::Pointer { mutable: true, .. } | ParamKind::Workspace { .. } => {
                format!("uint8_t* __restrict__ {}", prm.name)
            }
            ParamKind::TensorMap { .. } => {
                format!("const __grid_constant__ tilus_tensor_map {}", prm.name)
            }
        })
        .collect();
    src.push_str(&format!(
        "\nextern \"C\" __global__ void __launch_bounds__({}, {}) {entry}({}) {{\n",
        p.num_threads,
        p.blocks_per_sm.max(1),
        sig.join(", ")
    ));
    let mut top = Writer::new(1);
    if cx.plan.total_bytes > 0 {
        top.line(format!(
            "extern __shared__ __align__(1024) uint8_t {SMEM}[];  // {} bytes",
            cx.plan.total_bytes
        ));
    }
    top.line(format!("const int {TID} = (int)threadIdx.x;"));
    let body = std::mem::take(&mut cx.w).finish();
    for (name, line) in &cx.layout_decls {
        if uses_identifier(&body, name) {
            top.line(line);
        }
    }
    let (scalars, regs) = top_level_vars(p);
    for v in scalars {
        let ty = match p.ty(v) {
            VarType::Scalar(ScalarType::Bool) => "bool",
            VarType::Scalar(ScalarType::F32) => "float",
            VarType::Scalar(ScalarType::I64) => "long long",
            _ => "int",
        };
        top.line(format!("{ty} {};", cx.name(v)));
    }
    for v in regs {
        if let VarType::Register(r) = p.ty(v) {
            let words = super::regs::word_count(r.dtype.bits(), r.layout.num_locals());
            top.line(format!(
                "uint32_t {}[{words}];  // {} x {} per thread",
                cx.name(v),
                r.layout.num_locals(),
                r.dtype
            ));
        }
    }
    src.push_str(&top.finish());
    src.push_str(&body);
    src.push_str("}\n");

    let param_of = |v: VarId| {
        params.iter().position(|q| match q.kind {
            ParamKind::Pointer { var, .. } => var == v,
            _ => false,
        })
    };
    let views = crate::launch::buffer_views(p, &param_of);
    Ok(CudaKernel {
        source: src,
        launch: LaunchSpec {
            arch: target.arch,
            entry,
            block_threads: p.num_threads,
            shared_bytes: cx.plan.total_bytes,
            params,
            grid: p.grid.clone(),
            assumptions: cx.assumptions,
            views,
            waits_prior_grid: crate::launch::waits_prior_grid(p),
            min_registers: crate::launch::min_registers(p),
        },
        shared_plan: cx.plan,
        notes: cx.notes,
    })
}
