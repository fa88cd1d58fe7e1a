//! Per-instruction checks: memory scopes, ranks and static shapes, layouts, dtypes.

mod addressing;

use super::dot::{accumulator_for, broadcast_thread_local, plan_dot};
use super::expr::describe;
use super::{const_eval, shared, Checker};
use crate::dtype::Kind;
use crate::ir::{
    ElementOp, Expr, GlobalType, Instruction, Operand, RegisterType, ScalarType, SharedType,
    SpanId, VarId, VarType,
};
use crate::layout::{Layout, SharedLayout};
use crate::DType;

impl<'p> Checker<'p> {
    /// Read an operand that must be in one scope; reports a scope error and returns `None`
    /// otherwise (silently for `Unknown`, whose cause is reported where it arose).
    fn operand<T: 'p>(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
        want: &str,
        pick: fn(&'p VarType) -> Option<&'p T>,
    ) -> Option<&'p T> {
        let ty = self.use_var(v, span)?;
        if let Some(x) = pick(ty) {
            return Some(x);
        }
        if *ty != VarType::Unknown {
            let msg = format!(
                "{instr}: {role} {} must be {want}, but it is {}",
                self.name(v),
                describe(ty)
            );
            self.err(span, msg);
        }
        None
    }

    pub(super) fn reg(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
    ) -> Option<&'p RegisterType> {
        self.operand(
            v,
            span,
            instr,
            role,
            "a register tensor",
            VarType::as_register,
        )
    }

    pub(super) fn shared_op(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
    ) -> Option<&'p SharedType> {
        self.operand(v, span, instr, role, "a shared tensor", VarType::as_shared)
    }

    pub(super) fn global(
        &mut self,
        v: VarId,
        span: SpanId,
        instr: &str,
        role: &str,
    ) -> Option<&'p GlobalType> {
        self.operand(v, span, instr, role, "a global tensor", VarType::as_global)
    }

    /// Record that `out` is written here with type `ty` (`None`: unknown, already reported).
    /// Mark `out` defined and, when its operands checked out, check that its declared type is
    /// the one the IR infers for the instruction ([`Instruction::output_types`], the same
    /// inference the builder uses).
    pub(super) fn define(&mut self, out: VarId, operands_ok: bool, span: SpanId, instr: &str) {
        let p = self.p;
        let Some(var) = p.vars.get(out.0 as usize) else {
            self.err(
                span,
                format!("{instr} writes unknown variable id {}", out.0),
            );
            return;
        };
        let inferred = self
            .inferred
            .iter()
            .find(|(v, _)| *v == out)
            .map(|(_, t)| t.clone());
        if let (true, Some(ty)) = (operands_ok, inferred) {
            if ty != VarType::Unknown && var.ty != ty {
                let (declared, produced) = (describe(&var.ty), describe(&ty));
                let extra = if declared == produced {
                    " (the layouts differ)"
                } else {
                    ""
                };
                self.err(
                    span,
                    format!(
                        "{instr}: `{}` is {declared}, but {instr} produces {produced}{extra}",
                        var.name
                    ),
                );
            }
        }
        self.defined[out.0 as usize] = true;
    }

    /// A register layout must span the block's threads or a divisor of them (replication).
    pub(super) fn check_layout(&mut self, layout: &Layout, span: SpanId, what: &str) {
        let bt = self.block_threads;
        if bt == 0 {
            return;
        }
        let t = layout.num_threads();
        if t == 0 || !bt.is_multiple_of(t) {
            let help = if t > bt {
                format!("use fewer threads in the layout's `spatial` parts, or a block of {t} threads (`warps = {}`)", t.div_ceil(32))
            } else {
                format!("make the layout span {bt} threads (a `spatial(..)` factor of {bt} / {t} is not whole: change the `spatial` extents or `warps`)")
            };
            self.err(
                span,
                format!(
                    "{what}: the layout spans {t} threads, which is neither the block's {bt} threads nor a divisor of them\nhelp: {help}"
                ),
            );
        }
    }

    fn offsets(&mut self, offset: &[Expr], span: SpanId, instr: &str) {
        for e in offset {
            self.expect_expr(e, ScalarType::I32, span, &format!("an offset of {instr}"));
        }
    }

    /// Offsets into a global view may be `i32` or `i64`: the generated code computes global
    /// addresses in 64 bits.
    fn global_offsets(&mut self, offset: &[Expr], span: SpanId, instr: &str) {
        for e in offset {
            let what = format!("an offset of {instr}");
            self.expect_integer(e, span, &what);
        }
    }

    /// A rank-`r` tile at `offset` covers the trailing `r` dims of `tensor` (extents `dims`,
    /// `None` where unknown until run time). Unmasked (shared) accesses must also stay inside
    /// for constant offsets.
    #[allow(clippy::too_many_arguments)]
    fn check_tile(
        &mut self,
        instr: &str,
        tensor: VarId,
        tile: &[usize],
        dims: &[Option<i64>],
        offset: &[Expr],
        span: SpanId,
        masked: bool,
    ) {
        let name = self.name(tensor);
        let show = |d: &[Option<i64>]| {
            let parts: Vec<String> = d
                .iter()
                .map(|x| x.map_or("?".to_string(), |v| v.to_string()))
                .collect();
            format!("[{}]", parts.join(", "))
        };
        if offset.len() != dims.len() {
            self.err(
                span,
                format!(
                    "{instr}: the offset has rank {} but {name} has rank {}",
                    offset.len(),
                    dims.len()
                ),
            );
        }
        if tile.len() > dims.len() {
            self.err(
                span,
                format!(
                    "{instr}: a tile of shape {tile:?} has a higher rank than {name} of rank {}",
                    dims.len()
                ),
            );
            return;
        }
        let lead = dims.len() - tile.len();
        let too_big = tile
            .iter()
            .zip(&dims[lead..])
            .any(|(&t, d)| matches!(d, Some(d) if t as i64 > *d));
        if too_big {
            self.err(
                span,
                format!(
                    "{instr}: the tile {tile:?} is larger than the trailing dims {} of {name}",
                    show(&dims[lead..])
                ),
            );
            return;
        }
        if masked || offset.len() != dims.len() {
            return;
        }
        for (d, (o, ext)) in offset.iter().zip(dims).enumerate() {
            let extent = if d < lead { 1 } else { tile[d - lead] as i64 };
            if let (Some(o), Some(ext)) = (const_eval(o), ext) {
                if o < 0 || o + extent > *ext {
                    let offs: Vec<Option<i64>> = offset.iter().map(const_eval).collect();
                    self.err(
                        span,
                        format!(
                            "{instr}: the tile {tile:?} at offset {} lies outside {name} of shape {}",
                            show(&offs),
                            show(dims)
                        ),
                    );
                    return;
                }
            }
        }
    }

    /// The right operand of an elementwise instruction whose left operand is `lhs` (type `l`):
    /// a tensor of the same dtype that broadcasts to it in registers, an i32 scalar, or a
    /// finite immediate.
    pub(super) fn check_rhs(
        &mut self,
        lhs: VarId,
        l: Option<&'p RegisterType>,
        rhs: &Operand,
        span: SpanId,
        name: &str,
    ) {
        match rhs {
            Operand::Tensor(r) => {
                let rr = self.reg(*r, span, name, "the right operand");
                if let (Some(l), Some(rr)) = (l, rr) {
                    self.same_dtype(span, name, lhs, l.dtype, *r, rr.dtype);
                    if self.block_threads > 0 {
                        if let Err(e) =
                            broadcast_thread_local(&l.layout, &rr.layout, self.block_threads)
                        {
                            let msg = format!(
                                "{name}: {} cannot be broadcast to {} in registers: {e}",
                                self.name(*r),
                                self.name(lhs)
                            );
                            self.err(span, msg);
                        }
                    }
                }
            }
            Operand::Scalar(e) => {
                if let Some(t) = self.expr_ty(e, span) {
                    if matches!(t, ScalarType::Bool | ScalarType::I64) {
                        let t = t.name();
                        self.err(
                            span,
                            format!("{name}: a scalar operand must be i32 or f32, found {t}"),
                        );
                    }
                }
            }
            Operand::Imm(v) => {
                if v.is_nan() {
                    self.err(span, format!("{name}: NaN is not a valid immediate"));
                }
            }
        }
    }

    pub(super) fn same_dtype(
        &mut self,
        span: SpanId,
        instr: &str,
        x: VarId,
        xd: crate::DType,
        y: VarId,
        yd: crate::DType,
    ) {
        if xd != yd {
            let (xn, yn) = (self.name(x), self.name(y));
            self.err(
                span,
                format!("{instr}: {xn} holds {xd} but {yn} holds {yd}; the dtypes must match"),
            );
        }
    }

    pub(super) fn instr(&mut self, ins: &Instruction, span: SpanId) {
        let name = ins.name();
        let p = self.p;
        self.inferred = ins.output_types(&|v| p.ty(v).clone());
        self.check_barrier_uses(ins, span);
        match ins {
            Instruction::BlockIndices { outs } => {
                if outs.len() != self.p.grid.len() {
                    self.err(
                        span,
                        format!(
                            "block_indices binds {} indices, but the grid has {} dimensions",
                            outs.len(),
                            self.p.grid.len()
                        ),
                    );
                }
                for &o in outs {
                    self.define(o, true, span, name);
                }
            }
            Instruction::AllocateGlobal {
                out,
                dtype: _,
                shape,
            } => {
                for (d, e) in shape.iter().enumerate() {
                    let what = format!("extent {d} of allocate_global {}", self.name(*out));
                    self.expect_extent(e, span, &what);
                }
                self.define(*out, true, span, name);
            }
            Instruction::AllocateShared { out, dtype, layout } => {
                let on = self.name(*out);
                if layout.strides.len() != layout.shape.len() {
                    self.err(
                        span,
                        format!(
                            "allocate_shared {on}: shape {:?} has {} dims but the layout has {} strides",
                            layout.shape,
                            layout.shape.len(),
                            layout.strides.len()
                        ),
                    );
                } else if layout.shape.is_empty() || layout.shape.contains(&0) {
                    self.err(
                        span,
                        format!("allocate_shared {on}: shape {:?} is empty", layout.shape),
                    );
                } else {
                    self.shared
                        .push((*out, shared::allocation_bytes(*dtype, layout)));
                }
                self.define(*out, true, span, name);
            }
            Instruction::AllocateRegister {
                out,
                dtype: _,
                layout,
                init,
            } => {
                let what = format!("register tensor {}", self.name(*out));
                self.check_layout(layout, span, &what);
                if init.is_some_and(f64::is_nan) {
                    self.err(span, format!("{what}: NaN is not a valid initial value"));
                }
                self.define(*out, true, span, name);
            }
            Instruction::ViewGlobal {
                out,
                ptr,
                dtype: _,
                shape,
            } => {
                for (d, e) in shape.iter().enumerate() {
                    let what = format!("extent {d} of view_global {}", self.name(*out));
                    self.expect_extent(e, span, &what);
                }
                let mutable = match self.use_var(*ptr, span) {
                    Some(VarType::Pointer { mutable, .. }) => Some(*mutable),
                    Some(VarType::Unknown) | None => None,
                    Some(other) => {
                        let msg = format!(
                            "view_global: {} must be a pointer parameter, but it is {}",
                            self.name(*ptr),
                            describe(other)
                        );
                        self.err(span, msg);
                        None
                    }
                };
                self.define(*out, mutable.is_some(), span, name);
            }
            Instruction::LoadGlobal {
                out,
                src,
                offset,
                layout,
                fill,
            } => {
                self.global_offsets(offset, span, name);
                let what = format!("load_global into {}", self.name(*out));
                self.check_layout(layout, span, &what);
                if fill.is_some_and(f64::is_nan) {
                    self.err(span, format!("{what}: NaN is not a valid fill value"));
                }
                let g = self.global(*src, span, name, "the source");
                if let Some(g) = g {
                    let dims: Vec<Option<i64>> = g.shape.iter().map(const_eval).collect();
                    self.check_tile(name, *src, layout.shape(), &dims, offset, span, true);
                }
                self.define(*out, g.is_some(), span, name);
            }
            Instruction::StoreGlobal { src, dst, offset } => {
                self.global_offsets(offset, span, name);
                let r = self.reg(*src, span, name, "the stored value");
                let g = self.global(*dst, span, name, "the destination");
                if let Some(g) = g {
                    if !g.mutable {
                        let msg = format!(
                            "store_global: {} is a view of read-only pointer {}; stores need a mutable pointer",
                            self.name(*dst),
                            self.name(g.ptr)
                        );
                        self.err(span, msg);
                    }
                }
                if let (Some(r), Some(g)) = (r, g) {
                    self.same_dtype(span, name, *src, r.dtype, *dst, g.dtype);
                    let dims: Vec<Option<i64>> = g.shape.iter().map(const_eval).collect();
                    self.check_tile(name, *dst, r.layout.shape(), &dims, offset, span, true);
                }
            }
            Instruction::LoadShared {
                out,
                src,
                offset,
                layout,
            } => {
                self.offsets(offset, span, name);
                let what = format!("load_shared into {}", self.name(*out));
                self.check_layout(layout, span, &what);
                let s = self.shared_op(*src, span, name, "the source");
                if let Some(s) = s {
                    let dims = static_dims(&s.layout);
                    self.check_tile(name, *src, layout.shape(), &dims, offset, span, false);
                }
                self.define(*out, s.is_some(), span, name);
            }
            Instruction::StoreShared { src, dst, offset } => {
                self.offsets(offset, span, name);
                let r = self.reg(*src, span, name, "the stored value");
                let s = self.shared_op(*dst, span, name, "the destination");
                if let (Some(r), Some(s)) = (r, s) {
                    self.same_dtype(span, name, *src, r.dtype, *dst, s.dtype);
                    let dims = static_dims(&s.layout);
                    self.check_tile(name, *dst, r.layout.shape(), &dims, offset, span, false);
                }
            }
            Instruction::SliceShared {
                out,
                src,
                offset,
                shape,
            } => {
                self.offsets(offset, span, name);
                let s = self.shared_op(*src, span, name, "the source");
                if let Some(s) = s {
                    let dims = static_dims(&s.layout);
                    self.check_tile(name, *src, shape, &dims, offset, span, false);
                }
                self.define(*out, s.is_some(), span, name);
            }
            Instruction::PermuteShared { out, src, dims } => {
                let s = self.shared_op(*src, span, name, "the source");
                let mut ok = s.is_some();
                if let Some(s) = s {
                    if let Err(e) = s.layout.permute(dims) {
                        ok = false;
                        let src = self.name(*src);
                        self.err(
                            span,
                            format!("{name}: {e} of {src} (shape {:?})", s.layout.shape),
                        );
                    }
                }
                self.define(*out, ok, span, name);
            }
            Instruction::CopyAsync {
                dst,
                src,
                src_offset,
            } => {
                self.global_offsets(src_offset, span, name);
                let d = self.operand(
                    *dst,
                    span,
                    name,
                    "the destination",
                    "a shared tensor (copy_async copies global memory into shared memory)",
                    VarType::as_shared,
                );
                let g = self.operand(
                    *src,
                    span,
                    name,
                    "the source",
                    "a global tensor (copy_async copies global memory into shared memory)",
                    VarType::as_global,
                );
                if let (Some(d), Some(g)) = (d, g) {
                    self.same_dtype(span, name, *dst, d.dtype, *src, g.dtype);
                    let dims: Vec<Option<i64>> = g.shape.iter().map(const_eval).collect();
                    self.check_tile(name, *src, &d.layout.shape, &dims, src_offset, span, true);
                }
            }
            Instruction::DotAsync { out, a, b, c } => {
                if self.branch_depth > 0 {
                    // Measured on the H100: with wgmmas in flight on an accumulator issued
                    // from two branches, the CUDA compiler moved the accumulator's registers
                    // at the merge and the results were wrong, without a warning.
                    let msg = format!(
                        "dot_async into {} inside an `if`: an accumulator in flight must stay in the same registers, which the CUDA compiler does not guarantee across a branch\nhelp: issue the dot_async unconditionally (write the step out once per case, e.g. an unrolled pair of steps and a tail)",
                        self.name(*out)
                    );
                    self.err(span, msg);
                }
                self.check_dot_shared(*out, *a, *b, *c, span)
            }
            Instruction::Mbarriers {
                out,
                count,
                arrivals,
            } => {
                let bytes = 8usize.saturating_mul(*count as usize);
                self.shared
                    .push((*out, bytes.next_multiple_of(shared::SHARED_ALIGN)));
                self.check_mbarriers(*out, *count, *arrivals, span);
            }
            Instruction::TmaLoad {
                dst,
                src,
                src_offset,
                barrier,
                index,
            } => self.check_tma_load(*dst, *src, src_offset, *barrier, index, span),
            Instruction::TmaStore {
                src,
                dst,
                dst_offset,
            } => self.check_tma_store(*src, *dst, dst_offset, span),
            Instruction::TmaStoreWait => self.needs_tma(span, "tma_store_wait"),
            Instruction::MbarrierArrive { barrier, index } => {
                self.check_mbarrier_arrive(*barrier, index, span)
            }
            Instruction::MbarrierWait {
                barrier,
                index,
                phase,
            } => self.check_mbarrier_wait(*barrier, index, phase, span),
            Instruction::CopyAsyncCommitGroup
            | Instruction::CopyAsyncWaitGroup { .. }
            | Instruction::DotWait { .. }
            | Instruction::Synchronize
            | Instruction::Fence
            | Instruction::GridDependency(_)
            | Instruction::Exit => {}
            Instruction::MulAdd { out, a, b, c } => {
                let l = self.reg(*a, span, name, "the first operand");
                self.check_rhs(*a, l, b, span, name);
                let rc = self.reg(*c, span, name, "the addend");
                if let Some(l) = l {
                    if !matches!(l.dtype, DType::F32 | DType::F16 | DType::BF16) {
                        let msg = format!(
                            "mul_add is defined for f32, f16 and bf16 tensors, but {} holds {}",
                            self.name(*a),
                            l.dtype
                        );
                        self.err(span, msg);
                    }
                    if let Some(rc) = rc {
                        self.same_dtype(span, name, *a, l.dtype, *c, rc.dtype);
                        if self.block_threads > 0 {
                            if let Err(e) =
                                broadcast_thread_local(&l.layout, &rc.layout, self.block_threads)
                            {
                                let msg = format!(
                                    "mul_add: the addend {} ({}) cannot be broadcast to {} ({}) \
                                     in registers: {e}",
                                    self.name(*c),
                                    rc.layout.to_expr(),
                                    self.name(*a),
                                    l.layout.to_expr()
                                );
                                self.err(span, msg);
                            }
                        }
                    }
                }
                self.define(*out, l.is_some(), span, name);
            }
            Instruction::Binary { out, op, lhs, rhs } => {
                let l = self.reg(*lhs, span, name, "the left operand");
                self.check_rhs(*lhs, l, rhs, span, name);
                if let Some(l) = l {
                    let int_only = matches!(
                        op,
                        ElementOp::Mod
                            | ElementOp::And
                            | ElementOp::Or
                            | ElementOp::Xor
                            | ElementOp::Shl
                            | ElementOp::Shr
                    );
                    if int_only && l.dtype.kind() == Kind::Float {
                        let shown = if *op == ElementOp::Mod { "mod" } else { name };
                        let msg = format!(
                            "{shown} is defined for integer tensors, but {} holds {}",
                            self.name(*lhs),
                            l.dtype
                        );
                        self.err(span, msg);
                    }
                }
                self.define(*out, l.is_some(), span, name);
            }
            Instruction::Neg { out, x } => {
                let r = self.reg(*x, span, name, "the operand");
                if let Some(r) = r.filter(|r| r.dtype.kind() == Kind::UInt) {
                    let msg = format!("neg of unsigned {} tensor {}", r.dtype, self.name(*x));
                    self.err(span, msg);
                }
                self.define(*out, r.is_some(), span, name);
            }
            Instruction::Cast {
                out,
                x,
                dtype: _,
                layout,
                biased: _,
            } => {
                if let Some(l) = layout {
                    self.check_layout(l, span, &format!("cast {}", self.name(*out)));
                }
                let r = self.reg(*x, span, name, "the operand");
                if let (Some(r), Some(l)) = (r, layout) {
                    if r.layout.local_permutation(l).is_none() {
                        let msg = format!(
                            "cast: {} in {} does not hold the elements of {} ({}) on the same threads; a cast may only reorder each thread's locals",
                            self.name(*out),
                            l.to_expr(),
                            self.name(*x),
                            r.layout.to_expr()
                        );
                        self.err(span, msg);
                    }
                }
                self.define(*out, r.is_some(), span, name);
            }
            Instruction::View {
                out,
                x,
                dtype,
                layout,
            } => {
                let what = format!("view {}", self.name(*out));
                self.check_layout(layout, span, &what);
                if let Some(r) = self.reg(*x, span, name, "the operand") {
                    let (xn, on) = (self.name(*x), self.name(*out));
                    let (xt, ot) = (r.layout.num_threads(), layout.num_threads());
                    if xt != ot {
                        self.err(
                            span,
                            format!("view: {on} spreads over {ot} threads but {xn} over {xt}; a view keeps the thread count\nhelp: give {on} the same `spatial(..)` parts as {xn} ({}) and change only its `local(..)` parts", r.layout.to_expr()),
                        );
                    }
                    let (xl, xb) = (r.layout.num_locals(), r.dtype.bits() as usize);
                    let (ol, ob) = (layout.num_locals(), dtype.bits() as usize);
                    if xl * xb != ol * ob {
                        let help = if (xl * xb).is_multiple_of(ob) {
                            format!("as {dtype}, each thread's {} bits are {} locals: scale {on}'s `local(..)` extents from {ol} to {} locals", xl * xb, xl * xb / ob, xl * xb / ob)
                        } else {
                            format!("{} bits per thread are not a whole number of {dtype} elements ({ob} bits); view them as a type whose width divides {}", xl * xb, xl * xb)
                        };
                        self.err(
                            span,
                            format!(
                                "view: each thread holds {} bits of {xn} ({xl} x {}) but {on} needs {} bits ({ol} x {dtype})\nhelp: {help}",
                                xl * xb,
                                r.dtype,
                                ol * ob
                            ),
                        );
                    }
                }
                self.define(*out, true, span, name);
            }
            Instruction::Dot { out, a, b, c } => self.check_dot(*out, *a, *b, *c, span),
            Instruction::Unary { out, op, x } => self.check_unary(*out, *op, *x, span),
            Instruction::Compare { out, lhs, rhs, .. } => {
                self.check_compare(*out, *lhs, rhs, span, name)
            }
            Instruction::Select { out, cond, a, b } => self.check_select(*out, *cond, *a, b, span),
            Instruction::Arange {
                out,
                layout,
                dim,
                offset,
            } => self.check_arange(*out, layout, *dim, offset, span),
            Instruction::Reduce { out, x, op, dim } => self.check_reduce(*out, *x, *op, *dim, span),
            Instruction::Scan { out, x, dim, .. } => self.check_scan(*out, *x, *dim, span),
            Instruction::PlaneDot { out, w, a, dim } => {
                self.check_plane_dot(*out, *w, *a, *dim, span)
            }
            Instruction::Print { x, .. } => match x {
                Operand::Tensor(v) => {
                    self.use_var(*v, span);
                }
                Operand::Scalar(e) => {
                    self.expr_ty(e, span);
                }
                Operand::Imm(_) => {}
            },
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => self.check_addressing(ins, span),
        }
    }

    fn check_dot(&mut self, out: VarId, a: VarId, b: VarId, c: VarId, span: SpanId) {
        if [a, b].iter().any(|&v| self.p.ty(v).as_shared().is_some()) {
            return self.check_dot_shared(out, a, b, c, span);
        }
        let ra = self.reg(a, span, "dot", "the left operand");
        let rb = self.reg(b, span, "dot", "the right operand");
        let rc = self.reg(c, span, "dot", "the accumulator");
        if let (Some(ra), Some(rb), Some(rc)) = (ra, rb, rc) {
            let (an, bn, cn) = (self.name(a), self.name(b), self.name(c));
            let (sa, sb, sc) = (ra.layout.shape(), rb.layout.shape(), rc.layout.shape());
            let shapes_ok = crate::verify::dot_shapes(sa, sb, sc).is_some();
            if !shapes_ok {
                self.err(
                    span,
                    format!("dot: shapes do not agree: {an} is {sa:?}, {bn} is {sb:?}, {cn} is {sc:?}; expected [m, k] x [k, n] + [m, n], or batched [b, m, k] x [b, k, n] + [b, m, n]"),
                );
            }
            let mut types_ok = true;
            if !crate::verify::dot::operand_dtypes_agree(ra.dtype, rb.dtype) {
                types_ok = false;
                self.err(
                    span,
                    format!("dot: {an} holds {} but {bn} holds {}; the operands must have the same dtype (or be 8-bit integers, u8 x i8 mixed)", ra.dtype, rb.dtype),
                );
            } else if rc.dtype != accumulator_for(ra.dtype) {
                types_ok = false;
                self.err(
                    span,
                    format!(
                        "dot: the accumulator {cn} must be {} for {} operands, but it is {}",
                        accumulator_for(ra.dtype),
                        ra.dtype,
                        rc.dtype
                    ),
                );
            }
            if shapes_ok && types_ok && self.block_threads > 0 {
                if let Err(reason) = plan_dot(ra, rb, rc, self.block_threads, self.target) {
                    // A help line of the reason goes after the whole message.
                    let (reason, help) = match reason.split_once("\nhelp: ") {
                        Some((r, h)) => (r.to_string(), format!("\nhelp: {h}")),
                        None => (reason, String::new()),
                    };
                    self.err(
                        span,
                        format!("dot: no thread-level or warp-level implementation serves the layouts of {an}, {bn} and {cn} ({reason}){help}"),
                    );
                }
            }
        }
        self.define(out, rc.is_some(), span, "dot");
    }
}

impl<'p> Checker<'p> {
    /// `dot` with shared operands: the warpgroup MMA (`super::wgmma`).
    fn check_dot_shared(&mut self, out: VarId, a: VarId, b: VarId, c: VarId, span: SpanId) {
        if self.p.ty(a).as_register().is_some() {
            return self.check_dot_register_a(out, a, b, c, span);
        }
        let what = WGMMA_SHARED;
        let sa = self.operand(a, span, "dot", "the left operand", what, VarType::as_shared);
        let sb = self.operand(
            b,
            span,
            "dot",
            "the right operand",
            what,
            VarType::as_shared,
        );
        let rc = self.reg(c, span, "dot", "the accumulator");
        if let (Some(sa), Some(sb), Some(rc)) = (sa, sb, rc) {
            let (threads, target) = (self.block_threads, self.target);
            self.check_wgmma(
                span,
                (a, &sa.layout.shape, sa.dtype, ""),
                (b, sb),
                (c, rc),
                || super::wgmma::plan_wgmma(sa, sb, rc, threads, target).map(|_| ()),
            );
        }
        self.define(out, rc.is_some(), span, "dot");
    }
}

/// What a `dot` with a shared operand (wgmma) needs of the operand named.
const WGMMA_SHARED: &str =
    "a shared tensor (a dot with a shared operand runs on wgmma: b from shared memory, a from shared memory or registers)";

impl<'p> Checker<'p> {
    /// `dot` with `a` in registers and `b` shared: the RS form of wgmma
    /// (`super::wgmma::plan_wgmma_rs`).
    fn check_dot_register_a(&mut self, out: VarId, a: VarId, b: VarId, c: VarId, span: SpanId) {
        let ra = self.reg(a, span, "dot", "the left operand");
        let sb = self.operand(
            b,
            span,
            "dot",
            "the right operand",
            WGMMA_SHARED,
            VarType::as_shared,
        );
        let rc = self.reg(c, span, "dot", "the accumulator");
        if let (Some(ra), Some(sb), Some(rc)) = (ra, sb, rc) {
            let (threads, target) = (self.block_threads, self.target);
            let shape = ra.layout.shape();
            self.check_wgmma(
                span,
                (a, shape, ra.dtype, " (registers)"),
                (b, sb),
                (c, rc),
                || super::wgmma::plan_wgmma_rs(ra, sb, rc, threads, target).map(|_| ()),
            );
        }
        self.define(out, rc.is_some(), span, "dot");
    }
}

impl Checker<'_> {
    /// What both wgmma forms check: shapes `[m, k] x [k, n] + [m, n]`, one operand dtype, then
    /// the form's `plan` (its error's `help:` line kept last). `a` is described by its shape,
    /// dtype and where it lives (`" (registers)"` or nothing).
    fn check_wgmma(
        &mut self,
        span: SpanId,
        (a, xa, a_dtype, a_where): (VarId, &[usize], DType, &str),
        (b, sb): (VarId, &SharedType),
        (c, rc): (VarId, &RegisterType),
        plan: impl FnOnce() -> Result<(), String>,
    ) {
        let (an, bn, cn) = (self.name(a), self.name(b), self.name(c));
        let (xb, xc) = (&sb.layout.shape, rc.layout.shape());
        let int8 = |d: DType| matches!(d, DType::Int(8) | DType::UInt(8));
        let shapes_ok = xa.len() == 2
            && xb.len() == 2
            && xc.len() == 2
            && xa[1] == xb[0]
            && xa[0] == xc[0]
            && xb[1] == xc[1];
        if !shapes_ok {
            self.err(
                span,
                format!("dot: shapes do not agree: {an} is {xa:?}, {bn} is {xb:?}, {cn} is {xc:?}; expected [m, k] x [k, n] + [m, n]"),
            );
        } else if a_dtype != sb.dtype && !(int8(a_dtype) && int8(sb.dtype)) {
            self.err(
                span,
                format!("dot: {an} holds {a_dtype} but {bn} holds {}; the operands must have the same dtype (or be 8-bit integers of either signedness)", sb.dtype),
            );
        } else if self.block_threads > 0 {
            if let Err(reason) = plan() {
                let (reason, help) = match reason.split_once("\nhelp: ") {
                    Some((r, h)) => (r.to_string(), format!("\nhelp: {h}")),
                    None => (reason, String::new()),
                };
                self.err(
                    span,
                    format!("dot: the warpgroup MMA (wgmma) cannot serve {an}{a_where}, {bn} and {cn}: {reason}{help}"),
                );
            }
        }
    }
}

fn static_dims(layout: &SharedLayout) -> Vec<Option<i64>> {
    layout.shape.iter().map(|&d| Some(d as i64)).collect()
}
