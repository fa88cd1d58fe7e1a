//! Typing of uniform scalar expressions, constant folding for static shape checks, and type
//! descriptions for messages.

use super::Checker;
use crate::ir::{BinaryOp, Expr, ScalarType, SpanId, UnaryOp, VarId, VarType};

/// A type in words: "a register f32[16, 8] tensor over 128 threads with 4 locals each".
pub(super) fn describe(ty: &VarType) -> String {
    match ty {
        VarType::Scalar(ScalarType::I32) => "an i32 scalar".to_string(),
        VarType::Scalar(ScalarType::Bool) => "a bool scalar".to_string(),
        VarType::Scalar(ScalarType::F32) => "an f32 scalar".to_string(),
        VarType::Scalar(ScalarType::I64) => "an i64 scalar".to_string(),
        VarType::Pointer { dtype, mutable } => format!(
            "a {} pointer to {dtype}",
            if *mutable { "mutable" } else { "read-only" }
        ),
        VarType::Global(g) => format!("a global {} tensor of rank {}", g.dtype, g.shape.len()),
        VarType::Shared(s) => format!("a shared {}{:?} tensor", s.dtype, s.layout.shape),
        VarType::Register(r) => format!(
            "a register {}{:?} tensor over {} threads with {} locals each",
            r.dtype,
            r.layout.shape(),
            r.layout.num_threads(),
            r.layout.num_locals()
        ),
        VarType::Unknown => "of unknown type".to_string(),
    }
}

/// The value of an integer expression without variables (`None` if it has any, or fails), with
/// the IR's checked `i32`/`i64` semantics ([`Expr::eval_index`]).
pub(crate) fn const_eval(e: &Expr) -> Option<i64> {
    e.eval_index(&mut |v| Err(crate::ir::EvalError::Unbound(format!("variable {}", v.0))))
        .ok()
}

/// Every variable an expression reads.
pub(super) fn vars_of(e: &Expr, out: &mut Vec<VarId>) {
    e.visit_vars(&mut |v| out.push(v));
}

impl Checker<'_> {
    /// The type of `e`, reporting every error in it; `None` when it has none to give.
    pub(super) fn expr_ty(&mut self, e: &Expr, span: SpanId) -> Option<ScalarType> {
        use ScalarType::{Bool, F32, I32, I64};
        match e {
            Expr::Int(_) => Some(I32),
            Expr::I64(_) => Some(I64),
            Expr::Bool(_) => Some(Bool),
            Expr::F32(_) => Some(F32),
            Expr::Var(v) => match self.use_var(*v, span)? {
                VarType::Scalar(s) => Some(*s),
                VarType::Unknown => None,
                other => {
                    let msg = format!(
                        "{} is {} and cannot be used in a scalar expression",
                        self.name(*v),
                        describe(other)
                    );
                    self.err(span, msg);
                    None
                }
            },
            Expr::Unary(op, x) => {
                let t = self.expr_ty(x, span);
                // (operand type, result type); negation keeps its operand's numeric type.
                // Conversions accept every numeric type but their own result (i64 to i64 too).
                let numeric = t.filter(|t| *t != Bool).unwrap_or(I32);
                let (want, result, sym) = match op {
                    UnaryOp::Neg => {
                        let n = t.filter(|t| matches!(t, F32 | I64)).unwrap_or(I32);
                        (n, n, "-")
                    }
                    UnaryOp::Not => (Bool, Bool, "!"),
                    UnaryOp::ToF32 if t != Some(F32) => (numeric, F32, "as f32"),
                    UnaryOp::ToF32 => (I32, F32, "as f32"),
                    UnaryOp::ToI32 if t != Some(I32) => (numeric, I32, "as i32"),
                    UnaryOp::ToI32 => (F32, I32, "as i32"),
                    UnaryOp::ToI64 => (numeric, I64, "as i64"),
                };
                if let Some(t) = t.filter(|t| *t != want) {
                    self.err(
                        span,
                        format!(
                            "`{sym}` needs a {} operand, found {}",
                            want.name(),
                            t.name()
                        ),
                    );
                }
                Some(result)
            }
            Expr::Binary(op, a, b) => {
                let ta = self.expr_ty(a, span);
                let tb = self.expr_ty(b, span);
                let (mut ta, mut tb) = (ta?, tb?);
                // Shifts keep the left operand's type (C's rule), whatever the amount's.
                if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
                    let int = |t: ScalarType| matches!(t, I32 | I64);
                    if !(int(ta) && int(tb)) {
                        self.err(
                            span,
                            format!(
                                "`{}` needs integer operands, found {} and {}",
                                op.symbol(),
                                ta.name(),
                                tb.name()
                            ),
                        );
                    }
                    return Some(if int(ta) { ta } else { I32 });
                }
                // Arithmetic and ordering take two integers or two f32 operands; an i32 mixed with
                // an i64 is promoted (sign-extended, exact), as C's `int` with `long long`.
                if (ta, tb) == (I32, I64) {
                    ta = I64;
                } else if (ta, tb) == (I64, I32) {
                    tb = I64;
                }
                let numeric = match ta {
                    F32 => F32,
                    I64 => I64,
                    _ => I32,
                };
                let (operand, result) = match op {
                    BinaryOp::Add
                    | BinaryOp::Sub
                    | BinaryOp::Mul
                    | BinaryOp::Div
                    | BinaryOp::Min
                    | BinaryOp::Max => (Some(numeric), numeric),
                    BinaryOp::Mod | BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor
                        if numeric == I64 =>
                    {
                        (Some(I64), I64)
                    }
                    BinaryOp::Mod | BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor => {
                        (Some(I32), I32)
                    }
                    // Handled above.
                    BinaryOp::Shl | BinaryOp::Shr => (None, ta),
                    BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
                        (Some(numeric), Bool)
                    }
                    BinaryOp::And | BinaryOp::Or => (Some(Bool), Bool),
                    BinaryOp::Eq | BinaryOp::Ne => (None, Bool),
                };
                let sym = op.symbol();
                match operand {
                    Some(want) if ta != want || tb != want => self.err(
                        span,
                        format!(
                            "`{sym}` needs {} operands, found {} and {}",
                            want.name(),
                            ta.name(),
                            tb.name()
                        ),
                    ),
                    None if ta != tb => self.err(
                        span,
                        format!(
                            "`{sym}` compares values of different types ({} and {})",
                            ta.name(),
                            tb.name()
                        ),
                    ),
                    _ => {}
                }
                Some(result)
            }
            Expr::Select(c, a, b) => {
                self.expect_expr(c, Bool, span, "the condition of a select");
                let ta = self.expr_ty(a, span);
                let tb = self.expr_ty(b, span);
                let (ta, tb) = (ta?, tb?);
                if matches!((ta, tb), (I32, I64) | (I64, I32)) {
                    return Some(I64);
                }
                if ta != tb {
                    self.err(
                        span,
                        format!(
                            "the branches of a select have different types ({} and {})",
                            ta.name(),
                            tb.name()
                        ),
                    );
                }
                Some(ta)
            }
        }
    }

    /// Check that `e` has type `want`; `what` names it in the message.
    pub(super) fn expect_expr(&mut self, e: &Expr, want: ScalarType, span: SpanId, what: &str) {
        if let Some(t) = self.expr_ty(e, span) {
            if t != want {
                self.err(
                    span,
                    format!("{what} must be {}, found {}", want.name(), t.name()),
                );
            }
        }
    }

    /// Check that `e` is an integer (`i32` or `i64`); `what` names it in the message.
    pub(super) fn expect_integer(&mut self, e: &Expr, span: SpanId, what: &str) {
        if let Some(t) = self.expr_ty(e, span) {
            if !matches!(t, ScalarType::I32 | ScalarType::I64) {
                self.err(
                    span,
                    format!("{what} must be i32 or i64, found {}", t.name()),
                );
            }
        }
    }

    /// Check that `e`, an extent of a global tensor (`what` names it), is an `i32`: strides
    /// derive from extents and stay `int` in the generated code (perf-notes entry 8).
    pub(super) fn expect_extent(&mut self, e: &Expr, span: SpanId, what: &str) {
        match self.expr_ty(e, span) {
            Some(ScalarType::I64) => self.err(
                span,
                format!(
                    "view extents are i32; {what} is i64 (offsets may be i64, extents and \
                     strides may not: narrow it with `as i32`)"
                ),
            ),
            Some(t) if t != ScalarType::I32 => {
                self.err(span, format!("{what} must be i32, found {}", t.name()))
            }
            _ => {}
        }
    }
}
