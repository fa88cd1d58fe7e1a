//! Scalar expressions: rendering IR [`Expr`]s as C, small helpers for the index arithmetic the
//! emitters generate, and divisibility proofs used to pick vector widths.

use crate::ir::{BinaryOp, EvalError, Expr, ScalarType, ScalarValue, UnaryOp, VarId};
use std::collections::{HashMap, HashSet};

/// Render `e` as a C expression; `name` gives each variable's identifier. The IR's expression
/// syntax is C's, so this is the IR printer ([`Expr::render`]).
pub(crate) fn c_expr(e: &Expr, name: &dyn Fn(VarId) -> String) -> String {
    e.render(name)
}

/// C for an expression that involves `f32` values. Arithmetic goes through the
/// round-to-nearest intrinsics (`__fadd_rn`, ...), which the compiler never contracts into an
/// FMA, so the GPU computes exactly the IR's IEEE semantics (`ir::eval`). `is_f32_var` and
/// `is_i64_var` tell which variables are `f32` and `i64` scalars.
pub(crate) fn c_float_expr(
    e: &Expr,
    name: &dyn Fn(VarId) -> String,
    is_f32_var: &dyn Fn(VarId) -> bool,
    is_i64_var: &dyn Fn(VarId) -> bool,
) -> String {
    let r = |x: &Expr| c_float_expr(x, name, is_f32_var, is_i64_var);
    let i64_operand = |x: &Expr| x.involves_i64(&|v| is_i64_var(v).then_some(ScalarType::I64));
    match e {
        Expr::Int(_) | Expr::I64(_) | Expr::Bool(_) | Expr::F32(_) | Expr::Var(_) => {
            c_expr(e, name)
        }
        Expr::Unary(op, a) => match op {
            UnaryOp::Neg => format!("(-{})", r(a)),
            UnaryOp::Not => format!("(!{})", r(a)),
            // Round to nearest, as Rust's `as f32` (the interpreter) does.
            UnaryOp::ToF32 if !is_f32(a, is_f32_var) && i64_operand(a) => {
                format!("__ll2float_rn({})", r(a))
            }
            UnaryOp::ToF32 => format!("__int2float_rn({})", r(a)),
            UnaryOp::ToI32 if is_f32(a, is_f32_var) => format!("__float2int_rz({})", r(a)),
            // i64 -> i32 keeps the low 32 bits; the interpreter makes out-of-range an error.
            UnaryOp::ToI32 => format!("((int)({}))", r(a)),
            UnaryOp::ToI64 if is_f32(a, is_f32_var) => format!("__float2ll_rz({})", r(a)),
            UnaryOp::ToI64 => format!("((long long)({}))", r(a)),
        },
        Expr::Binary(op, a, b) => {
            let (x, y) = (r(a), r(b));
            if is_f32(a, is_f32_var) {
                let f = match op {
                    BinaryOp::Add => Some("__fadd_rn"),
                    BinaryOp::Sub => Some("__fsub_rn"),
                    BinaryOp::Mul => Some("__fmul_rn"),
                    BinaryOp::Div => Some("__fdiv_rn"),
                    BinaryOp::Min => Some("fminf"),
                    BinaryOp::Max => Some("fmaxf"),
                    _ => None,
                };
                if let Some(f) = f {
                    return format!("{f}({x}, {y})");
                }
            }
            match op {
                BinaryOp::Min | BinaryOp::Max => format!("{}({x}, {y})", op.symbol()),
                _ => format!("({x} {} {y})", op.symbol()),
            }
        }
        Expr::Select(c, a, b) => format!("({} ? {} : {})", r(c), r(a), r(b)),
    }
}

/// Whether `e` has type `f32`.
pub(crate) fn is_f32(e: &Expr, is_f32_var: &dyn Fn(VarId) -> bool) -> bool {
    match e {
        Expr::F32(_) => true,
        Expr::Int(_) | Expr::I64(_) | Expr::Bool(_) => false,
        Expr::Var(v) => is_f32_var(*v),
        Expr::Unary(UnaryOp::ToF32, _) => true,
        Expr::Unary(UnaryOp::ToI32 | UnaryOp::ToI64 | UnaryOp::Not, _) => false,
        Expr::Unary(UnaryOp::Neg, a) => is_f32(a, is_f32_var),
        Expr::Binary(op, a, _) => {
            matches!(
                op,
                BinaryOp::Add
                    | BinaryOp::Sub
                    | BinaryOp::Mul
                    | BinaryOp::Div
                    | BinaryOp::Min
                    | BinaryOp::Max
            ) && is_f32(a, is_f32_var)
        }
        Expr::Select(_, a, _) => is_f32(a, is_f32_var),
    }
}

/// Whether `e` reads or computes any `f32` value (then [`c_float_expr`] renders it).
pub(crate) fn involves_f32(e: &Expr, is_f32_var: &dyn Fn(VarId) -> bool) -> bool {
    match e {
        Expr::F32(_) | Expr::Unary(UnaryOp::ToF32 | UnaryOp::ToI32, _) => true,
        Expr::Int(_) | Expr::I64(_) | Expr::Bool(_) => false,
        Expr::Var(v) => is_f32_var(*v),
        Expr::Unary(_, a) => involves_f32(a, is_f32_var),
        Expr::Binary(_, a, b) => involves_f32(a, is_f32_var) || involves_f32(b, is_f32_var),
        Expr::Select(c, a, b) => {
            involves_f32(c, is_f32_var)
                || involves_f32(a, is_f32_var)
                || involves_f32(b, is_f32_var)
        }
    }
}

/// A C integer literal (of type int when it fits, else long long).
pub(crate) fn int_lit(v: i64) -> String {
    if v == i32::MIN as i64 {
        "(-2147483647 - 1)".to_string()
    } else if v < 0 {
        format!("({v})")
    } else if v > i32::MAX as i64 {
        format!("{v}LL")
    } else {
        v.to_string()
    }
}

/// `a + c` with `c` a constant, folded where trivial. `a` must be an atom or parenthesized sum.
pub(crate) fn add_const(a: &str, c: i64) -> String {
    if c == 0 {
        a.to_string()
    } else if a == "0" {
        int_lit(c)
    } else if c < 0 {
        format!("{a} - {}", -c)
    } else {
        format!("{a} + {c}")
    }
}

/// Sum of terms, dropping zeros.
pub(crate) fn sum(terms: &[String]) -> String {
    let t: Vec<&String> = terms.iter().filter(|s| s.as_str() != "0").collect();
    if t.is_empty() {
        "0".to_string()
    } else {
        t.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" + ")
    }
}

/// `a * c` for a constant `c`, folded where trivial; `a` is parenthesized when compound.
pub(crate) fn mul_const(a: &str, c: i64) -> String {
    if c == 0 || a == "0" {
        "0".to_string()
    } else if c == 1 {
        a.to_string()
    } else {
        format!("{} * {}", paren(a), int_lit(c))
    }
}

/// Parenthesize unless `s` is an identifier or literal.
pub(crate) fn paren(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        || (s.starts_with('(') && balanced_outer(s))
    {
        s.to_string()
    } else {
        format!("({s})")
    }
}

/// True when the first `(` of `s` closes at its last character.
fn balanced_outer(s: &str) -> bool {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 && i != s.len() - 1 {
                    return false;
                }
            }
            _ => {}
        }
    }
    s.ends_with(')')
}

/// What is known about scalar variables, for divisibility proofs.
#[derive(Default)]
pub(crate) struct ScalarFacts {
    /// Scalar parameters (their value is known at launch, so conditions on them can become
    /// launch assumptions).
    pub(crate) params: HashSet<VarId>,
    /// Variables defined once by `Let` and never assigned: their definition.
    pub(crate) defs: HashMap<VarId, Expr>,
}

/// The result of a divisibility proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Divisible {
    /// Always divisible.
    Yes,
    /// Divisible when each `(expr, d)` holds: `expr` (over parameters) is a multiple of `d`.
    If(Vec<(Expr, i32)>),
    /// Not provable.
    No,
}

impl Divisible {
    pub(crate) fn and(self, other: Divisible) -> Divisible {
        match (self, other) {
            (Divisible::No, _) | (_, Divisible::No) => Divisible::No,
            (Divisible::Yes, x) | (x, Divisible::Yes) => x,
            (Divisible::If(mut a), Divisible::If(b)) => {
                for c in b {
                    if !a.contains(&c) {
                        a.push(c);
                    }
                }
                Divisible::If(a)
            }
        }
    }
    /// The better of two alternative proofs.
    fn or(self, other: Divisible) -> Divisible {
        match (self, other) {
            (Divisible::Yes, _) | (_, Divisible::Yes) => Divisible::Yes,
            (Divisible::No, x) | (x, Divisible::No) => x,
            (Divisible::If(a), Divisible::If(b)) => {
                if b.len() < a.len() {
                    Divisible::If(b)
                } else {
                    Divisible::If(a)
                }
            }
        }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

impl ScalarFacts {
    /// Whether `e` uses parameters and constants only (after substituting definitions).
    pub(crate) fn is_param_only(&self, e: &Expr) -> bool {
        match e {
            Expr::Int(_) | Expr::I64(_) | Expr::Bool(_) | Expr::F32(_) => true,
            Expr::Var(v) => {
                self.params.contains(v) || self.defs.get(v).is_some_and(|d| self.is_param_only(d))
            }
            Expr::Unary(_, a) => self.is_param_only(a),
            Expr::Binary(_, a, b) => self.is_param_only(a) && self.is_param_only(b),
            Expr::Select(c, a, b) => {
                self.is_param_only(c) && self.is_param_only(a) && self.is_param_only(b)
            }
        }
    }

    /// Substitute definitions so that a param-only expression mentions parameters alone.
    pub(crate) fn inline(&self, e: &Expr) -> Expr {
        match e {
            Expr::Var(v) => match self.defs.get(v) {
                Some(d) => self.inline(d),
                None => e.clone(),
            },
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(self.inline(a))),
            Expr::Binary(op, a, b) => {
                Expr::Binary(*op, Box::new(self.inline(a)), Box::new(self.inline(b)))
            }
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(self.inline(c)),
                Box::new(self.inline(a)),
                Box::new(self.inline(b)),
            ),
            _ => e.clone(),
        }
    }

    /// The constant value of `e`, when it has one (the IR's checked evaluation, through the
    /// definitions of `let`-bound scalars).
    pub(crate) fn constant(&self, e: &Expr) -> Option<i64> {
        e.eval_index(&mut |v| self.defined_value(v)).ok()
    }

    fn defined_value(&self, v: VarId) -> Result<ScalarValue, EvalError> {
        match self.defs.get(&v) {
            Some(d) => d.eval(&mut |w| self.defined_value(w)),
            None => Err(EvalError::Unbound(format!(
                "variable {} is not a constant",
                v.0
            ))),
        }
    }

    /// Prove `e % d == 0` for every execution, or under conditions on parameters.
    pub(crate) fn divisible(&self, e: &Expr, d: i64) -> Divisible {
        if d <= 1 {
            return Divisible::Yes;
        }
        if let Some(c) = self.constant(e) {
            return if c % d == 0 {
                Divisible::Yes
            } else {
                Divisible::No
            };
        }
        let structural = match e {
            Expr::Var(v) if self.params.contains(v) => Divisible::If(vec![(e.clone(), d as i32)]),
            Expr::Var(v) => match self.defs.get(v) {
                Some(def) => self.divisible(def, d),
                None => Divisible::No,
            },
            Expr::Unary(UnaryOp::Neg, a) => self.divisible(a, d),
            Expr::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) => {
                self.divisible(a, d).and(self.divisible(b, d))
            }
            Expr::Binary(BinaryOp::Mul, a, b) => {
                let by_const = |c: i64, other: &Expr| self.divisible(other, d / gcd(c, d));
                match (self.constant(a), self.constant(b)) {
                    (Some(c), _) => by_const(c, b),
                    (_, Some(c)) => by_const(c, a),
                    _ => self.divisible(a, d).or(self.divisible(b, d)),
                }
            }
            Expr::Binary(BinaryOp::Min | BinaryOp::Max, a, b) | Expr::Select(_, a, b) => {
                self.divisible(a, d).and(self.divisible(b, d))
            }
            _ => Divisible::No,
        };
        if structural == Divisible::No && self.is_param_only(e) {
            Divisible::If(vec![(self.inline(e), d as i32)])
        } else {
            structural
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(v: VarId) -> String {
        format!("v{}", v.0)
    }

    #[test]
    fn renders_with_minimal_parentheses() {
        let a = Expr::Var(VarId(0));
        let b = Expr::Var(VarId(1));
        let e = (a.clone() + b.clone()) * 4;
        assert_eq!(c_expr(&e, &n), "(v0 + v1) * 4");
        let e = a.clone() - (b.clone() - 1);
        assert_eq!(c_expr(&e, &n), "v0 - (v1 - 1)");
        let e = a.clone() - b.clone() - 1;
        assert_eq!(c_expr(&e, &n), "v0 - v1 - 1");
        let e = Expr::cdiv(a.clone(), 32);
        assert_eq!(c_expr(&e, &n), "(v0 + 32 - 1) / 32");
        let e = Expr::binary(BinaryOp::Min, a.clone(), Expr::Int(-3));
        assert_eq!(c_expr(&e, &n), "min(v0, (-3))");
        let e = Expr::binary(
            BinaryOp::And,
            Expr::binary(BinaryOp::Lt, a.clone(), 3),
            Expr::Unary(UnaryOp::Not, Box::new(Expr::Bool(false))),
        );
        assert_eq!(c_expr(&e, &n), "v0 < 3 && !false");
        assert_eq!(c_expr(&Expr::Int(i32::MIN), &n), "(-2147483647 - 1)");
    }

    #[test]
    fn proves_divisibility() {
        let k = VarId(0);
        let kk = VarId(1);
        let bk = VarId(2);
        let mut f = ScalarFacts::default();
        f.params.insert(k);
        f.defs.insert(bk, Expr::Int(32));
        // kk * BK with BK = 32: always a multiple of 8.
        assert_eq!(
            f.divisible(&(Expr::Var(kk) * Expr::Var(bk)), 8),
            Divisible::Yes
        );
        // a loop variable alone: not provable.
        assert_eq!(f.divisible(&Expr::Var(kk), 8), Divisible::No);
        // a parameter: under a launch assumption.
        assert_eq!(
            f.divisible(&Expr::Var(k), 8),
            Divisible::If(vec![(Expr::Var(k), 8)])
        );
        // k * 2 needs k % 4.
        assert_eq!(
            f.divisible(&(Expr::Var(k) * 2), 8),
            Divisible::If(vec![(Expr::Var(k), 4)])
        );
        // k / 2 is param-only: an assumption on the whole expression.
        let e = Expr::Var(k) / 2;
        assert_eq!(f.divisible(&e, 8), Divisible::If(vec![(e.clone(), 8)]));
        assert_eq!(f.divisible(&Expr::Int(12), 8), Divisible::No);
    }
}
