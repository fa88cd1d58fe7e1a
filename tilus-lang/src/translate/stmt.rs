//! Statements: `let`, assignment, `if`/`else`, `for x in a..b`, `while`, `specialize! { .. }`
//! (in `specialize.rs`), and instruction calls whose result is discarded.

use syn::{BinOp, Expr as SynExpr, Pat, RangeLimits, Stmt};
use tilus_core::ir::{Expr, ProgramBuilder, ScalarType, Unroll, VarType};

use super::*;

/// Longest `#[unroll]` loop over constant bounds that the translator writes out itself; longer
/// ones become `#pragma unroll` loops.
const MAX_TRANSLATOR_UNROLL: i64 = 16;

impl Translator<'_, '_> {
    pub(super) fn stmt(&mut self, b: &mut ProgramBuilder, stmt: &Stmt) {
        match stmt {
            Stmt::Local(local) => self.local(b, local),
            Stmt::Expr(e, _) => {
                let _ = self.stmt_expr(b, e);
            }
            // Helpers were declared before the body was translated; nested ones are not.
            Stmt::Item(syn::Item::Fn(_)) if self.scopes.len() == 2 && self.helper_depth == 0 => {}
            Stmt::Item(item) => {
                let _ = self.err(
                    item,
                    "the only items in a kernel are helper `fn`s at the top level of its body",
                );
            }
            Stmt::Macro(m) if specialize::is_specialize(&m.mac) => {
                if let Some(a) = m.attrs.first() {
                    let _ = self.err(a, "attributes on `specialize!` are not supported");
                }
                let _ = self.specialize(b, &m.mac);
            }
            Stmt::Macro(m) => {
                let name = m.mac.path.segments.last().map(|s| s.ident.to_string());
                let msg = match name.as_deref() {
                    Some("layout") => "a `layout!(..)` on its own does nothing; bind it with `let` or pass it to an instruction".to_string(),
                    Some(n) => format!("unknown macro `{n}!`; a kernel has `layout!(..)`, the statement `specialize! {{ .. }}`, and `print(..)` for debugging"),
                    None => "unknown macro".to_string(),
                };
                let _ = self.err(&m.mac, msg);
            }
        }
    }

    pub(super) fn block(&mut self, b: &mut ProgramBuilder, block: &syn::Block) {
        self.scopes.push(Vec::new());
        for stmt in &block.stmts {
            self.stmt(b, stmt);
        }
        self.scopes.pop();
    }

    fn local(&mut self, b: &mut ProgramBuilder, local: &syn::Local) {
        let Some(init) = &local.init else {
            let _ = self.err(local, "a `let` in a kernel needs a value");
            self.poison_pattern(&local.pat);
            return;
        };
        if let Some((_, diverge)) = &init.diverge {
            let _ = self.err(&**diverge, "`let .. else` is not supported in a kernel");
        }
        let expr = &*init.expr;
        let mut pat = &local.pat;
        if let Pat::Type(pt) = pat {
            let _ = self.err(
                &*pt.ty,
                "remove the type annotation: types in a kernel are inferred from the instructions",
            );
            pat = &pt.pat;
        }
        match pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                let name = pi.ident.to_string();
                let mutable = pi.mutability.is_some();
                let site = self.site(expr);
                b.set_span(site);
                let allow = self.allow_replicated;
                self.allow_replicated |= replicated::allows_replicated(&local.attrs);
                let value = self.value(b, expr, DestHint::New(name.clone()));
                self.allow_replicated = allow;
                let value = value.map(|v| self.unalias(b, expr, &name, mutable, v));
                let binding = match value {
                    // A constant `if` chose `()`: the name is absent in this configuration.
                    Ok(Value::Unit) if is_if(expr) => Binding::Absent,
                    Ok(v) => self.binding_for(b, local, &name, mutable, v),
                    Err(Reported) => Binding::Poisoned,
                };
                let binding = match binding {
                    Binding::Layout(l, t, _) => {
                        Binding::Layout(l, t, Some(notes::defined_at(&name, expr)))
                    }
                    other => other,
                };
                self.bind(&name, binding);
            }
            Pat::Wild(_) => {
                let _ = self.value(b, expr, DestHint::Temp);
            }
            Pat::Slice(_) | Pat::Tuple(_) => self.destructure(b, pat, expr),
            other => {
                let _ = self.err(other, "expected a variable name");
            }
        }
    }

    /// `let [mut] a = b;` of a register tensor `b` where `a` or `b` is mutable: a copy (a
    /// `view` of the same dtype and layout, which the CUDA compiler turns into renaming), so
    /// that a later `a = ..` or `b = ..` writes one of them, as in Rust (binding `a` to `b`'s
    /// registers made `let cur = next; next = load(..)` change `cur` too).
    fn unalias(
        &mut self,
        b: &mut ProgramBuilder,
        expr: &SynExpr,
        name: &str,
        mutable: bool,
        v: Value,
    ) -> Value {
        let SynExpr::Path(p) = expr else { return v };
        let Value::Tensor(var) = v else { return v };
        let source_mutable = p.path.get_ident().is_some_and(|id| {
            matches!(
                self.lookup(&id.to_string()),
                Some(Binding::Tensor { mutable: true, .. })
            )
        });
        match b.ty(var) {
            VarType::Register(r) if mutable || source_mutable => {
                let n = self.unique(name);
                Value::Tensor(b.view(n.as_str(), var, r.dtype, r.layout.clone()))
            }
            _ => v,
        }
    }

    /// What `let [mut] name = v` binds.
    fn binding_for<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        local: &T,
        name: &str,
        mutable: bool,
        v: Value,
    ) -> Binding {
        match v {
            Value::Scalar(Expr::Int(c), _) if !mutable => Binding::Const(c),
            Value::Scalar(Expr::Bool(c), _) if !mutable => Binding::ConstBool(c),
            Value::Scalar(e, ty) => {
                let n = self.unique(name);
                Binding::Scalar {
                    var: b.let_(&n, ty, e),
                    ty,
                    mutable,
                }
            }
            Value::Float(f) if !mutable => Binding::Float(f),
            // A mutable float is an f32 variable.
            Value::Float(f) => {
                let n = self.unique(name);
                Binding::Scalar {
                    var: b.let_(&n, ScalarType::F32, Expr::f32(f as f32)),
                    ty: ScalarType::F32,
                    mutable,
                }
            }
            Value::Tensor(var) => Binding::Tensor { var, mutable },
            Value::Pointer(var) => Binding::Pointer(var),
            Value::Layout(l, t) => Binding::Layout(l, t, None),
            Value::Array(a) => Binding::Array(a),
            Value::Closure(h) => Binding::Closure(h),
            Value::Tuple(items) => {
                let _ = self.err(
                    local,
                    format!("`{name}` would be bound to a tuple of {} values; destructure it: `let (a, b) = ..`", items.len()),
                );
                Binding::Poisoned
            }
            Value::Unit => {
                let _ = self.err(
                    local,
                    format!("`{name}` would be bound to nothing: this instruction has no result"),
                );
                Binding::Poisoned
            }
            Value::Poisoned => Binding::Poisoned,
        }
    }

    fn poison_pattern(&mut self, pat: &Pat) {
        match pat {
            Pat::Ident(pi) => self.bind(&pi.ident.to_string(), Binding::Poisoned),
            Pat::Type(pt) => self.poison_pattern(&pt.pat),
            Pat::Slice(s) => s.elems.iter().for_each(|p| self.poison_pattern(p)),
            Pat::Tuple(t) => t.elems.iter().for_each(|p| self.poison_pattern(p)),
            _ => {}
        }
    }

    /// `let [bi, bj] = block_indices();`
    fn destructure(&mut self, b: &mut ProgramBuilder, pat: &Pat, expr: &SynExpr) {
        let elems: Vec<&Pat> = match pat {
            Pat::Slice(s) => s.elems.iter().collect(),
            Pat::Tuple(t) => t.elems.iter().collect(),
            _ => Vec::new(),
        };
        let is_block_indices = matches!(expr, SynExpr::Call(c)
            if matches!(&*c.func, SynExpr::Path(p) if p.path.is_ident("block_indices")));
        if !is_block_indices {
            self.destructure_tuple(b, pat, &elems, expr);
            return;
        }
        if let SynExpr::Call(c) = expr {
            if !c.args.is_empty() {
                let _ = self.err(&c.args, "`block_indices()` takes no arguments");
            }
        }
        let mut names = Vec::new();
        for p in &elems {
            match p {
                Pat::Ident(pi) if pi.mutability.is_none() => names.push(pi.ident.to_string()),
                Pat::Wild(_) => names.push("_".to_string()),
                other => {
                    let _ = self.err(*other, "expected a name for a block index");
                    names.push("_".to_string());
                }
            }
        }
        let grid_rank = self.attr.grid.as_ref().map(|g| g.0.len()).unwrap_or(0);
        if grid_rank != 0 && names.len() != grid_rank {
            let _ = self.err(
                pat,
                format!(
                    "the grid has {grid_rank} dimension{}, so `block_indices()` gives {grid_rank} ind{}; found {} names",
                    if grid_rank == 1 { "" } else { "s" },
                    if grid_rank == 1 { "ex" } else { "ices" },
                    names.len()
                ),
            );
        }
        let site = self.site(expr);
        b.set_span(site);
        let unique: Vec<String> = names
            .iter()
            .map(|n| {
                if n == "_" {
                    self.unique("block_index")
                } else {
                    self.unique(n)
                }
            })
            .collect();
        let refs: Vec<&str> = unique.iter().map(|s| s.as_str()).collect();
        let vars = b.block_indices(&refs);
        for (name, var) in names.iter().zip(vars) {
            if name != "_" {
                self.bind(
                    name,
                    Binding::Scalar {
                        var,
                        ty: ScalarType::I32,
                        mutable: false,
                    },
                );
            }
        }
    }

    /// `let (a, b) = helper(..);`: bind each result of a helper.
    fn destructure_tuple(
        &mut self,
        b: &mut ProgramBuilder,
        pat: &Pat,
        elems: &[&Pat],
        expr: &SynExpr,
    ) {
        let site = self.site(expr);
        b.set_span(site);
        let items = match self.value(b, expr, DestHint::Temp) {
            Ok(Value::Tuple(items)) if items.len() == elems.len() => items,
            Ok(Value::Poisoned) | Err(Reported) => {
                self.poison_pattern(pat);
                return;
            }
            Ok(other) => {
                let found = self.describe(&other);
                let _ = self.err(
                    pat,
                    format!("this pattern takes {} values, found {found} (destructuring is for `block_indices()` and helpers that return a tuple)", elems.len()),
                );
                self.poison_pattern(pat);
                return;
            }
        };
        // A `()` item of a constant `if`'s tuple is absent, as `let x = if C { .. } else { () }`.
        let from_if = is_if(expr);
        for (p, v) in elems.iter().zip(items) {
            match p {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    let name = pi.ident.to_string();
                    let binding = match v {
                        Value::Unit if from_if => Binding::Absent,
                        v => self.binding_for(b, *p, &name, pi.mutability.is_some(), v),
                    };
                    self.bind(&name, binding);
                }
                Pat::Wild(_) => {}
                other => {
                    let _ = self.err(*other, "expected a variable name");
                }
            }
        }
    }

    /// `(a, b) = helper(..);`: assign each result of a helper to an existing variable.
    fn assign_tuple(
        &mut self,
        b: &mut ProgramBuilder,
        whole: &SynExpr,
        left: &syn::ExprTuple,
        right: &SynExpr,
    ) -> R<()> {
        let site = self.site(right);
        b.set_span(site);
        let items = match self.value(b, right, DestHint::Temp)? {
            Value::Tuple(items) if items.len() == left.elems.len() => items,
            Value::Poisoned => return Err(Reported),
            other => {
                let found = self.describe(&other);
                return Err(self.err(
                    right,
                    format!("{} variables are assigned from {found}", left.elems.len()),
                ));
            }
        };
        let mut failed = false;
        for (target, v) in left.elems.iter().zip(items) {
            if matches!(target, SynExpr::Infer(_)) {
                continue;
            }
            if self.assign_value(b, whole, target, v).is_err() {
                failed = true;
            }
        }
        if failed {
            Err(Reported)
        } else {
            Ok(())
        }
    }

    /// `name = v` for a value already computed (one element of a tuple assignment).
    fn assign_value(
        &mut self,
        b: &mut ProgramBuilder,
        whole: &SynExpr,
        target: &SynExpr,
        v: Value,
    ) -> R<()> {
        let name = match target {
            SynExpr::Path(p) if p.path.get_ident().is_some() => p
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default(),
            _ => return Err(self.err(target, "only variables can be assigned")),
        };
        match (self.lookup(&name).cloned(), v) {
            (None, _) => Err(self.err(target, format!("cannot find `{name}` in this kernel"))),
            (Some(Binding::Poisoned), _) | (_, Value::Poisoned) => Err(Reported),
            (
                Some(
                    Binding::Tensor { mutable: false, .. } | Binding::Scalar { mutable: false, .. },
                ),
                _,
            ) => Err(self.immutable(target, &name)),
            (Some(Binding::Tensor { var, .. }), Value::Tensor(src)) => {
                if var == src {
                    Ok(())
                } else {
                    self.copy_tensor(b, whole, &name, var, src)
                }
            }
            (Some(Binding::Scalar { var, ty, .. }), Value::Scalar(e, t)) if t == ty => {
                let site = self.site(whole);
                b.set_span(site);
                b.assign(var, e);
                Ok(())
            }
            // An i32 assigned to an i64 variable is promoted exactly.
            (
                Some(Binding::Scalar {
                    var,
                    ty: ScalarType::I64,
                    ..
                }),
                Value::Scalar(e, ScalarType::I32),
            ) => {
                let site = self.site(whole);
                b.set_span(site);
                b.assign(var, super::expr::widen(e));
                Ok(())
            }
            (
                Some(Binding::Scalar {
                    var,
                    ty: ScalarType::F32,
                    ..
                }),
                Value::Float(f),
            ) => {
                let site = self.site(whole);
                b.set_span(site);
                b.assign(var, Expr::f32(f as f32));
                Ok(())
            }
            (_, other) => {
                let found = self.describe(&other);
                Err(self.err(target, format!("`{name}` cannot be assigned {found}")))
            }
        }
    }

    /// An expression in statement position.
    pub(super) fn stmt_expr(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<()> {
        match e {
            SynExpr::Assign(a) => match &*a.left {
                SynExpr::Tuple(t) => self.assign_tuple(b, e, t, &a.right),
                _ => self.assign(b, e, &a.left, None, &a.right),
            },
            SynExpr::Binary(bin)
                if matches!(
                    bin.op,
                    BinOp::AddAssign(_)
                        | BinOp::SubAssign(_)
                        | BinOp::MulAssign(_)
                        | BinOp::DivAssign(_)
                        | BinOp::RemAssign(_)
                ) =>
            {
                self.assign(b, e, &bin.left, Some(&bin.op), &bin.right)
            }
            SynExpr::ForLoop(f) => self.for_loop(b, f),
            SynExpr::While(w) => {
                if let Some(l) = &w.label {
                    return Err(self.err(l, "loop labels are not supported"));
                }
                let site = self.site(&*w.cond);
                b.set_span(site);
                let cond = self.scalar(b, &w.cond, ScalarType::Bool)?;
                if cond == Expr::Bool(false) {
                    return Ok(());
                }
                b.while_(cond, |b| self.block(b, &w.body));
                Ok(())
            }
            SynExpr::If(i) => self.if_stmt(b, i),
            SynExpr::Block(blk) => {
                if blk.label.is_some() {
                    return Err(self.err(e, "labelled blocks are not supported"));
                }
                self.block(b, &blk.block);
                Ok(())
            }
            SynExpr::Loop(_) => Err(self.err(e, "`loop` is not supported; use `while` or `for`")),
            SynExpr::Return(_) => Err(self.err(
                e,
                "`return` is not supported; use `exit()` to end the block",
            )),
            SynExpr::Break(_) | SynExpr::Continue(_) => {
                Err(self.err(e, "`break` and `continue` are not supported in a kernel"))
            }
            SynExpr::Macro(m) if specialize::is_specialize(&m.mac) => {
                if let Some(a) = m.attrs.first() {
                    let _ = self.err(a, "attributes on `specialize!` are not supported");
                }
                self.specialize(b, &m.mac)
            }
            SynExpr::Macro(_) => {
                let _ = self.value(b, e, DestHint::Temp);
                Ok(())
            }
            _ => {
                self.value(b, e, DestHint::Temp)?;
                Ok(())
            }
        }
    }

    fn assign(
        &mut self,
        b: &mut ProgramBuilder,
        whole: &SynExpr,
        left: &SynExpr,
        compound: Option<&BinOp>,
        right: &SynExpr,
    ) -> R<()> {
        let name = match left {
            SynExpr::Path(p) if p.path.get_ident().is_some() => p
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default(),
            _ => return Err(self.err(left, "only variables can be assigned")),
        };
        let binding = match self.lookup(&name).cloned() {
            Some(bd) => bd,
            None => {
                self.value(b, left, DestHint::Temp)?;
                return Err(Reported);
            }
        };
        let site = self.site(right);
        b.set_span(site);
        match binding {
            Binding::Poisoned => Err(Reported),
            Binding::Scalar { var, ty, mutable } => {
                if !mutable {
                    return Err(self.immutable(left, &name));
                }
                let rhs = self.scalar(b, right, ty)?;
                let value = match compound {
                    None => rhs,
                    Some(op) => {
                        let op = super::expr::compound_op(op);
                        self.scalar_binary(whole, op, (Expr::Var(var), ty), (rhs, ty))?
                            .0
                    }
                };
                let site = self.site(whole);
                b.set_span(site);
                b.assign(var, value);
                Ok(())
            }
            Binding::Tensor { var, mutable } => {
                if !mutable {
                    return Err(self.immutable(left, &name));
                }
                match compound {
                    None => match self.value(b, right, DestHint::Existing(var))? {
                        Value::Tensor(v) if v == var => Ok(()),
                        Value::Poisoned => Err(Reported),
                        Value::Tensor(v) => self.copy_tensor(b, whole, &name, var, v),
                        other => {
                            let found = self.describe(&other);
                            Err(self.err(right, format!("`{name}` is a tensor; found {found}")))
                        }
                    },
                    Some(op) => {
                        let op = super::expr::compound_op(op);
                        let v = self.value(b, right, DestHint::Temp)?;
                        let operand = self.operand(right, v)?;
                        self.element(b, whole, op, var, operand, DestHint::Existing(var))?;
                        Ok(())
                    }
                }
            }
            Binding::Const(_) | Binding::ConstBool(_) | Binding::Float(_) => {
                if self.sig.tile_names().any(|t| *t == name) {
                    Err(self.err(left, format!("cannot assign to tile parameter `{name}`")))
                } else {
                    Err(self.immutable(left, &name))
                }
            }
            _ => Err(self.err(left, format!("cannot assign to `{name}`"))),
        }
    }

    /// `x = y` for two register tensors of one type: a register copy (a `view` with the same
    /// dtype and layout, which the CUDA compiler turns into renaming).
    fn copy_tensor(
        &mut self,
        b: &mut ProgramBuilder,
        whole: &SynExpr,
        name: &str,
        dst: VarId,
        src: VarId,
    ) -> R<()> {
        let (to, from) = (b.ty(dst), b.ty(src));
        match (&to, &from) {
            (VarType::Register(t), VarType::Register(f)) if t == f => {
                let site = self.site(whole);
                b.set_span(site);
                b.view(dst, src, t.dtype, t.layout.clone());
                Ok(())
            }
            (VarType::Register(t), VarType::Register(f)) => Err(self.err(
                whole,
                format!(
                    "`{name}` is a {} tensor in layout {}, the value a {} tensor in layout {}; \
                     assign a value of the same dtype and layout (`cast::<T>(x)` converts)",
                    t.dtype,
                    t.layout.to_expr(),
                    f.dtype,
                    f.layout.to_expr()
                ),
            )),
            _ => Err(self.err(
                whole,
                format!("only register tensors can be assigned; `{name}` is not one"),
            )),
        }
    }

    fn immutable(&mut self, left: &SynExpr, name: &str) -> Reported {
        self.err(
            left,
            format!("cannot assign twice to immutable variable `{name}`; declare it with `let mut {name}`"),
        )
    }

    fn for_loop(&mut self, b: &mut ProgramBuilder, f: &syn::ExprForLoop) -> R<()> {
        if let Some(l) = &f.label {
            return Err(self.err(l, "loop labels are not supported"));
        }
        let name = match &*f.pat {
            Pat::Ident(pi) if pi.mutability.is_none() && pi.subpat.is_none() => {
                pi.ident.to_string()
            }
            Pat::Wild(_) => "_".to_string(),
            other => return Err(self.err(other, "expected a loop variable name")),
        };
        let unroll = self.unroll_hint(&f.attrs)?;
        // `(a..b).step_by(s)` with a constant step, or a plain range.
        let (range_expr, step) = match &*f.expr {
            SynExpr::MethodCall(m) if m.method == "step_by" => {
                if m.args.len() != 1 {
                    return Err(self.err(m, "`step_by` takes one step"));
                }
                let step = match self.const_int(&m.args[0]) {
                    Some(s) if s >= 1 => s as u32,
                    Some(s) => {
                        return Err(self.err(
                            &m.args[0],
                            format!("the step must be at least 1, found {s}"),
                        ))
                    }
                    None => {
                        return Err(self.err(
                            &m.args[0],
                            "the step must be a constant (a literal or tile parameter)",
                        ))
                    }
                };
                let mut inner = &*m.receiver;
                while let SynExpr::Paren(p) = inner {
                    inner = &p.expr;
                }
                (inner, step)
            }
            other => (other, 1),
        };
        let SynExpr::Range(range) = range_expr else {
            return Err(self.err(
                &*f.expr,
                "a kernel loops over a range: `for x in a..b` or `for x in (a..b).step_by(s)`",
            ));
        };
        let (Some(start), Some(end)) = (&range.start, &range.end) else {
            return Err(self.err(range, "the range needs a start and an end: `a..b`"));
        };
        let site = self.site(range);
        b.set_span(site);
        let s = self.loop_bound(b, start);
        let e = self.loop_bound(b, end);
        let (s, mut e) = (s?, e?);
        if let RangeLimits::Closed(_) = range.limits {
            e = self
                .scalar_binary(
                    range,
                    tilus_core::ir::BinaryOp::Add,
                    (e, ScalarType::I32),
                    (Expr::Int(1), ScalarType::I32),
                )?
                .0;
        }
        // Constant bounds: an empty range emits nothing, and `#[unroll]` over a short one
        // unrolls here, so each copy of the body sees its index as a constant (stage indices,
        // `if st < n` tests and shared offsets fold, as if the loop had been written out).
        if let (Expr::Int(lo), Expr::Int(hi)) = (&s, &e) {
            let (lo, hi) = (*lo as i64, *hi as i64);
            if lo >= hi {
                return Ok(());
            }
            let trips = (hi - lo + step as i64 - 1) / step as i64;
            if unroll == Unroll::Full && trips <= MAX_TRANSLATOR_UNROLL {
                for i in (lo..hi).step_by(step as usize) {
                    self.scopes.push(Vec::new());
                    if name != "_" {
                        self.bind(&name, Binding::Const(i as i32));
                    }
                    self.block(b, &f.body);
                    self.scopes.pop();
                }
                return Ok(());
            }
        }
        let var_name = if name == "_" {
            self.unique("iter")
        } else {
            self.unique(&name)
        };
        b.set_span(site);
        b.for_range_step(&var_name, s, e, step, unroll, |b, var| {
            self.scopes.push(Vec::new());
            if name != "_" {
                self.bind(
                    &name,
                    Binding::Scalar {
                        var,
                        ty: ScalarType::I32,
                        mutable: false,
                    },
                );
            }
            self.block(b, &f.body);
            self.scopes.pop();
        });
        Ok(())
    }

    /// `#[unroll]` (fully) or `#[unroll(n)]` on a `for` loop; other attributes are errors.
    fn unroll_hint(&mut self, attrs: &[syn::Attribute]) -> R<Unroll> {
        let mut hint = Unroll::Auto;
        for a in attrs {
            if !a.path().is_ident("unroll") {
                return Err(self.err(
                    a,
                    "the only attribute on a loop is `#[unroll]` or `#[unroll(n)]`",
                ));
            }
            hint = match &a.meta {
                syn::Meta::Path(_) => Unroll::Full,
                syn::Meta::List(l) => match l
                    .parse_args::<SynExpr>()
                    .ok()
                    .and_then(|e| self.const_int(&e))
                {
                    Some(n) if n >= 1 => Unroll::Factor(n as u32),
                    _ => {
                        return Err(
                            self.err(a, "`#[unroll(n)]` takes a constant factor of at least 1")
                        )
                    }
                },
                syn::Meta::NameValue(_) => {
                    return Err(self.err(a, "write `#[unroll]` or `#[unroll(n)]`"))
                }
            };
        }
        Ok(hint)
    }

    fn if_stmt(&mut self, b: &mut ProgramBuilder, i: &syn::ExprIf) -> R<()> {
        let site = self.site(&*i.cond);
        b.set_span(site);
        let cond = self.scalar(b, &i.cond, ScalarType::Bool)?;
        match cond {
            // A constant condition (it depends on tile parameters only): keep the taken branch.
            Expr::Bool(true) => self.block(b, &i.then_branch),
            Expr::Bool(false) => {
                if let Some((_, e)) = &i.else_branch {
                    self.else_branch(b, e);
                }
            }
            cond => {
                // The builder runs the two closures one after the other.
                let this = std::cell::RefCell::new(self);
                b.if_else(
                    cond,
                    |b| this.borrow_mut().block(b, &i.then_branch),
                    |b| {
                        if let Some((_, e)) = &i.else_branch {
                            this.borrow_mut().else_branch(b, e);
                        }
                    },
                )
            }
        }
        Ok(())
    }

    fn else_branch(&mut self, b: &mut ProgramBuilder, e: &SynExpr) {
        match e {
            SynExpr::Block(blk) => self.block(b, &blk.block),
            other => {
                let _ = self.stmt_expr(b, other);
            }
        }
    }
}

/// Whether `e` is an `if` expression (through parentheses).
fn is_if(e: &SynExpr) -> bool {
    match e {
        SynExpr::If(_) => true,
        SynExpr::Paren(p) => is_if(&p.expr),
        SynExpr::Group(g) => is_if(&g.expr),
        _ => false,
    }
}

impl Translator<'_, '_> {
    /// A bound of a `for` range: an `i32` (loop variables are `int` on the GPU).
    fn loop_bound(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<Expr> {
        match self.value(b, e, DestHint::Temp)? {
            Value::Scalar(x, ScalarType::I32) => Ok(x),
            Value::Scalar(_, ScalarType::I64) => Err(self.err(
                e,
                "loop bounds are i32: this bound is an i64 scalar; narrow it with `as i32`",
            )),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(e, format!("expected an i32 scalar, found {found}")))
            }
        }
    }
}
