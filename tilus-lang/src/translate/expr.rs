//! Expressions: scalar arithmetic (folded when constant), names, literals, arrays, and the
//! dispatch of calls, operators and macros to instructions.

use syn::{BinOp, Expr as SynExpr, Lit, UnOp};
use tilus_core::ir::{BinaryOp, ElementOp, Expr, Operand, ProgramBuilder, ScalarType, UnaryOp};

use super::*;

/// A destination for the builder (whose `Dest` is reached through `Into`).
pub enum Resolved {
    New(String),
    Existing(VarId),
}

/// Call a builder method with a [`Resolved`] destination in the place of `$d`.
macro_rules! build {
    ($dest:expr, |$d:ident| $call:expr) => {
        match $dest {
            $crate::translate::expr::Resolved::New($d) => $call,
            $crate::translate::expr::Resolved::Existing($d) => $call,
        }
    };
}
pub(crate) use build;

/// Evaluate a binary operator on `i32` constants; `Err` for overflow or division by zero. The
/// arithmetic is [`fold_i64`]'s, narrowed back (exact: no `i32` result is lost in 64 bits).
fn fold_int(op: BinaryOp, a: i32, b: i32) -> Result<Expr, String> {
    match fold_i64(op, a.into(), b.into()) {
        Ok(Expr::I64(v)) => i32::try_from(v)
            .map(Expr::Int)
            .map_err(|_| format!("`{a} {} {b}` overflows i32", op.symbol())),
        other => other,
    }
}

/// Evaluate a binary operator on `i64` constants (an `i32` side already widened); `Err` for
/// overflow or division by zero.
fn fold_i64(op: BinaryOp, a: i64, b: i64) -> Result<Expr, String> {
    use BinaryOp::*;
    let r = match op {
        Add => a.checked_add(b),
        Sub => a.checked_sub(b),
        Mul => a.checked_mul(b),
        Div | Mod if b == 0 => return Err("division by zero in a constant expression".into()),
        Div => a.checked_div(b),
        Mod => a.checked_rem(b),
        Min => Some(a.min(b)),
        Max => Some(a.max(b)),
        Lt => return Ok(Expr::Bool(a < b)),
        Le => return Ok(Expr::Bool(a <= b)),
        Gt => return Ok(Expr::Bool(a > b)),
        Ge => return Ok(Expr::Bool(a >= b)),
        Eq => return Ok(Expr::Bool(a == b)),
        Ne => return Ok(Expr::Bool(a != b)),
        And | Or => return Err("`&&` and `||` take booleans".into()),
        // The IR's own definition (`ir::eval`: shifts checked).
        BitAnd | BitOr | BitXor | Shl | Shr => {
            let e = Expr::binary(op, Expr::I64(a), Expr::I64(b));
            return e
                .eval_index(&mut |_| unreachable!("a constant expression has no variables"))
                .map(Expr::I64)
                .map_err(|e| e.to_string());
        }
    };
    r.map(Expr::I64)
        .ok_or_else(|| format!("`{a} {} {b}` overflows i64", op.symbol()))
}

/// The value of an integer constant of either width.
fn int_const(e: &Expr) -> Option<i64> {
    match e {
        Expr::Int(v) => Some(*v as i64),
        Expr::I64(v) => Some(*v),
        _ => None,
    }
}

/// The scalar operator of a Rust binary operator.
fn scalar_op(op: &BinOp) -> Option<BinaryOp> {
    Some(match op {
        BinOp::Add(_) | BinOp::AddAssign(_) => BinaryOp::Add,
        BinOp::Sub(_) | BinOp::SubAssign(_) => BinaryOp::Sub,
        BinOp::Mul(_) | BinOp::MulAssign(_) => BinaryOp::Mul,
        BinOp::Div(_) | BinOp::DivAssign(_) => BinaryOp::Div,
        BinOp::Rem(_) | BinOp::RemAssign(_) => BinaryOp::Mod,
        BinOp::Lt(_) => BinaryOp::Lt,
        BinOp::Le(_) => BinaryOp::Le,
        BinOp::Gt(_) => BinaryOp::Gt,
        BinOp::Ge(_) => BinaryOp::Ge,
        BinOp::Eq(_) => BinaryOp::Eq,
        BinOp::Ne(_) => BinaryOp::Ne,
        BinOp::And(_) => BinaryOp::And,
        BinOp::Or(_) => BinaryOp::Or,
        _ => return None,
    })
}

/// The operator of a compound assignment (`+=` is `+`).
pub fn compound_op(op: &BinOp) -> BinaryOp {
    scalar_op(op).unwrap_or(BinaryOp::Add)
}

impl Translator<'_, '_> {
    /// Combine two scalars, folding constants and checking operand types.
    pub(super) fn scalar_binary<T: ToTokens + 'static>(
        &mut self,
        node: &T,
        op: BinaryOp,
        (a, ta): (Expr, ScalarType),
        (b, tb): (Expr, ScalarType),
    ) -> R<(Expr, ScalarType)> {
        use BinaryOp::*;
        let logical = matches!(op, And | Or);
        let equality = matches!(op, Eq | Ne);
        let float = ta == ScalarType::F32 && tb == ScalarType::F32 && op != Mod;
        let int = |t: ScalarType| matches!(t, ScalarType::I32 | ScalarType::I64);
        // An i32 mixed with an i64 is promoted to i64 (exactly; the IR's rule).
        let wide = int(ta) && int(tb) && (ta == ScalarType::I64 || tb == ScalarType::I64);
        let ok = if logical {
            ta == ScalarType::Bool && tb == ScalarType::Bool
        } else if equality {
            ta == tb || wide
        } else {
            float || (int(ta) && int(tb))
        };
        if !ok {
            let want = if logical {
                "booleans".to_string()
            } else if op == Mod {
                "integer scalars (i32 or i64)".to_string()
            } else if ta != tb && ta != ScalarType::Bool && tb != ScalarType::Bool {
                format!(
                    "two integer (i32/i64) or two f32 scalars, found {} and {}; convert one with `as f32` or `as i32`",
                    ta.name(),
                    tb.name()
                )
            } else {
                "two integer (i32/i64) or two f32 scalars".to_string()
            };
            return Err(self.err(node, format!("`{}` takes {want}", op.symbol())));
        }
        let ty = if op.yields_bool() {
            ScalarType::Bool
        } else if float {
            ScalarType::F32
        } else if wide {
            ScalarType::I64
        } else {
            ScalarType::I32
        };
        let e = match (&a, &b) {
            (Expr::Int(x), Expr::Int(y)) => fold_int(op, *x, *y).map_err(|m| self.err(node, m))?,
            (Expr::Int(_) | Expr::I64(_), Expr::Int(_) | Expr::I64(_)) => {
                let (x, y) = (int_const(&a).unwrap_or(0), int_const(&b).unwrap_or(0));
                fold_i64(op, x, y).map_err(|m| self.err(node, m))?
            }
            (Expr::Bool(x), Expr::Bool(y)) => Expr::Bool(match op {
                And => *x && *y,
                Or => *x || *y,
                Eq => x == y,
                _ => x != y,
            }),
            // Short-circuit constants: `false && x`, `true || x`.
            (Expr::Bool(false), _) if op == And => Expr::Bool(false),
            (Expr::Bool(true), _) if op == Or => Expr::Bool(true),
            _ => Expr::binary(op, a, b),
        };
        Ok((e, ty))
    }

    /// Translate `e` as a scalar of type `want`.
    pub(super) fn scalar(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        want: ScalarType,
    ) -> R<Expr> {
        match self.value(b, e, DestHint::Temp)? {
            Value::Scalar(x, ty) if ty == want => Ok(x),
            // An i32 where an i64 is wanted: the exact promotion.
            Value::Scalar(x, ScalarType::I32) if want == ScalarType::I64 => Ok(widen(x)),
            // A float constant where an f32 is wanted (`eps = 1e-6`).
            Value::Float(v) if want == ScalarType::F32 => Ok(Expr::f32(v as f32)),
            Value::Poisoned => Err(Reported),
            other => {
                let want = match want {
                    ScalarType::I32 => "an i32 scalar",
                    ScalarType::Bool => "a boolean condition",
                    ScalarType::F32 => "an f32 scalar",
                    ScalarType::I64 => "an i64 scalar",
                };
                let found = self.describe(&other);
                Err(self.err(e, format!("expected {want}, found {found}")))
            }
        }
    }

    pub(super) fn describe(&self, v: &Value) -> String {
        match v {
            Value::Scalar(_, ScalarType::I32) => "an i32 scalar".into(),
            Value::Scalar(_, ScalarType::Bool) => "a boolean".into(),
            Value::Scalar(_, ScalarType::F32) => "an f32 scalar".into(),
            Value::Scalar(_, ScalarType::I64) => "an i64 scalar".into(),
            Value::Float(_) => "a floating-point constant".into(),
            Value::Tensor(_) => "a tensor".into(),
            Value::Pointer(_) => "a pointer parameter".into(),
            Value::Layout(..) => "a layout".into(),
            Value::Array(_) => "an array".into(),
            Value::Tuple(v) => format!("a tuple of {} values", v.len()),
            Value::Closure(_) => "a closure".into(),
            Value::Unit => "an instruction with no result".into(),
            Value::Poisoned => "an undefined value".into(),
        }
    }

    /// A compile-time integer, without reporting anything when `e` is not one.
    pub(super) fn const_int(&self, e: &SynExpr) -> Option<i32> {
        match e {
            SynExpr::Lit(l) => match &l.lit {
                // An `i64` literal is a run-time-typed constant, not a tile parameter's value.
                Lit::Int(i) if i.suffix() == "i64" => None,
                Lit::Int(i) => i.base10_parse().ok(),
                _ => None,
            },
            SynExpr::Paren(p) => self.const_int(&p.expr),
            SynExpr::Group(g) => self.const_int(&g.expr),
            SynExpr::Path(p) => {
                if let Some(bits) = self.dtype_bits_path(&p.path) {
                    return Some(bits);
                }
                match self.lookup(&p.path.get_ident()?.to_string())? {
                    Binding::Const(v) => Some(*v),
                    _ => None,
                }
            }
            SynExpr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
                self.const_int(&u.expr)?.checked_neg()
            }
            SynExpr::Binary(bin) => {
                if let Some(bits) = super::math::bit_op(&bin.op) {
                    let a = self.const_int(&bin.left)?;
                    let c = self.const_int(&bin.right)?;
                    return super::math::fold_bits(bits, a, c).ok();
                }
                let op = scalar_op(&bin.op)?;
                let a = self.const_int(&bin.left)?;
                let c = self.const_int(&bin.right)?;
                match fold_int(op, a, c).ok()? {
                    Expr::Int(v) => Some(v),
                    _ => None,
                }
            }
            SynExpr::Call(c) => {
                let name = match &*c.func {
                    SynExpr::Path(p) => p.path.get_ident()?.to_string(),
                    _ => return None,
                };
                if c.args.len() != 2 {
                    return None;
                }
                let a = self.const_int(&c.args[0])?;
                let d = self.const_int(&c.args[1])?;
                match name.as_str() {
                    "min" => Some(a.min(d)),
                    "max" => Some(a.max(d)),
                    "cdiv" if d != 0 => a.checked_add(d - 1).map(|s| s / d),
                    "gcd" => Some(super::instr::gcd(a, d)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// `W::BITS` / `i6::BITS`: the width of a dtype.
    fn dtype_bits_path(&self, path: &syn::Path) -> Option<i32> {
        if path.segments.len() != 2 || path.segments[1].ident != "BITS" {
            return None;
        }
        let first = path.segments[0].ident.to_string();
        let dtype = match self.lookup(&first) {
            Some(Binding::DType(d)) => *d,
            _ => crate::dtypes::parse(&first).ok()?,
        };
        Some(dtype.bits() as i32)
    }

    /// Translate an expression. `dest` says where a tensor result goes when `e` is an
    /// instruction.
    pub(super) fn value(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        dest: DestHint,
    ) -> R<Value> {
        match e {
            SynExpr::Lit(l) => match &l.lit {
                Lit::Int(i) => {
                    if !matches!(i.suffix(), "" | "i32" | "i64") {
                        return Err(self.err(e, "integer scalars are `i32` or `i64`"));
                    }
                    // An unsuffixed literal past the i32 range is an i64 (`3000000000`).
                    let wide = i.suffix() == "i64"
                        || (i.suffix().is_empty() && i.base10_parse::<i32>().is_err());
                    if wide {
                        return match i.base10_parse::<i64>() {
                            Ok(v) => Ok(Value::Scalar(Expr::I64(v), ScalarType::I64)),
                            Err(_) => Err(self.err(e, "integer literal out of range for i64")),
                        };
                    }
                    match i.base10_parse::<i32>() {
                        Ok(v) => Ok(Value::Scalar(Expr::Int(v), ScalarType::I32)),
                        Err(_) => Err(self.err(e, "integer literal out of range for i32")),
                    }
                }
                Lit::Float(f) => match f.base10_parse::<f64>() {
                    Ok(v) => Ok(Value::Float(v)),
                    Err(err) => Err(self.err(e, err.to_string())),
                },
                Lit::Bool(v) => Ok(Value::Scalar(Expr::Bool(v.value), ScalarType::Bool)),
                _ => Err(self.err(
                    e,
                    "only integer, float and boolean literals are allowed here",
                )),
            },
            SynExpr::Paren(p) => self.value(b, &p.expr, dest),
            SynExpr::Group(g) => self.value(b, &g.expr, dest),
            SynExpr::Path(p) => self.path_value(p),
            SynExpr::Binary(bin) => self.binary(b, bin, dest),
            SynExpr::Unary(u) => self.unary(b, u, dest),
            SynExpr::Call(c) => self.call(b, c, dest),
            SynExpr::MethodCall(m) => self.method_call(b, m, dest),
            SynExpr::Macro(m) => {
                let (l, text) = self.layout_macro(&m.mac)?;
                Ok(Value::Layout(l, text))
            }
            SynExpr::Array(a) => {
                let mut out = Vec::new();
                let mut failed = false;
                for elem in &a.elems {
                    match self.integer(b, elem) {
                        Ok(x) => out.push(x),
                        Err(_) => failed = true,
                    }
                }
                if failed {
                    Err(Reported)
                } else {
                    Ok(Value::Array(out))
                }
            }
            SynExpr::Index(ix) => {
                let base = self.value(b, &ix.expr, DestHint::Temp)?;
                let Value::Array(items) = base else {
                    let found = self.describe(&base);
                    return Err(self.err(
                        &*ix.expr,
                        format!("only arrays can be indexed, found {found}"),
                    ));
                };
                match self.const_int(&ix.index) {
                    Some(i) if i >= 0 && (i as usize) < items.len() => {
                        Ok(Value::Scalar(items[i as usize].clone(), ScalarType::I32))
                    }
                    Some(i) => Err(self.err(
                        &*ix.index,
                        format!("index {i} is out of bounds for an array of {}", items.len()),
                    )),
                    None => Err(self.err(&*ix.index, "array indices must be constants")),
                }
            }
            SynExpr::If(i) => self.select(b, i, dest),
            SynExpr::Cast(c) => self.cast_scalar(b, c),
            SynExpr::Reference(r) => Err(self.err(
                r,
                "tensors and scalars are passed by name in a kernel: remove the `&`",
            )),
            SynExpr::Block(blk) if blk.label.is_none() => self.block_value(b, &blk.block, dest),
            SynExpr::Range(_) => Err(self.err(e, "ranges only appear in `for x in a..b`")),
            SynExpr::Closure(c) => self.closure(c),
            // `()`: nothing, e.g. the untaken value of `let x = if CONST { .. } else { () };`.
            SynExpr::Tuple(t) if t.elems.is_empty() => Ok(Value::Unit),
            SynExpr::Tuple(_) => {
                Err(self.err(e, "tuples are not supported; use an array `[a, b]`"))
            }
            _ => Err(self.err(e, "this expression is not supported in a kernel")),
        }
    }

    fn path_value(&mut self, p: &syn::ExprPath) -> R<Value> {
        if let Some(bits) = self.dtype_bits_path(&p.path) {
            return Ok(Value::Scalar(Expr::Int(bits), ScalarType::I32));
        }
        if let Some(v) = float_const_path(&p.path) {
            return Ok(Value::Float(v));
        }
        let Some(ident) = p.path.get_ident() else {
            return Err(self.err(p, "paths are not supported here; name a variable"));
        };
        let name = ident.to_string();
        match self.lookup(&name).cloned() {
            Some(Binding::Const(v)) => Ok(Value::Scalar(Expr::Int(v), ScalarType::I32)),
            Some(Binding::ConstBool(v)) => Ok(Value::Scalar(Expr::Bool(v), ScalarType::Bool)),
            Some(Binding::Float(v)) => Ok(Value::Float(v)),
            Some(Binding::Scalar { var, ty, .. }) => Ok(Value::Scalar(Expr::Var(var), ty)),
            Some(Binding::Tensor { var, .. }) => Ok(Value::Tensor(var)),
            Some(Binding::Pointer(var)) => Ok(Value::Pointer(var)),
            Some(Binding::Layout(l, t, _)) => Ok(Value::Layout(l, t)),
            Some(Binding::Array(a)) => Ok(Value::Array(a)),
            Some(Binding::Closure(h)) => Ok(Value::Closure(h)),
            Some(Binding::Absent) => Err(self.err(
                p,
                format!(
                    "`{name}` has no value in this configuration: a constant `if` bound it to `()`; \
                     use it under the same condition"
                ),
            )),
            Some(Binding::DType(_)) => Err(self.err(
                p,
                format!(
                    "`{name}` is a data type; use it as `cast::<{name}>(..)` or `{name}::BITS`"
                ),
            )),
            Some(Binding::Poisoned) => Ok(Value::Poisoned),
            None => {
                let names = self.names_in_scope();
                let hint = suggest(&name, names.iter().map(|s| s.as_str()))
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_default();
                Err(self.err(p, format!("cannot find `{name}` in this kernel{hint}")))
            }
        }
    }

    fn binary(
        &mut self,
        b: &mut ProgramBuilder,
        bin: &syn::ExprBinary,
        dest: DestHint,
    ) -> R<Value> {
        if let Some(eop) = super::math::bit_op(&bin.op) {
            return self.bit_binary(b, bin, eop, dest);
        }
        let Some(op) = scalar_op(&bin.op) else {
            return Err(self.err(&bin.op, "this operator is not supported in a kernel"));
        };
        if matches!(
            bin.op,
            BinOp::AddAssign(_)
                | BinOp::SubAssign(_)
                | BinOp::MulAssign(_)
                | BinOp::DivAssign(_)
                | BinOp::RemAssign(_)
        ) {
            return Err(self.err(bin, "compound assignment is a statement, not a value"));
        }
        let lhs = self.value(b, &bin.left, DestHint::Temp);
        let rhs = self.value(b, &bin.right, DestHint::Temp);
        let (lhs, rhs) = (lhs?, rhs?);
        match (lhs, rhs) {
            (Value::Poisoned, _) | (_, Value::Poisoned) => Ok(Value::Poisoned),
            (Value::Scalar(a, ta), Value::Scalar(c, tc)) => {
                let (e, ty) = self.scalar_binary(bin, op, (a, ta), (c, tc))?;
                Ok(Value::Scalar(e, ty))
            }
            // Float constants fold, and so do integer constants with them (`1.0 / BK`): both
            // are known when the kernel is compiled.
            (Value::Float(x), Value::Float(y)) => self.fold_float(bin, op, x, y),
            (Value::Float(x), Value::Scalar(Expr::Int(y), ScalarType::I32)) => {
                self.fold_float(bin, op, x, y as f64)
            }
            (Value::Scalar(Expr::Int(x), ScalarType::I32), Value::Float(y)) => {
                self.fold_float(bin, op, x as f64, y)
            }
            // A float constant with a run-time f32 is an f32 expression.
            (Value::Float(x), Value::Scalar(c, ScalarType::F32)) => {
                let (e, ty) = self.scalar_binary(
                    bin,
                    op,
                    (Expr::f32(x as f32), ScalarType::F32),
                    (c, ScalarType::F32),
                )?;
                Ok(Value::Scalar(e, ty))
            }
            (Value::Scalar(a, ScalarType::F32), Value::Float(y)) => {
                let (e, ty) = self.scalar_binary(
                    bin,
                    op,
                    (a, ScalarType::F32),
                    (Expr::f32(y as f32), ScalarType::F32),
                )?;
                Ok(Value::Scalar(e, ty))
            }
            (Value::Tensor(x), rhs) => {
                let operand = self.operand(bin.right.as_ref(), rhs)?;
                self.element(b, bin, op, x, operand, dest)
            }
            (lhs, Value::Tensor(y))
                if matches!(op, BinaryOp::Add | BinaryOp::Mul)
                    && !matches!(lhs, Value::Tensor(_)) =>
            {
                // Commutative: `2.0 * x` is `x * 2.0`.
                let operand = self.operand(bin.left.as_ref(), lhs)?;
                self.element(b, bin, op, y, operand, dest)
            }
            // `1.0 / x`, `0.0 - x`: the constant becomes a register tensor of `x`'s type.
            (
                lhs @ (Value::Float(_) | Value::Scalar(Expr::Int(_), ScalarType::I32)),
                Value::Tensor(y),
            ) if op.element_op().is_some() => {
                let c = match lhs {
                    Value::Float(v) => v,
                    Value::Scalar(Expr::Int(v), _) => v as f64,
                    _ => unreachable!("matched above"),
                };
                let tilus_core::ir::VarType::Register(r) = b.ty(y) else {
                    return Err(self.err(&*bin.right, "expected a register tensor"));
                };
                let site = self.site(bin);
                b.set_span(site);
                let name = self.unique("c");
                let k = b.allocate_register(name.as_str(), r.dtype, r.layout, Some(c));
                self.element(b, bin, op, k, Operand::Tensor(y), dest)
            }
            (lhs, rhs) => {
                let (l, r) = (self.describe(&lhs), self.describe(&rhs));
                Err(self.err(
                    bin,
                    format!("`{}` cannot combine {l} with {r}", op.symbol()),
                ))
            }
        }
    }

    /// The second operand of an elementwise instruction.
    pub(super) fn operand(&mut self, node: &SynExpr, v: Value) -> R<Operand> {
        match v {
            Value::Tensor(t) => Ok(Operand::Tensor(t)),
            Value::Scalar(e, ScalarType::I32 | ScalarType::F32) => Ok(Operand::Scalar(e)),
            Value::Float(f) => Ok(Operand::Imm(f)),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(
                    node,
                    format!("expected a tensor, an i32 or f32 scalar or a constant, found {found}"),
                ))
            }
        }
    }

    /// An elementwise instruction on a register tensor.
    pub(super) fn element<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        op: BinaryOp,
        x: VarId,
        rhs: Operand,
        dest: DestHint,
    ) -> R<Value> {
        if let Some(cmp) = super::math::cmp_op(op) {
            return self.compare_instr(b, node, cmp, x, rhs, dest);
        }
        let Some(eop) = op.element_op() else {
            return Err(self.err(
                node,
                format!(
                    "`{}` is not an elementwise operation on tensors",
                    op.symbol()
                ),
            ));
        };
        self.elementwise(b, node, eop, x, rhs, dest)
    }

    /// The elementwise instruction `eop` on a register tensor (from an operator or a call).
    pub(super) fn elementwise<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        eop: ElementOp,
        x: VarId,
        rhs: Operand,
        dest: DestHint,
    ) -> R<Value> {
        if self.in_grid {
            return Err(self.err(node, "the grid can only use scalars"));
        }
        self.expect_scope(b, node, x, Scope::Register, "elementwise arithmetic")?;
        if let Operand::Tensor(y) = &rhs {
            self.expect_scope(b, node, *y, Scope::Register, "elementwise arithmetic")?;
        }
        let site = self.site(node);
        b.set_span(site);
        let d = self.dest(dest, "t");
        Ok(Value::Tensor(build!(d, |d| b.binary(d, eop, x, rhs))))
    }

    fn unary(&mut self, b: &mut ProgramBuilder, u: &syn::ExprUnary, dest: DestHint) -> R<Value> {
        match u.op {
            UnOp::Neg(_) => match self.value(b, &u.expr, dest.clone())? {
                Value::Scalar(Expr::Int(v), ScalarType::I32) => match v.checked_neg() {
                    Some(n) => Ok(Value::Scalar(Expr::Int(n), ScalarType::I32)),
                    None => Err(self.err(u, "negation overflows i32")),
                },
                Value::Scalar(Expr::I64(v), ScalarType::I64) => match v.checked_neg() {
                    Some(n) => Ok(Value::Scalar(Expr::I64(n), ScalarType::I64)),
                    None => Err(self.err(u, "negation overflows i64")),
                },
                Value::Scalar(e, ty @ (ScalarType::I32 | ScalarType::I64 | ScalarType::F32)) => {
                    Ok(Value::Scalar(Expr::Unary(UnaryOp::Neg, Box::new(e)), ty))
                }
                Value::Float(f) => Ok(Value::Float(-f)),
                Value::Tensor(x) => self.neg(b, u, x, dest),
                Value::Poisoned => Ok(Value::Poisoned),
                other => {
                    let found = self.describe(&other);
                    Err(self.err(u, format!("cannot negate {found}")))
                }
            },
            UnOp::Not(_) => match self.value(b, &u.expr, DestHint::Temp)? {
                Value::Scalar(Expr::Bool(v), ScalarType::Bool) => {
                    Ok(Value::Scalar(Expr::Bool(!v), ScalarType::Bool))
                }
                Value::Scalar(e, ScalarType::Bool) => Ok(Value::Scalar(
                    Expr::Unary(UnaryOp::Not, Box::new(e)),
                    ScalarType::Bool,
                )),
                Value::Poisoned => Ok(Value::Poisoned),
                Value::Tensor(x) => {
                    self.expect_scope(b, u, x, Scope::Register, "`!`")?;
                    let site = self.site(u);
                    b.set_span(site);
                    let d = self.dest(dest, "not");
                    Ok(Value::Tensor(build!(d, |d| b.unary(
                        d,
                        tilus_core::ir::MathOp::Not,
                        x
                    ))))
                }
                other => {
                    let found = self.describe(&other);
                    Err(self.err(u, format!("`!` takes a boolean, found {found}")))
                }
            },
            _ => Err(self.err(u, "this operator is not supported in a kernel")),
        }
    }

    pub(super) fn neg<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        x: VarId,
        dest: DestHint,
    ) -> R<Value> {
        if self.in_grid {
            return Err(self.err(node, "the grid can only use scalars"));
        }
        self.expect_scope(b, node, x, Scope::Register, "`neg`")?;
        let site = self.site(node);
        b.set_span(site);
        let d = self.dest(dest, "neg");
        Ok(Value::Tensor(build!(d, |d| b.neg(d, x))))
    }

    /// `if c { a } else { b }` as a value: a scalar `Select`, or with a constant condition the
    /// taken branch only, translated with `dest` (so `let x = if C { register(..) } else { .. }`
    /// names the tensor `x`).
    fn select(&mut self, b: &mut ProgramBuilder, i: &syn::ExprIf, dest: DestHint) -> R<Value> {
        let Some((_, else_branch)) = &i.else_branch else {
            return Err(self.err(i, "an `if` used as a value needs an `else`"));
        };
        let cond = self.scalar(b, &i.cond, ScalarType::Bool)?;
        // A constant condition takes one branch, which may be any block ending in a value.
        if let Expr::Bool(c) = cond {
            return if c {
                self.block_value(b, &i.then_branch, dest)
            } else {
                self.value(b, else_branch, dest)
            };
        }
        let tail = |blk: &syn::Block| -> Option<SynExpr> {
            match blk.stmts.as_slice() {
                [syn::Stmt::Expr(e, None)] => Some(e.clone()),
                _ => None,
            }
        };
        let Some(then_e) = tail(&i.then_branch) else {
            return Err(self.err(
                &i.then_branch,
                "expected a single value in this branch: with a run-time condition both branches are evaluated, so they cannot hold statements",
            ));
        };
        let else_v = |t: &mut Self, b: &mut ProgramBuilder| t.value(b, else_branch, DestHint::Temp);
        let x = self.value(b, &then_e, DestHint::Temp)?;
        let y = else_v(self, b)?;
        match (x, y) {
            // Integer branches of both widths: the i32 one is promoted.
            (Value::Scalar(x, tx), Value::Scalar(y, ty))
                if tx != ty
                    && matches!((tx, ty), (ScalarType::I32, ScalarType::I64) | (ScalarType::I64, ScalarType::I32)) =>
            {
                let w = |e: Expr, t| if t == ScalarType::I32 { widen(e) } else { e };
                Ok(Value::Scalar(
                    Expr::Select(Box::new(cond), Box::new(w(x, tx)), Box::new(w(y, ty))),
                    ScalarType::I64,
                ))
            }
            (Value::Scalar(x, tx), Value::Scalar(y, ty)) if tx == ty => Ok(Value::Scalar(
                Expr::Select(Box::new(cond), Box::new(x), Box::new(y)),
                tx,
            )),
            _ => Err(self.err(i, "an `if` value with a run-time condition must choose between two scalars of the same type")),
        }
    }

    /// A block used as a value, `{ stmts; tail }`: the statements in a scope of their own, then
    /// the tail expression (a value or a tuple of values) translated with `dest`; a block
    /// without a tail is `()`, as in Rust.
    fn block_value(
        &mut self,
        b: &mut ProgramBuilder,
        blk: &syn::Block,
        dest: DestHint,
    ) -> R<Value> {
        let (body, tail) = match blk.stmts.split_last() {
            Some((syn::Stmt::Expr(tail, None), body)) => (body, Some(tail)),
            _ => (&blk.stmts[..], None),
        };
        self.scopes.push(Vec::new());
        for s in body {
            self.stmt(b, s);
        }
        // The tail may be a tuple, as a helper's may (`let (k, v) = if C { .. } else { .. };`).
        let v = match tail {
            Some(e @ SynExpr::Tuple(t)) if !t.elems.is_empty() => self.helper_result(b, e, dest),
            // An `if` whose branches end in statements is `()`, as in Rust: a statement.
            Some(SynExpr::If(i)) if is_unit_if(i) => {
                let _ = self.stmt_expr(b, tail.expect("matched"));
                Ok(Value::Unit)
            }
            Some(tail) => self.value(b, tail, dest),
            None => Ok(Value::Unit),
        };
        self.scopes.pop();
        v
    }

    /// `+ - * / min max` and comparisons of two compile-time floats.
    fn fold_float<T: ToTokens + 'static>(
        &mut self,
        node: &T,
        op: BinaryOp,
        x: f64,
        y: f64,
    ) -> R<Value> {
        let v = match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div if y == 0.0 => {
                return Err(self.err(node, "division by zero in a constant expression"))
            }
            BinaryOp::Div => x / y,
            BinaryOp::Min => x.min(y),
            BinaryOp::Max => x.max(y),
            BinaryOp::Lt => return Ok(Value::Scalar(Expr::Bool(x < y), ScalarType::Bool)),
            BinaryOp::Le => return Ok(Value::Scalar(Expr::Bool(x <= y), ScalarType::Bool)),
            BinaryOp::Gt => return Ok(Value::Scalar(Expr::Bool(x > y), ScalarType::Bool)),
            BinaryOp::Ge => return Ok(Value::Scalar(Expr::Bool(x >= y), ScalarType::Bool)),
            _ => {
                return Err(self.err(
                    node,
                    format!(
                        "`{}` does not combine floating-point constants",
                        op.symbol()
                    ),
                ))
            }
        };
        Ok(Value::Float(v))
    }

    /// `x as i32` / `x as i64` / `x as f32` on scalars (folded for constants).
    fn cast_scalar(&mut self, b: &mut ProgramBuilder, c: &syn::ExprCast) -> R<Value> {
        let to = match &*c.ty {
            syn::Type::Path(p) if p.path.is_ident("i32") => ScalarType::I32,
            syn::Type::Path(p) if p.path.is_ident("i64") => ScalarType::I64,
            syn::Type::Path(p) if p.path.is_ident("f32") => ScalarType::F32,
            _ => {
                return Err(self.err(
                    &*c.ty,
                    "scalars are `i32`, `i64` or `f32`: only `as i32`, `as i64` and `as f32` are allowed (use `cast::<T>(x)` for tensors)",
                ))
            }
        };
        let value = self.value(b, &c.expr, DestHint::Temp)?;
        if let Some(v) = self.cast_i64(c, &value, to) {
            return v;
        }
        match (value, to) {
            (Value::Poisoned, _) => Ok(Value::Poisoned),
            (v @ Value::Scalar(_, ScalarType::I32), ScalarType::I32) => Ok(v),
            (v @ Value::Scalar(_, ScalarType::F32), ScalarType::F32) => Ok(v),
            (Value::Scalar(Expr::Int(v), ScalarType::I32), ScalarType::F32) => {
                Ok(Value::Float(v as f64))
            }
            (Value::Scalar(e, ScalarType::I32), ScalarType::F32) => Ok(Value::Scalar(
                Expr::Unary(UnaryOp::ToF32, Box::new(e)),
                ScalarType::F32,
            )),
            (Value::Scalar(e, ScalarType::F32), ScalarType::I32) => Ok(Value::Scalar(
                Expr::Unary(UnaryOp::ToI32, Box::new(e)),
                ScalarType::I32,
            )),
            (v @ Value::Float(_), ScalarType::F32) => Ok(v),
            (Value::Float(v), ScalarType::I32) => {
                if v.is_finite() && v.trunc() >= i32::MIN as f64 && v.trunc() <= i32::MAX as f64 {
                    Ok(Value::Scalar(Expr::Int(v.trunc() as i32), ScalarType::I32))
                } else {
                    Err(self.err(c, format!("{v} does not fit an i32")))
                }
            }
            (other, _) => {
                let found = self.describe(&other);
                Err(self.err(&*c.expr, format!("`as` converts scalars, found {found}")))
            }
        }
    }

    /// The conversions that involve `i64` (`None`: not one of them). Constants fold; a
    /// constant `i64` out of the `i32` range is an error here rather than a wrap on the GPU.
    fn cast_i64(&mut self, c: &syn::ExprCast, v: &Value, to: ScalarType) -> Option<R<Value>> {
        use ScalarType::{F32, I32, I64};
        let unary = |op, e: &Expr, t| Ok(Value::Scalar(Expr::Unary(op, Box::new(e.clone())), t));
        Some(match (v, to) {
            (Value::Scalar(e, I64), I64) => Ok(Value::Scalar(e.clone(), I64)),
            (Value::Scalar(Expr::Int(x), I32), I64) => Ok(Value::Scalar(Expr::I64(*x as i64), I64)),
            (Value::Scalar(e, I32 | F32), I64) => unary(UnaryOp::ToI64, e, I64),
            (Value::Scalar(Expr::I64(x), I64), I32) => match i32::try_from(*x) {
                Ok(v) => Ok(Value::Scalar(Expr::Int(v), I32)),
                Err(_) => Err(self.err(c, format!("{x} does not fit an i32"))),
            },
            (Value::Scalar(e, I64), I32) => unary(UnaryOp::ToI32, e, I32),
            (Value::Scalar(Expr::I64(x), I64), F32) => Ok(Value::Float(*x as f64)),
            (Value::Scalar(e, I64), F32) => unary(UnaryOp::ToF32, e, F32),
            (Value::Float(x), I64) => {
                let t = x.trunc();
                if x.is_finite() && t >= -(2f64.powi(63)) && t < 2f64.powi(63) {
                    Ok(Value::Scalar(Expr::I64(t as i64), I64))
                } else {
                    Err(self.err(c, format!("{x} does not fit an i64")))
                }
            }
            _ => return None,
        })
    }

    /// Translate `e` as an integer scalar (`i32` or `i64`): an element of an offset array.
    pub(super) fn integer(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<Expr> {
        match self.value(b, e, DestHint::Temp)? {
            Value::Scalar(x, ScalarType::I32 | ScalarType::I64) => Ok(x),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(e, format!("expected an i32 or i64 scalar, found {found}")))
            }
        }
    }

    /// Resolve a destination hint: a fresh, unique name or an existing variable.
    pub(super) fn dest(&mut self, dest: DestHint, temp: &str) -> Resolved {
        match dest {
            DestHint::New(name) => Resolved::New(self.unique(&name)),
            DestHint::Existing(v) => Resolved::Existing(v),
            DestHint::Temp => Resolved::New(self.unique(temp)),
        }
    }
}

/// `x as i64` of an `i32` expression (constants fold).
pub(super) fn widen(x: Expr) -> Expr {
    match x {
        Expr::Int(v) => Expr::I64(v as i64),
        x => Expr::Unary(UnaryOp::ToI64, Box::new(x)),
    }
}

/// `f32::INFINITY`, `f32::NEG_INFINITY`, `f32::MAX`, `f32::MIN` (and the `f64` ones): float
/// constants, e.g. the fill value of a masked load.
fn float_const_path(path: &syn::Path) -> Option<f64> {
    if path.segments.len() != 2 {
        return None;
    }
    let ty = path.segments[0].ident.to_string();
    let name = path.segments[1].ident.to_string();
    Some(match (ty.as_str(), name.as_str()) {
        ("f32" | "f64", "INFINITY") => f64::INFINITY,
        ("f32" | "f64", "NEG_INFINITY") => f64::NEG_INFINITY,
        ("f32", "MAX") => f32::MAX as f64,
        ("f32", "MIN") => f32::MIN as f64,
        _ => return None,
    })
}

/// Memory scopes an instruction operand may be required to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Global,
    Shared,
    Register,
    /// A register or shared tensor: an operand of `dot` (shared operands select wgmma).
    SharedOrRegister,
}

/// Whether `i` has the value `()` whatever its condition: no `else`, or every branch a block
/// whose end is a statement (`if c { a(); } else { b(); }`), a loop or such an `if`, as Rust
/// types it.
fn is_unit_if(i: &syn::ExprIf) -> bool {
    match &i.else_branch {
        None => true,
        Some((_, e)) => ends_in_unit(&i.then_branch) && is_unit(e),
    }
}

/// Whether block `blk` has the value `()`: it ends in a statement, a loop or a unit `if`.
fn ends_in_unit(blk: &syn::Block) -> bool {
    match blk.stmts.last() {
        Some(syn::Stmt::Expr(e, None)) => is_unit(e),
        _ => true,
    }
}

/// Whether expression `e` has the value `()` by its form: a loop, or an `if` or block ending
/// in statements.
pub(super) fn is_unit(e: &SynExpr) -> bool {
    match e {
        SynExpr::If(i) => is_unit_if(i),
        SynExpr::Block(b) => ends_in_unit(&b.block),
        SynExpr::ForLoop(_) | SynExpr::While(_) | SynExpr::Loop(_) => true,
        _ => false,
    }
}
