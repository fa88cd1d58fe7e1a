//! `i64` scalars: the type of an expression without a verifier, and the explicit form of the
//! `i32` to `i64` promotion that code generation prints.
//!
//! The IR promotes an `i32` operand mixed with an `i64` one (`+ - * / % & | ^ min max`,
//! comparisons, select branches; not shifts, whose type is the left operand's) to `i64` exactly, as C's usual arithmetic conversions do for `int` and
//! `long long`. C leaves `min(int, long long)` ambiguous among CUDA's overloads, so the printed
//! code makes every promotion an explicit `(long long)` cast.

use super::{BinaryOp, Expr, ScalarType, UnaryOp, VarId};

impl Expr {
    /// The type of a (verified) expression; `var` gives each variable's scalar type. `None`
    /// when a variable has none.
    pub fn scalar_type(&self, var: &dyn Fn(VarId) -> Option<ScalarType>) -> Option<ScalarType> {
        use ScalarType::{Bool, F32, I32, I64};
        Some(match self {
            Expr::Int(_) => I32,
            Expr::I64(_) => I64,
            Expr::Bool(_) => Bool,
            Expr::F32(_) => F32,
            Expr::Var(v) => var(*v)?,
            Expr::Unary(UnaryOp::Not, _) => Bool,
            Expr::Unary(UnaryOp::ToF32, _) => F32,
            Expr::Unary(UnaryOp::ToI32, _) => I32,
            Expr::Unary(UnaryOp::ToI64, _) => I64,
            Expr::Unary(UnaryOp::Neg, a) => a.scalar_type(var)?,
            Expr::Binary(op, _, _) if op.yields_bool() => Bool,
            // Shifts keep the left operand's type.
            Expr::Binary(BinaryOp::Shl | BinaryOp::Shr, a, _) => a.scalar_type(var)?,
            Expr::Binary(_, a, b) => join(a.scalar_type(var)?, b.scalar_type(var)?),
            Expr::Select(_, a, b) => join(a.scalar_type(var)?, b.scalar_type(var)?),
        })
    }

    /// Whether the expression reads or builds an `i64` anywhere.
    pub fn involves_i64(&self, var: &dyn Fn(VarId) -> Option<ScalarType>) -> bool {
        match self {
            Expr::I64(_) | Expr::Unary(UnaryOp::ToI64, _) => true,
            Expr::Int(_) | Expr::Bool(_) | Expr::F32(_) => false,
            Expr::Var(v) => var(*v) == Some(ScalarType::I64),
            Expr::Unary(_, a) => a.involves_i64(var),
            Expr::Binary(_, a, b) => a.involves_i64(var) || b.involves_i64(var),
            Expr::Select(c, a, b) => {
                c.involves_i64(var) || a.involves_i64(var) || b.involves_i64(var)
            }
        }
    }

    /// The same expression with each implicit `i32` to `i64` promotion made an explicit
    /// [`UnaryOp::ToI64`] (same value; C then never has to pick among overloads).
    pub fn with_explicit_widening(&self, var: &dyn Fn(VarId) -> Option<ScalarType>) -> Expr {
        let w = |x: &Expr| x.with_explicit_widening(var);
        let widen_to = |x: Expr, other: Option<ScalarType>| match x {
            Expr::Int(v) if other == Some(ScalarType::I64) => Expr::I64(v as i64),
            x if other == Some(ScalarType::I64) && x.scalar_type(var) == Some(ScalarType::I32) => {
                Expr::Unary(UnaryOp::ToI64, Box::new(x))
            }
            x => x,
        };
        match self {
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(w(a))),
            Expr::Binary(op, a, b)
                if !matches!(
                    op,
                    BinaryOp::And | BinaryOp::Or | BinaryOp::Shl | BinaryOp::Shr
                ) =>
            {
                let (ta, tb) = (a.scalar_type(var), b.scalar_type(var));
                Expr::Binary(
                    *op,
                    Box::new(widen_to(w(a), tb)),
                    Box::new(widen_to(w(b), ta)),
                )
            }
            Expr::Binary(op, a, b) => Expr::Binary(*op, Box::new(w(a)), Box::new(w(b))),
            Expr::Select(c, a, b) => {
                let (ta, tb) = (a.scalar_type(var), b.scalar_type(var));
                Expr::Select(
                    Box::new(w(c)),
                    Box::new(widen_to(w(a), tb)),
                    Box::new(widen_to(w(b), ta)),
                )
            }
            e => e.clone(),
        }
    }
}

/// The type of arithmetic on `a` and `b`: `i64` when either is, else `a`'s.
fn join(a: ScalarType, b: ScalarType) -> ScalarType {
    if a == ScalarType::I64 || b == ScalarType::I64 {
        ScalarType::I64
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotions_become_casts() {
        let ty = |v: VarId| {
            Some(if v.0 == 0 {
                ScalarType::I64
            } else {
                ScalarType::I32
            })
        };
        let (n, k) = (Expr::Var(VarId(0)), Expr::Var(VarId(1)));
        let e = Expr::binary(BinaryOp::Min, n.clone(), k.clone() * 2);
        assert_eq!(e.scalar_type(&ty), Some(ScalarType::I64));
        let names = |v: VarId| ["n", "k"][v.0 as usize].to_string();
        assert_eq!(
            e.with_explicit_widening(&ty).render(&names),
            "min(n, (long long)(k * 2))"
        );
        let lit = Expr::binary(BinaryOp::Mod, n.clone(), 256);
        assert_eq!(lit.with_explicit_widening(&ty).render(&names), "n % 256LL");
        let c = Expr::binary(BinaryOp::Lt, k.clone(), n.clone());
        assert_eq!(c.scalar_type(&ty), Some(ScalarType::Bool));
        assert_eq!(
            c.with_explicit_widening(&ty).render(&names),
            "(long long)k < n"
        );
        assert!(!(k.clone() + 1).involves_i64(&ty));
        assert!((k + Expr::i64(1)).involves_i64(&ty));
    }
}
