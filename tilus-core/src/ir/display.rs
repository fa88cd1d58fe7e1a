//! The one printer of the IR: expressions (in C syntax, which is also the IR's, so code
//! generation prints with it too), instructions (as `#[kernel]` spells them), and whole
//! programs (`Display`, what `tilus emit <kernel> --ir` shows).

use std::fmt;

use super::{
    BinaryOp, Expr, Instruction, Operand, Program, Stmt, StmtKind, UnaryOp, Unroll, VarId, VarType,
};

impl Expr {
    /// Render with C's operators and precedence (`min`/`max` as calls, select as `c ? a : b`);
    /// `name` gives each variable's identifier.
    pub fn render(&self, name: &dyn Fn(VarId) -> String) -> String {
        render(self, name, 16)
    }
}

/// Binding strength of a C operator (lower binds tighter), as in the C precedence table.
fn prec(op: BinaryOp) -> u8 {
    match op {
        BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod => 3,
        BinaryOp::Add | BinaryOp::Sub => 4,
        BinaryOp::Shl | BinaryOp::Shr => 5,
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => 6,
        BinaryOp::Eq | BinaryOp::Ne => 7,
        BinaryOp::BitAnd => 8,
        BinaryOp::BitXor => 9,
        BinaryOp::BitOr => 10,
        BinaryOp::And => 11,
        BinaryOp::Or => 12,
        BinaryOp::Min | BinaryOp::Max => 0,
    }
}

/// An `f32` constant as a C literal that reads back to the same bits: Rust's shortest
/// round-trip form with an `f` suffix (`1.0f`, `1e-6f`); infinities by their bits.
pub(crate) fn f32_literal(v: f32) -> String {
    if v.is_finite() {
        let s = format!("{v:?}f");
        if v < 0.0 {
            format!("({s})")
        } else {
            s
        }
    } else {
        format!("__int_as_float({:#010x})", v.to_bits())
    }
}

/// Render with parentheses when the context binds tighter than `e` (`ctx` is the precedence
/// level the result must satisfy: the result may be used unparenthesized at levels >= its own).
fn render(e: &Expr, name: &dyn Fn(VarId) -> String, ctx: u8) -> String {
    let wrap = |s: String, p: u8| if p > ctx { format!("({s})") } else { s };
    match e {
        // i32::MIN has no literal in C (2147483648 is not an int).
        Expr::Int(i32::MIN) => "(-2147483647 - 1)".to_string(),
        Expr::Int(v) if *v < 0 => format!("({v})"),
        Expr::Int(v) => v.to_string(),
        // `LL` keeps the constant a `long long` in C whatever its value.
        Expr::I64(i64::MIN) => "(-9223372036854775807LL - 1)".to_string(),
        Expr::I64(v) if *v < 0 => format!("({v}LL)"),
        Expr::I64(v) => format!("{v}LL"),
        Expr::Bool(b) => b.to_string(),
        Expr::F32(bits) => f32_literal(f32::from_bits(*bits)),
        Expr::Var(v) => name(*v),
        Expr::Unary(op, a) => {
            let t = match op {
                UnaryOp::Neg => "-",
                UnaryOp::Not => "!",
                UnaryOp::ToF32 => "(float)",
                UnaryOp::ToI32 => "(int)",
                UnaryOp::ToI64 => "(long long)",
            };
            wrap(format!("{t}{}", render(a, name, 2)), 2)
        }
        Expr::Binary(op @ (BinaryOp::Min | BinaryOp::Max), a, b) => format!(
            "{}({}, {})",
            op.symbol(),
            render(a, name, 16),
            render(b, name, 16)
        ),
        Expr::Binary(op, a, b) => {
            let p = prec(*op);
            // Left-associative: the right operand needs parentheses at equal precedence. The
            // operands of bit operators are parenthesized whenever they are operations
            // themselves: C's precedence for them surprises readers (`a & b == c`).
            let bits = matches!(
                op,
                BinaryOp::BitAnd
                    | BinaryOp::BitOr
                    | BinaryOp::BitXor
                    | BinaryOp::Shl
                    | BinaryOp::Shr
            );
            let (pa, pb) = if bits { (2, 2) } else { (p, p - 1) };
            let s = format!(
                "{} {} {}",
                render(a, name, pa),
                op.symbol(),
                render(b, name, pb)
            );
            wrap(s, p)
        }
        Expr::Select(c, a, b) => wrap(
            format!(
                "{} ? {} : {}",
                render(c, name, 12),
                render(a, name, 13),
                render(b, name, 13)
            ),
            13,
        ),
    }
}

impl Program {
    /// The name of variable `v` (`%N` for an id out of range).
    pub fn var_name(&self, v: VarId) -> String {
        self.vars
            .get(v.0 as usize)
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("%{}", v.0))
    }

    /// An expression with this program's variable names.
    pub fn expr_text(&self, e: &Expr) -> String {
        e.render(&|v| self.var_name(v))
    }

    /// One line for instruction `i`, as `#[kernel]` spells it: `acc = dot(ra, rb, acc)`.
    pub fn instruction_text(&self, i: &Instruction) -> String {
        let n = |v: &VarId| self.var_name(*v);
        let e = |x: &Expr| self.expr_text(x);
        let list = |xs: &[Expr]| format!("[{}]", xs.iter().map(e).collect::<Vec<_>>().join(", "));
        let op = |o: &Operand| match o {
            Operand::Tensor(t) => n(t),
            Operand::Scalar(x) => e(x),
            Operand::Imm(v) => format!("{v:?}"),
        };
        let name = i.name();
        match i {
            Instruction::BlockIndices { outs } => format!(
                "[{}] = {name}()",
                outs.iter().map(n).collect::<Vec<_>>().join(", ")
            ),
            Instruction::AllocateGlobal { out, dtype, shape } => {
                format!("{} = {name}({dtype}, {})", n(out), list(shape))
            }
            Instruction::AllocateShared { out, dtype, layout } => format!(
                "{} = {name}({dtype}, shape={:?}, strides={:?}{})",
                n(out),
                layout.shape,
                layout.strides,
                layout
                    .swizzle
                    .map(|s| format!(", swizzle=({}, {}, {})", s.bits, s.base, s.shift))
                    .unwrap_or_default()
            ),
            Instruction::AllocateRegister {
                out,
                dtype,
                layout,
                init,
            } => format!(
                "{} = {name}({dtype}, {}{})",
                n(out),
                layout.to_expr(),
                init.map(|v| format!(", {v:?}")).unwrap_or_default()
            ),
            Instruction::ViewGlobal {
                out,
                ptr,
                dtype,
                shape,
            } => format!("{} = {name}({}, {dtype}, {})", n(out), n(ptr), list(shape)),
            Instruction::LoadGlobal {
                out,
                src,
                offset,
                layout,
                fill: Some(f),
            } => format!(
                "{} = {name}({}, {}, {}, {f:?})",
                n(out),
                n(src),
                layout.to_expr(),
                list(offset)
            ),
            Instruction::LoadGlobal {
                out,
                src,
                offset,
                layout,
                fill: None,
            }
            | Instruction::LoadShared {
                out,
                src,
                offset,
                layout,
            } => format!(
                "{} = {name}({}, {}, {})",
                n(out),
                n(src),
                layout.to_expr(),
                list(offset)
            ),
            Instruction::StoreGlobal { src, dst, offset }
            | Instruction::StoreShared { src, dst, offset } => {
                format!("{name}({}, {}, {})", n(src), n(dst), list(offset))
            }
            Instruction::SliceShared {
                out,
                src,
                offset,
                shape,
            } => format!(
                "{} = {name}({}, {}, {shape:?})",
                n(out),
                n(src),
                list(offset)
            ),
            Instruction::PermuteShared { out, src, dims } => {
                format!("{} = {name}({}, {dims:?})", n(out), n(src))
            }
            Instruction::CopyAsync {
                dst,
                src,
                src_offset,
            } => format!("{name}({}, {}, {})", n(dst), n(src), list(src_offset)),
            Instruction::CopyAsyncWaitGroup { n: k } => format!("{name}({k})"),
            Instruction::TmaStoreWait => format!("{name}()"),
            Instruction::TmaStore {
                src,
                dst,
                dst_offset,
            } => format!("{name}({}, {}, {})", n(src), n(dst), list(dst_offset)),
            Instruction::Mbarriers {
                out,
                count,
                arrivals,
            } => format!("{} = {name}({count}, {arrivals})", n(out)),
            Instruction::TmaLoad {
                dst,
                src,
                src_offset,
                barrier,
                index,
            } => format!(
                "{name}({}, {}, {}, {}, {})",
                n(src),
                n(dst),
                list(src_offset),
                n(barrier),
                e(index)
            ),
            Instruction::MbarrierArrive { barrier, index } => {
                format!("{name}({}, {})", n(barrier), e(index))
            }
            Instruction::MbarrierWait {
                barrier,
                index,
                phase,
            } => format!("{name}({}, {}, {})", n(barrier), e(index), e(phase)),
            Instruction::Binary { out, lhs, rhs, .. } => {
                format!("{} = {name}({}, {})", n(out), n(lhs), op(rhs))
            }
            Instruction::MulAdd { out, a, b, c } => {
                format!("{} = {name}({}, {}, {})", n(out), n(a), op(b), n(c))
            }
            Instruction::Neg { out, x } | Instruction::Unary { out, x, .. } => {
                format!("{} = {name}({})", n(out), n(x))
            }
            Instruction::Compare { out, lhs, rhs, .. } => {
                format!("{} = {name}({}, {})", n(out), n(lhs), op(rhs))
            }
            Instruction::Select { out, cond, a, b } => {
                format!("{} = {name}({}, {}, {})", n(out), n(cond), n(a), op(b))
            }
            Instruction::Arange {
                out,
                layout,
                dim,
                offset,
            } => format!(
                "{} = {name}({}, {dim}, {})",
                n(out),
                layout.to_expr(),
                e(offset)
            ),
            Instruction::Cast {
                out,
                x,
                dtype,
                layout,
                ..
            } => match layout {
                None => format!("{} = {name}<{dtype}>({})", n(out), n(x)),
                Some(l) => format!("{} = {name}<{dtype}>({}, {})", n(out), n(x), l.to_expr()),
            },
            Instruction::View {
                out,
                x,
                dtype,
                layout,
            } => format!(
                "{} = {name}<{dtype}>({}, {})",
                n(out),
                n(x),
                layout.to_expr()
            ),
            Instruction::Dot { out, a, b, c } | Instruction::DotAsync { out, a, b, c } => {
                format!("{} = {name}({}, {}, {})", n(out), n(a), n(b), n(c))
            }
            Instruction::PlaneDot { out, w, a, dim } => {
                format!("{} = {name}({}, {}, {dim})", n(out), n(w), n(a))
            }
            Instruction::DotWait { n: k } => format!("{name}({k})"),
            Instruction::Print { label, x } => format!("{name}({label:?}, {})", op(x)),
            Instruction::Reduce { out, x, dim, .. } | Instruction::Scan { out, x, dim, .. } => {
                format!("{} = {name}({}, {dim})", n(out), n(x))
            }
            Instruction::CopyAsyncCommitGroup
            | Instruction::Synchronize
            | Instruction::Fence
            | Instruction::GridDependency(_)
            | Instruction::Exit => {
                format!("{name}()")
            }
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => self.addressing_text(i),
        }
    }

    fn write_block(&self, f: &mut fmt::Formatter<'_>, body: &[Stmt], depth: usize) -> fmt::Result {
        let pad = "    ".repeat(depth);
        for s in body {
            match &s.kind {
                StmtKind::Let { var, value } => writeln!(
                    f,
                    "{pad}let {} = {};",
                    self.var_name(*var),
                    self.expr_text(value)
                )?,
                StmtKind::Assign { var, value } => writeln!(
                    f,
                    "{pad}{} = {};",
                    self.var_name(*var),
                    self.expr_text(value)
                )?,
                StmtKind::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    writeln!(f, "{pad}if {} {{", self.expr_text(cond))?;
                    self.write_block(f, then_body, depth + 1)?;
                    if !else_body.is_empty() {
                        writeln!(f, "{pad}}} else {{")?;
                        self.write_block(f, else_body, depth + 1)?;
                    }
                    writeln!(f, "{pad}}}")?
                }
                StmtKind::For {
                    var,
                    start,
                    end,
                    step,
                    unroll,
                    body,
                } => {
                    match unroll {
                        Unroll::Auto => {}
                        Unroll::Full => writeln!(f, "{pad}#[unroll]")?,
                        Unroll::Factor(n) => writeln!(f, "{pad}#[unroll({n})]")?,
                    }
                    let range = format!("{}..{}", self.expr_text(start), self.expr_text(end));
                    let range = if *step == 1 {
                        range
                    } else {
                        format!("({range}).step_by({step})")
                    };
                    writeln!(f, "{pad}for {} in {range} {{", self.var_name(*var))?;
                    self.write_block(f, body, depth + 1)?;
                    writeln!(f, "{pad}}}")?
                }
                StmtKind::While { cond, body } => {
                    writeln!(f, "{pad}while {} {{", self.expr_text(cond))?;
                    self.write_block(f, body, depth + 1)?;
                    writeln!(f, "{pad}}}")?
                }
                StmtKind::Specialize { roles } => {
                    writeln!(f, "{pad}specialize! {{")?;
                    for r in roles {
                        let regs = match r.registers {
                            Some(n) => format!(", registers = {n}"),
                            None => String::new(),
                        };
                        writeln!(f, "{pad}    role(warps = {}{regs}) => {{", r.warps)?;
                        self.write_block(f, &r.body, depth + 2)?;
                        writeln!(f, "{pad}    }}")?;
                    }
                    writeln!(f, "{pad}}}")?
                }
                StmtKind::Instr(i) => writeln!(f, "{pad}{};", self.instruction_text(i))?,
            }
        }
        Ok(())
    }
}

/// The program as a `#[kernel]`-like listing: signature, grid and threads, then the body with
/// every tensor's type at its definition.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| {
                let ty = match self.ty(p.var) {
                    VarType::Pointer {
                        dtype,
                        mutable: false,
                    } => format!("Global<{dtype}>"),
                    VarType::Pointer {
                        dtype,
                        mutable: true,
                    } => format!("GlobalMut<{dtype}>"),
                    VarType::Scalar(s) => s.name().to_string(),
                    other => other.describe().to_string(),
                };
                format!("{}: {ty}", self.var_name(p.var))
            })
            .collect();
        let grid: Vec<String> = self.grid.iter().map(|e| self.expr_text(e)).collect();
        writeln!(
            f,
            "// grid = [{}], {} threads ({} warps)",
            grid.join(", "),
            self.num_threads,
            self.num_threads / 32
        )?;
        writeln!(f, "fn {}({}) {{", self.name, params.join(", "))?;
        self.write_block(f, &self.body, 1)?;
        writeln!(f, "}}")?;
        // Tensor types, which the listing leaves implicit.
        let mut types = Vec::new();
        for v in &self.vars {
            let ty = match &v.ty {
                VarType::Register(r) => {
                    format!(
                        "register {}{:?} {}",
                        r.dtype,
                        r.layout.shape(),
                        r.layout.to_expr()
                    )
                }
                VarType::Shared(s) => format!("shared {}{:?}", s.dtype, s.layout.shape),
                VarType::Global(g) => format!(
                    "global {}[{}]",
                    g.dtype,
                    g.shape
                        .iter()
                        .map(|e| self.expr_text(e))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => continue,
            };
            types.push(format!("//   {}: {ty}", v.name));
        }
        if !types.is_empty() {
            writeln!(f, "// tensors:")?;
            for t in types {
                writeln!(f, "{t}")?;
            }
        }
        Ok(())
    }
}

impl Instruction {
    /// The variables the instruction reads (tensors, pointers and scalar operands' variables),
    /// in operand order; a variable read twice is listed twice.
    pub fn inputs(&self) -> Vec<VarId> {
        let mut out = Vec::new();
        let exprs = |xs: &[Expr], out: &mut Vec<VarId>| {
            for x in xs {
                x.visit_vars(&mut |v| out.push(v));
            }
        };
        let operand = |o: &Operand, out: &mut Vec<VarId>| match o {
            Operand::Tensor(t) => out.push(*t),
            Operand::Scalar(e) => e.visit_vars(&mut |v| out.push(v)),
            Operand::Imm(_) => {}
        };
        match self {
            Instruction::BlockIndices { .. }
            | Instruction::AllocateShared { .. }
            | Instruction::AllocateRegister { .. }
            | Instruction::CopyAsyncCommitGroup
            | Instruction::CopyAsyncWaitGroup { .. }
            | Instruction::TmaStoreWait
            | Instruction::DotWait { .. }
            | Instruction::Mbarriers { .. }
            | Instruction::Synchronize
            | Instruction::Fence
            | Instruction::GridDependency(_)
            | Instruction::Exit => {}
            Instruction::TmaLoad {
                dst,
                src,
                src_offset,
                barrier,
                index,
            } => {
                out.push(*src);
                out.push(*dst);
                exprs(src_offset, &mut out);
                out.push(*barrier);
                exprs(std::slice::from_ref(index), &mut out);
            }
            Instruction::MbarrierArrive { barrier, index } => {
                out.push(*barrier);
                exprs(std::slice::from_ref(index), &mut out);
            }
            Instruction::MbarrierWait {
                barrier,
                index,
                phase,
            } => {
                out.push(*barrier);
                exprs(&[index.clone(), phase.clone()], &mut out);
            }
            Instruction::AllocateGlobal { shape, .. } => exprs(shape, &mut out),
            Instruction::ViewGlobal { ptr, shape, .. } => {
                out.push(*ptr);
                exprs(shape, &mut out);
            }
            Instruction::LoadGlobal { src, offset, .. }
            | Instruction::LoadShared { src, offset, .. }
            | Instruction::SliceShared { src, offset, .. } => {
                out.push(*src);
                exprs(offset, &mut out);
            }
            Instruction::PermuteShared { src, .. } => out.push(*src),
            // The destination of a store is read too: it names the tensor written into.
            Instruction::StoreGlobal { src, dst, offset }
            | Instruction::StoreShared { src, dst, offset } => {
                out.push(*src);
                out.push(*dst);
                exprs(offset, &mut out);
            }
            Instruction::CopyAsync {
                dst,
                src,
                src_offset,
            } => {
                out.push(*src);
                out.push(*dst);
                exprs(src_offset, &mut out);
            }
            Instruction::TmaStore {
                src,
                dst,
                dst_offset,
            } => {
                out.push(*src);
                out.push(*dst);
                exprs(dst_offset, &mut out);
            }
            Instruction::Binary { lhs, rhs, .. } | Instruction::Compare { lhs, rhs, .. } => {
                out.push(*lhs);
                operand(rhs, &mut out);
            }
            Instruction::Select { cond, a, b, .. } => {
                out.push(*cond);
                out.push(*a);
                operand(b, &mut out);
            }
            Instruction::Arange { offset, .. } => exprs(std::slice::from_ref(offset), &mut out),
            Instruction::MulAdd { a, b, c, .. } => {
                out.push(*a);
                operand(b, &mut out);
                out.push(*c);
            }
            Instruction::Neg { x, .. }
            | Instruction::Unary { x, .. }
            | Instruction::Cast { x, .. }
            | Instruction::View { x, .. } => out.push(*x),
            Instruction::Dot { a, b, c, .. } | Instruction::DotAsync { a, b, c, .. } => {
                out.extend([*a, *b, *c])
            }
            Instruction::Reduce { x, .. } | Instruction::Scan { x, .. } => out.push(*x),
            Instruction::PlaneDot { w, a, .. } => out.extend([*w, *a]),
            Instruction::Print { x, .. } => operand(x, &mut out),
            Instruction::Item { .. }
            | Instruction::Gather { .. }
            | Instruction::Lookup { .. }
            | Instruction::GatherRows { .. }
            | Instruction::Scatter { .. }
            | Instruction::ScatterRows { .. }
            | Instruction::Atomic { .. } => out = self.addressing_inputs(),
        }
        out
    }

    /// The variables the instruction defines or overwrites (stores into memory define
    /// nothing: their destination is an input).
    pub fn outputs(&self) -> Vec<VarId> {
        self.output_types(&|_| VarType::Unknown)
            .into_iter()
            .map(|(v, _)| v)
            .collect()
    }
}
