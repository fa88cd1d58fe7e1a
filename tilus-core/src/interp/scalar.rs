//! Uniform scalar expressions in the interpreter: the IR's one evaluator
//! ([`crate::ir::Expr::eval`]) over a block's variable environment.

use super::memory::Value;
use crate::ir::{EvalError, Expr, ScalarValue, Var};

pub(super) use crate::ir::ScalarValue as Scalar;

impl Scalar {
    pub(super) fn value(self) -> Value {
        match self {
            Scalar::I32(v) => Value::I32(v),
            Scalar::I64(v) => Value::I64(v),
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::F32(v) => Value::F32(v),
        }
    }
}

pub(super) fn eval(e: &Expr, env: &[Option<Value>], vars: &[Var]) -> Result<Scalar, String> {
    e.eval(&mut |v| {
        let name = || vars.get(v.0 as usize).map_or("?", |v| v.name.as_str());
        match env.get(v.0 as usize) {
            Some(Some(Value::I32(x))) => Ok(ScalarValue::I32(*x)),
            Some(Some(Value::I64(x))) => Ok(ScalarValue::I64(*x)),
            Some(Some(Value::Bool(b))) => Ok(ScalarValue::Bool(*b)),
            Some(Some(Value::F32(x))) => Ok(ScalarValue::F32(*x)),
            Some(Some(_)) => Err(EvalError::Arithmetic(format!(
                "`{}` is not a scalar",
                name()
            ))),
            _ => Err(EvalError::Unbound(format!("`{}` has no value", name()))),
        }
    })
    .map_err(|e| e.to_string())
}
