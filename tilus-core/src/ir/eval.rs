//! The one evaluator of uniform scalar expressions, and the expression walkers.
//!
//! Semantics (shared by the interpreter, the launch checks, the verifier's constant folding and
//! the runtime's grid and workspace sizes): values are `i32`, `i64`, `f32` or `bool`; integer
//! arithmetic is checked, so overflow and division by zero are errors (the GPU would wrap or trap
//! silently); an `i32` operand mixed with an `i64` one is sign-extended first (exact, as C's usual
//! arithmetic conversions do with `int` and `long long`), so the result is `i64`; division and remainder truncate toward zero as in C; `f32` arithmetic is IEEE
//! binary32 with round to nearest even, exactly what the GPU computes for `+ - * /` (no
//! contraction: the code generator emits `__fadd_rn` and friends), and a NaN result is an error;
//! `&&`, `||` and select evaluate lazily.

use super::{BinaryOp, Expr, Instruction, Program, Stmt, StmtKind, UnaryOp, VarId};

/// The value of a scalar expression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    I32(i32),
    I64(i64),
    Bool(bool),
    F32(f32),
}

impl ScalarValue {
    /// The value as an `f64` (`bool` is 0 or 1), exact for every value but `i64`s beyond 2^53.
    pub fn as_f64(self) -> f64 {
        match self {
            ScalarValue::I32(v) => v as f64,
            ScalarValue::I64(v) => v as f64,
            ScalarValue::Bool(b) => b as i32 as f64,
            ScalarValue::F32(v) => v as f64,
        }
    }
}

/// Why an expression has no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The expression reads a variable the caller has no value for.
    #[error("{0}")]
    Unbound(String),
    /// Overflow, division by zero, or an operator applied to the wrong type.
    #[error("{0}")]
    Arithmetic(String),
}

impl Expr {
    /// Evaluate with `lookup` giving each variable's value (or the reason it has none).
    pub fn eval(
        &self,
        lookup: &mut dyn FnMut(VarId) -> Result<ScalarValue, EvalError>,
    ) -> Result<ScalarValue, EvalError> {
        use ScalarValue::{Bool, F32, I32, I64};
        let wrong = |what: String| Err(EvalError::Arithmetic(what));
        match self {
            Expr::Int(v) => Ok(I32(*v)),
            Expr::I64(v) => Ok(I64(*v)),
            Expr::Bool(b) => Ok(Bool(*b)),
            Expr::F32(bits) => Ok(F32(f32::from_bits(*bits))),
            Expr::Var(v) => lookup(*v),
            Expr::Unary(op, x) => match (op, x.eval(lookup)?) {
                (UnaryOp::Neg, I32(v)) => v
                    .checked_neg()
                    .map(I32)
                    .ok_or_else(|| EvalError::Arithmetic(format!("i32 overflow: -({v})"))),
                (UnaryOp::Neg, I64(v)) => v
                    .checked_neg()
                    .map(I64)
                    .ok_or_else(|| EvalError::Arithmetic(format!("i64 overflow: -({v})"))),
                (UnaryOp::Neg, F32(v)) => Ok(F32(-v)),
                (UnaryOp::Not, Bool(b)) => Ok(Bool(!b)),
                (UnaryOp::ToF32, I32(v)) => Ok(F32(v as f32)),
                (UnaryOp::ToF32, I64(v)) => Ok(F32(v as f32)),
                (UnaryOp::ToI32, I64(v)) => i32::try_from(v).map(I32).or_else(|_| {
                    wrong(format!(
                        "i64 {v} does not fit an i32 (`as i32` on the GPU would keep its low 32 bits)"
                    ))
                }),
                (UnaryOp::ToI64, I32(v)) => Ok(I64(v as i64)),
                (UnaryOp::ToI64, I64(v)) => Ok(I64(v)),
                (UnaryOp::ToI64, F32(v)) => {
                    // 2^63 is exact in f32; `as` would saturate, the check makes it an error.
                    const TWO_63: f32 = 9_223_372_036_854_775_808.0;
                    if v.is_finite() && (-TWO_63..TWO_63).contains(&v) {
                        Ok(I64(v as i64))
                    } else {
                        wrong(format!("f32 {v} does not fit an i64"))
                    }
                }
                (UnaryOp::ToI32, F32(v)) => {
                    // `as` would saturate; the range check makes out-of-range values errors.
                    if v.is_finite() && v > -2147483649.0 && v < 2147483648.0 {
                        Ok(I32(v as i32))
                    } else {
                        wrong(format!("f32 {v} does not fit an i32"))
                    }
                }
                (UnaryOp::ToF32 | UnaryOp::ToI32 | UnaryOp::ToI64, v) => {
                    wrong(format!("`as` on {v:?}"))
                }
                (UnaryOp::Neg, v) => wrong(format!("`-` on {v:?}")),
                (UnaryOp::Not, v) => wrong(format!("`!` on {v:?}")),
            },
            Expr::Binary(op, a, b) => {
                let lhs = a.eval(lookup)?;
                match (op, lhs) {
                    (BinaryOp::And, Bool(false)) => return Ok(Bool(false)),
                    (BinaryOp::Or, Bool(true)) => return Ok(Bool(true)),
                    _ => {}
                }
                binary(*op, lhs, b.eval(lookup)?)
            }
            Expr::Select(c, a, b) => match c.eval(lookup)? {
                Bool(true) => a.eval(lookup),
                Bool(false) => b.eval(lookup),
                v => wrong(format!("select on {v:?}")),
            },
        }
    }

    /// Evaluate an `i32`-valued expression.
    pub fn eval_i32(
        &self,
        lookup: &mut dyn FnMut(VarId) -> Result<ScalarValue, EvalError>,
    ) -> Result<i32, EvalError> {
        match self.eval(lookup)? {
            ScalarValue::I32(v) => Ok(v),
            ScalarValue::I64(v) => Err(EvalError::Arithmetic(format!(
                "expected an i32, found the i64 {v}"
            ))),
            ScalarValue::Bool(b) => Err(EvalError::Arithmetic(format!(
                "expected an i32, found the bool {b}"
            ))),
            ScalarValue::F32(v) => Err(EvalError::Arithmetic(format!(
                "expected an i32, found the f32 {v}"
            ))),
        }
    }

    /// Evaluate an integer-valued expression (`i32` or `i64`) as an `i64`: offsets into global
    /// views, which are 64-bit in the generated code.
    pub fn eval_index(
        &self,
        lookup: &mut dyn FnMut(VarId) -> Result<ScalarValue, EvalError>,
    ) -> Result<i64, EvalError> {
        match self.eval(lookup)? {
            ScalarValue::I32(v) => Ok(v as i64),
            ScalarValue::I64(v) => Ok(v),
            v => Err(EvalError::Arithmetic(format!(
                "expected an integer, found {v:?}"
            ))),
        }
    }

    /// The value of an expression without variables (`None` when it reads one or fails).
    pub fn const_i32(&self) -> Option<i32> {
        self.eval_i32(&mut |v| Err(EvalError::Unbound(format!("variable {}", v.0))))
            .ok()
    }

    /// Call `f` on every variable the expression reads, in order (repeats included).
    pub fn visit_vars(&self, f: &mut dyn FnMut(VarId)) {
        match self {
            Expr::Int(_) | Expr::I64(_) | Expr::Bool(_) | Expr::F32(_) => {}
            Expr::Var(v) => f(*v),
            Expr::Unary(_, x) => x.visit_vars(f),
            Expr::Binary(_, a, b) => {
                a.visit_vars(f);
                b.visit_vars(f);
            }
            Expr::Select(c, a, b) => {
                c.visit_vars(f);
                a.visit_vars(f);
                b.visit_vars(f);
            }
        }
    }

    /// Every variable the expression reads, deduplicated, in first-use order.
    pub fn vars(&self) -> Vec<VarId> {
        let mut out = Vec::new();
        self.visit_vars(&mut |v| {
            if !out.contains(&v) {
                out.push(v)
            }
        });
        out
    }
}

impl Program {
    /// Call `f` on every instruction of the body, in program order, inside every branch and
    /// loop.
    pub fn visit_instructions(&self, f: &mut dyn FnMut(&Instruction)) {
        visit_stmts(&self.body, f)
    }
}

fn visit_stmts(stmts: &[Stmt], f: &mut dyn FnMut(&Instruction)) {
    for s in stmts {
        match &s.kind {
            StmtKind::Instr(i) => f(i),
            other => {
                for body in other.bodies() {
                    visit_stmts(body, f);
                }
            }
        }
    }
}

fn binary(op: BinaryOp, a: ScalarValue, b: ScalarValue) -> Result<ScalarValue, EvalError> {
    use ScalarValue::{Bool, F32, I32, I64};
    let sym = op.symbol();
    let err = |m: String| EvalError::Arithmetic(m);
    let overflow = |x: i32, y: i32| err(format!("i32 overflow: {x} {sym} {y}"));
    if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
        return shift(op, a, b);
    }
    Ok(match (a, b) {
        // Mixed widths: the i32 side is sign-extended, exactly.
        (I32(x), I64(y)) => return binary_i64(op, x as i64, y),
        (I64(x), I32(y)) => return binary_i64(op, x, y as i64),
        (I64(x), I64(y)) => return binary_i64(op, x, y),
        (I32(x), I32(y)) => match op {
            BinaryOp::Add => I32(x.checked_add(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Sub => I32(x.checked_sub(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Mul => I32(x.checked_mul(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Div | BinaryOp::Mod if y == 0 => {
                return Err(err(format!("division by zero: {x} {sym} 0")))
            }
            BinaryOp::Div => I32(x.checked_div(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Mod => I32(x.checked_rem(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Min => I32(x.min(y)),
            BinaryOp::Max => I32(x.max(y)),
            BinaryOp::Lt => Bool(x < y),
            BinaryOp::Le => Bool(x <= y),
            BinaryOp::Gt => Bool(x > y),
            BinaryOp::Ge => Bool(x >= y),
            BinaryOp::Eq => Bool(x == y),
            BinaryOp::Ne => Bool(x != y),
            BinaryOp::BitAnd => I32(x & y),
            BinaryOp::BitOr => I32(x | y),
            BinaryOp::BitXor => I32(x ^ y),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Shl | BinaryOp::Shr => {
                return Err(err(format!("`{sym}` on i32 values")))
            }
        },
        (F32(x), F32(y)) => {
            let v = match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div => x / y,
                BinaryOp::Min => x.min(y),
                BinaryOp::Max => x.max(y),
                BinaryOp::Lt => return Ok(Bool(x < y)),
                BinaryOp::Le => return Ok(Bool(x <= y)),
                BinaryOp::Gt => return Ok(Bool(x > y)),
                BinaryOp::Ge => return Ok(Bool(x >= y)),
                BinaryOp::Eq => return Ok(Bool(x == y)),
                BinaryOp::Ne => return Ok(Bool(x != y)),
                BinaryOp::Mod
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::Shl
                | BinaryOp::Shr => return Err(err(format!("`{sym}` on f32 values"))),
            };
            if v.is_nan() {
                return Err(err(format!("f32 NaN: {x} {sym} {y}")));
            }
            F32(v)
        }
        (Bool(x), Bool(y)) => match op {
            BinaryOp::And => Bool(x && y),
            BinaryOp::Or => Bool(x || y),
            BinaryOp::Eq => Bool(x == y),
            BinaryOp::Ne => Bool(x != y),
            _ => return Err(err(format!("`{sym}` on bool values"))),
        },
        _ => return Err(err(format!("`{sym}` on values of different types"))),
    })
}

/// `i64` arithmetic, checked like `i32`'s.
fn binary_i64(op: BinaryOp, x: i64, y: i64) -> Result<ScalarValue, EvalError> {
    use ScalarValue::{Bool, I64};
    let sym = op.symbol();
    let err = |m: String| EvalError::Arithmetic(m);
    let overflow = || err(format!("i64 overflow: {x} {sym} {y}"));
    Ok(match op {
        BinaryOp::Add => I64(x.checked_add(y).ok_or_else(overflow)?),
        BinaryOp::Sub => I64(x.checked_sub(y).ok_or_else(overflow)?),
        BinaryOp::Mul => I64(x.checked_mul(y).ok_or_else(overflow)?),
        BinaryOp::Div | BinaryOp::Mod if y == 0 => {
            return Err(err(format!("division by zero: {x} {sym} 0")))
        }
        BinaryOp::Div => I64(x.checked_div(y).ok_or_else(overflow)?),
        BinaryOp::Mod => I64(x.checked_rem(y).ok_or_else(overflow)?),
        BinaryOp::Min => I64(x.min(y)),
        BinaryOp::Max => I64(x.max(y)),
        BinaryOp::Lt => Bool(x < y),
        BinaryOp::Le => Bool(x <= y),
        BinaryOp::Gt => Bool(x > y),
        BinaryOp::Ge => Bool(x >= y),
        BinaryOp::Eq => Bool(x == y),
        BinaryOp::Ne => Bool(x != y),
        BinaryOp::BitAnd => I64(x & y),
        BinaryOp::BitOr => I64(x | y),
        BinaryOp::BitXor => I64(x ^ y),
        BinaryOp::And | BinaryOp::Or | BinaryOp::Shl | BinaryOp::Shr => {
            return Err(err(format!("`{sym}` on i64 values")))
        }
    })
}

/// `a << s` and `a >> s` of integers: the result has the left operand's type (C's rule for
/// shifts, unlike arithmetic's promotion); the amount must lie in `0..bits`, and a left shift
/// must not leave the type (`a · 2^s`, as the other arithmetic is checked).
fn shift(op: BinaryOp, a: ScalarValue, s: ScalarValue) -> Result<ScalarValue, EvalError> {
    use ScalarValue::{I32, I64};
    let sym = op.symbol();
    let err = |m: String| EvalError::Arithmetic(m);
    let (x, bits) = match a {
        I32(x) => (x as i64, 32),
        I64(x) => (x, 64),
        _ => return Err(err(format!("`{sym}` of a non-integer value"))),
    };
    let amount = match s {
        I32(s) => s as i64,
        I64(s) => s,
        _ => return Err(err(format!("`{sym}` by a non-integer amount"))),
    };
    if !(0..bits).contains(&amount) {
        return Err(err(format!(
            "shift amount {amount} outside 0..{bits}: {x} {sym} {amount}"
        )));
    }
    // Exact in i128: |x| < 2^63 and amount < 64.
    let r = if op == BinaryOp::Shr {
        (x >> amount) as i128
    } else {
        (x as i128) << amount
    };
    let overflow = || err(format!("i{bits} overflow: {x} {sym} {amount}"));
    Ok(match a {
        I32(_) => I32(i32::try_from(r).map_err(|_| overflow())?),
        _ => I64(i64::try_from(r).map_err(|_| overflow())?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vals: &[i32]) -> impl FnMut(VarId) -> Result<ScalarValue, EvalError> + '_ {
        move |v| {
            vals.get(v.0 as usize)
                .map(|&x| ScalarValue::I32(x))
                .ok_or_else(|| EvalError::Unbound(format!("v{}", v.0)))
        }
    }

    #[test]
    fn c_semantics_and_checked_overflow() {
        let (a, b) = (Expr::Var(VarId(0)), Expr::Var(VarId(1)));
        let mut e = env(&[-7, 2]);
        assert_eq!((a.clone() / b.clone()).eval_i32(&mut e), Ok(-3));
        assert_eq!((a.clone() % b.clone()).eval_i32(&mut e), Ok(-1));
        let mut big = env(&[i32::MAX, 1]);
        assert!(matches!(
            (a.clone() + b.clone()).eval_i32(&mut big),
            Err(EvalError::Arithmetic(m)) if m.contains("overflow")
        ));
        let mut zero = env(&[5, 0]);
        assert!(matches!(
            (a.clone() / b.clone()).eval_i32(&mut zero),
            Err(EvalError::Arithmetic(m)) if m.contains("division by zero")
        ));
        let mut none = env(&[]);
        assert!(matches!(a.eval_i32(&mut none), Err(EvalError::Unbound(_))));
        assert_eq!(Expr::cdiv(10, 4).const_i32(), Some(3));
        assert_eq!(
            (a.clone() * b.clone() + a.clone()).vars(),
            vec![VarId(0), VarId(1)]
        );
    }

    #[test]
    fn bit_operators_are_twos_complement_and_shifts_are_checked() {
        use ScalarValue::{I32, I64};
        let (a, b) = (Expr::Var(VarId(0)), Expr::Var(VarId(1)));
        let mut e = env(&[-6, 3]);
        assert_eq!((a.clone() & b.clone()).eval_i32(&mut e), Ok(-6 & 3));
        assert_eq!((a.clone() | b.clone()).eval_i32(&mut e), Ok(-6 | 3));
        assert_eq!((a.clone() ^ b.clone()).eval_i32(&mut e), Ok(-6 ^ 3));
        // Arithmetic shift right; left shift is a product by 2^s.
        assert_eq!((a.clone() >> b.clone()).eval_i32(&mut e), Ok(-1));
        assert_eq!((a.clone() << b.clone()).eval_i32(&mut e), Ok(-48));
        // The amount must lie in 0..bits, and a left shift must not leave the type.
        for (x, s) in [(1, 32), (1, -1), (1 << 30, 2), (-(1 << 30), 2)] {
            let vals = [x, s];
            let mut e = env(&vals);
            assert!(
                matches!(
                    (a.clone() << b.clone()).eval(&mut e),
                    Err(EvalError::Arithmetic(_))
                ),
                "{x} << {s}"
            );
        }
        let vals = [-(1 << 30), 1];
        let mut e = env(&vals);
        assert_eq!((a.clone() << b.clone()).eval_i32(&mut e), Ok(i32::MIN));
        // Shifts keep the left operand's type; the others promote an i32 to i64.
        let wide = Expr::I64(1 << 40);
        assert_eq!((wide.clone() >> 8).eval(&mut e), Ok(I64(1 << 32)));
        assert_eq!((Expr::Int(5) << Expr::I64(2)).eval(&mut e), Ok(I32(20)));
        assert_eq!(
            (Expr::Int(-1) & wide.clone()).eval(&mut e),
            Ok(I64(1 << 40))
        );
        assert!((Expr::I64(1) << 64).eval(&mut e).is_err());
        assert_eq!((Expr::I64(-1) << 63).eval(&mut e), Ok(I64(i64::MIN)));
        assert!((Expr::f32(1.0) & Expr::Int(1)).eval(&mut e).is_err());
        // Printed with the operations inside bit operators parenthesized.
        let printed = ((a.clone() + 1) << b.clone()) & 7;
        assert_eq!(
            printed.render(&|v| format!("v{}", v.0)),
            "((v0 + 1) << v1) & 7"
        );
    }

    #[test]
    fn f32_arithmetic_is_ieee_and_nan_is_an_error() {
        let mut e = env(&[7]);
        let x = Expr::Unary(UnaryOp::ToF32, Box::new(Expr::Var(VarId(0))));
        let third = Expr::binary(BinaryOp::Div, x.clone(), Expr::f32(3.0));
        assert_eq!(third.eval(&mut e), Ok(ScalarValue::F32(7.0f32 / 3.0)));
        let back = Expr::Unary(UnaryOp::ToI32, Box::new(third));
        assert_eq!(back.eval_i32(&mut e), Ok(2));
        let inf = Expr::binary(BinaryOp::Div, Expr::f32(1.0), Expr::f32(0.0));
        assert_eq!(inf.eval(&mut e), Ok(ScalarValue::F32(f32::INFINITY)));
        let nan = Expr::binary(BinaryOp::Sub, inf.clone(), inf.clone());
        assert!(matches!(nan.eval(&mut e), Err(EvalError::Arithmetic(m)) if m.contains("NaN")));
        let huge = Expr::Unary(UnaryOp::ToI32, Box::new(Expr::f32(3e9)));
        assert!(huge.eval(&mut e).is_err());
        let mixed = Expr::binary(BinaryOp::Add, Expr::f32(1.0), Expr::Int(1));
        assert!(mixed.eval(&mut e).is_err());
        let rem = Expr::binary(BinaryOp::Mod, Expr::f32(1.0), Expr::f32(1.0));
        assert!(rem.eval(&mut e).is_err());
    }

    #[test]
    fn i64_is_checked_and_promotes_i32_exactly() {
        let mut e = env(&[i32::MAX, 3]);
        let (a, b) = (Expr::Var(VarId(0)), Expr::Var(VarId(1)));
        let wide = Expr::Unary(UnaryOp::ToI64, Box::new(a.clone()));
        // i32::MAX * 3 overflows i32 but not i64; the i32 operand is promoted.
        let p = Expr::binary(BinaryOp::Mul, wide.clone(), b.clone());
        assert_eq!(p.eval(&mut e), Ok(ScalarValue::I64(i32::MAX as i64 * 3)));
        assert_eq!(p.eval_index(&mut e), Ok(i32::MAX as i64 * 3));
        let lt = Expr::binary(BinaryOp::Lt, b.clone(), Expr::i64(3_000_000_000));
        assert_eq!(lt.eval(&mut e), Ok(ScalarValue::Bool(true)));
        let m = Expr::binary(BinaryOp::Mod, Expr::i64(-7_000_000_000), b.clone());
        assert_eq!(m.eval(&mut e), Ok(ScalarValue::I64(-7_000_000_000 % 3)));
        let big = Expr::binary(BinaryOp::Mul, Expr::i64(i64::MAX / 2), 3);
        assert!(
            matches!(big.eval(&mut e), Err(EvalError::Arithmetic(m)) if m.contains("i64 overflow"))
        );
        let narrow = Expr::Unary(UnaryOp::ToI32, Box::new(p));
        assert!(
            matches!(narrow.eval(&mut e), Err(EvalError::Arithmetic(m)) if m.contains("does not fit an i32"))
        );
        let ok = Expr::Unary(UnaryOp::ToI32, Box::new(Expr::i64(-5)));
        assert_eq!(ok.eval(&mut e), Ok(ScalarValue::I32(-5)));
        let f = Expr::Unary(UnaryOp::ToI64, Box::new(Expr::f32(-3.0e9)));
        assert_eq!(f.eval(&mut e), Ok(ScalarValue::I64(-3_000_000_000)));
        let f = Expr::Unary(UnaryOp::ToI64, Box::new(Expr::f32(1e19)));
        assert!(f.eval(&mut e).is_err());
        let z = Expr::binary(BinaryOp::Div, Expr::i64(5), 0);
        assert!(
            matches!(z.eval(&mut e), Err(EvalError::Arithmetic(m)) if m.contains("division by zero"))
        );
    }

    #[test]
    fn lazy_logic_skips_the_failing_side() {
        let fails = Expr::binary(BinaryOp::Eq, Expr::binary(BinaryOp::Div, 1, 0), 0);
        let e = Expr::binary(BinaryOp::And, Expr::Bool(false), fails.clone());
        assert_eq!(e.eval(&mut env(&[])), Ok(ScalarValue::Bool(false)));
        let e = Expr::binary(BinaryOp::Or, Expr::Bool(false), fails);
        assert!(e.eval(&mut env(&[])).is_err());
    }
}
