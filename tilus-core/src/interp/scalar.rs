//! Uniform scalar expressions. `i32` arithmetic is checked: overflow and division by zero are
//! errors (the GPU would wrap or trap silently). `&&`, `||` and select evaluate lazily, as in C.

use super::memory::Value;
use crate::ir::{BinaryOp, Expr, UnaryOp, Var};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scalar {
    I32(i32),
    Bool(bool),
}

impl Scalar {
    pub fn value(self) -> Value {
        match self {
            Scalar::I32(v) => Value::I32(v),
            Scalar::Bool(b) => Value::Bool(b),
        }
    }
}

pub(super) fn eval(e: &Expr, env: &[Option<Value>], vars: &[Var]) -> Result<Scalar, String> {
    match e {
        Expr::Int(v) => Ok(Scalar::I32(*v)),
        Expr::Bool(b) => Ok(Scalar::Bool(*b)),
        Expr::Var(v) => {
            let name = || vars.get(v.0 as usize).map_or("?", |v| v.name.as_str());
            match env.get(v.0 as usize) {
                Some(Some(Value::I32(x))) => Ok(Scalar::I32(*x)),
                Some(Some(Value::Bool(b))) => Ok(Scalar::Bool(*b)),
                Some(Some(_)) => Err(format!("`{}` is not a scalar", name())),
                _ => Err(format!("`{}` has no value", name())),
            }
        }
        Expr::Unary(op, x) => match (op, eval(x, env, vars)?) {
            (UnaryOp::Neg, Scalar::I32(v)) => v
                .checked_neg()
                .map(Scalar::I32)
                .ok_or_else(|| format!("i32 overflow: -({v})")),
            (UnaryOp::Not, Scalar::Bool(b)) => Ok(Scalar::Bool(!b)),
            (op, v) => Err(format!("{op:?} of {v:?}")),
        },
        Expr::Binary(op, a, b) => {
            let lhs = eval(a, env, vars)?;
            match (op, lhs) {
                (BinaryOp::And, Scalar::Bool(false)) => return Ok(Scalar::Bool(false)),
                (BinaryOp::Or, Scalar::Bool(true)) => return Ok(Scalar::Bool(true)),
                _ => {}
            }
            binary(*op, lhs, eval(b, env, vars)?)
        }
        Expr::Select(c, a, b) => match eval(c, env, vars)? {
            Scalar::Bool(true) => eval(a, env, vars),
            Scalar::Bool(false) => eval(b, env, vars),
            v => Err(format!("select on {v:?}")),
        },
    }
}

fn binary(op: BinaryOp, a: Scalar, b: Scalar) -> Result<Scalar, String> {
    use Scalar::{Bool, I32};
    let sym = op.symbol();
    let overflow = |x: i32, y: i32| format!("i32 overflow: {x} {sym} {y}");
    Ok(match (a, b) {
        (I32(x), I32(y)) => match op {
            BinaryOp::Add => I32(x.checked_add(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Sub => I32(x.checked_sub(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Mul => I32(x.checked_mul(y).ok_or_else(|| overflow(x, y))?),
            BinaryOp::Div | BinaryOp::Mod if y == 0 => {
                return Err(format!("division by zero: {x} {sym} 0"))
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
            BinaryOp::And | BinaryOp::Or => return Err(format!("`{sym}` on i32 values")),
        },
        (Bool(x), Bool(y)) => match op {
            BinaryOp::And => Bool(x && y),
            BinaryOp::Or => Bool(x || y),
            BinaryOp::Eq => Bool(x == y),
            BinaryOp::Ne => Bool(x != y),
            _ => return Err(format!("`{sym}` on bool values")),
        },
        _ => return Err(format!("`{sym}` on values of different types")),
    })
}
