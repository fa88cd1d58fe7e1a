//! Launch assumptions: conditions on the arguments that let the generated code use vectorized
//! memory accesses. The launcher checks them with [`super::LaunchSpec::check_args`] and reports a
//! failure naming the argument, instead of launching a kernel that would fault or misbehave.

use super::{LaunchSpec, ParamKind};
use crate::ir::{EvalError, Expr, ScalarValue};
use std::fmt;

/// The value of one launch argument, as the checks see it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    I32(i32),
    I64(i64),
    F32(f32),
    Bool(bool),
    /// A device address.
    Pointer(u64),
}

/// One condition the generated code relies on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Assumption {
    /// `expr`, an expression over the program's scalar parameters, is a multiple of `divisor`.
    /// Displayed as e.g. `param k % 8 == 0` or `(n / 2) % 8 == 0`.
    Divisible {
        expr: Expr,
        /// `expr` rendered with parameter names.
        text: String,
        divisor: i32,
    },
    /// Pointer parameter `param` (its IR name) is aligned to `bytes`.
    /// Displayed as `pointer b aligned to 16 bytes`.
    Aligned { param: String, bytes: u32 },
}

impl fmt::Display for Assumption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Assumption::Divisible {
                expr: Expr::Var(_),
                text,
                divisor,
            } => write!(f, "param {text} % {divisor} == 0"),
            Assumption::Divisible { text, divisor, .. } => {
                write!(f, "({text}) % {divisor} == 0")
            }
            Assumption::Aligned { param, bytes } => {
                write!(f, "pointer {param} aligned to {bytes} bytes")
            }
        }
    }
}

impl Assumption {
    /// Check this assumption against the arguments of `kernel`. The message names the argument;
    /// the launcher prefixes the kernel and configuration.
    pub fn check(&self, kernel: &LaunchSpec, args: &[ArgValue]) -> Result<(), String> {
        match self {
            Assumption::Divisible { expr, divisor, .. } => {
                let v = eval_param_index(kernel, expr, args)?;
                if v % i64::from(*divisor) != 0 {
                    return Err(format!(
                        "the generated code requires {self} (it uses {divisor}-element vector \
                         accesses), but {} gives {v}",
                        argument_list(kernel, expr, args)
                    ));
                }
                Ok(())
            }
            Assumption::Aligned { param, bytes } => {
                let idx = kernel
                    .params
                    .iter()
                    .position(|p| {
                        &p.ir_name == param && matches!(p.kind, ParamKind::Pointer { .. })
                    })
                    .ok_or_else(|| {
                        format!("kernel {} has no pointer parameter {param}", kernel.entry)
                    })?;
                match args.get(idx) {
                    Some(ArgValue::Pointer(addr)) => {
                        if addr % u64::from(*bytes) != 0 {
                            return Err(format!(
                                "argument {param}: address {addr:#x} is not aligned to {bytes} \
                                 bytes (the kernel uses {bytes}-byte vector accesses)"
                            ));
                        }
                        Ok(())
                    }
                    _ => Err(format!("argument {param} must be a device pointer")),
                }
            }
        }
    }
}

fn argument_list(kernel: &LaunchSpec, expr: &Expr, args: &[ArgValue]) -> String {
    let mut out: Vec<String> = Vec::new();
    expr.visit_vars(&mut |v| {
        if let Some(i) = kernel.param_index(v) {
            let x = match args.get(i) {
                Some(ArgValue::I32(x)) => x.to_string(),
                Some(ArgValue::I64(x)) => x.to_string(),
                _ => return,
            };
            let s = format!("{} = {x}", kernel.params[i].ir_name);
            if !out.contains(&s) {
                out.push(s);
            }
        }
    });
    out.join(", ")
}

/// Evaluate an expression over scalar parameters with the IR's checked semantics
/// ([`Expr::eval`]); booleans count as 0/1. Grid and buffer sizes are `i32`s: an `i64` result
/// is an error.
pub(crate) fn eval_param_expr(
    kernel: &LaunchSpec,
    e: &Expr,
    args: &[ArgValue],
) -> Result<i32, String> {
    match eval_param(kernel, e, args)? {
        ScalarValue::I64(v) => Err(format!(
            "a launch expression of {} is the i64 {v}, not an i32",
            kernel.entry
        )),
        v => integer(kernel, v).map(|v| v as i32),
    }
}

/// [`eval_param_expr`] for an `i32` or `i64` expression (a divisibility condition on an offset).
pub(crate) fn eval_param_index(
    kernel: &LaunchSpec,
    e: &Expr,
    args: &[ArgValue],
) -> Result<i64, String> {
    integer(kernel, eval_param(kernel, e, args)?)
}

fn eval_param(kernel: &LaunchSpec, e: &Expr, args: &[ArgValue]) -> Result<ScalarValue, String> {
    e.eval(&mut |v| {
        let i = kernel.param_index(v).ok_or_else(|| {
            EvalError::Unbound(format!(
                "expression uses variable {} that is not a parameter",
                v.0
            ))
        })?;
        match args.get(i) {
            Some(ArgValue::I32(x)) => Ok(ScalarValue::I32(*x)),
            Some(ArgValue::I64(x)) => Ok(ScalarValue::I64(*x)),
            Some(ArgValue::F32(x)) => Ok(ScalarValue::F32(*x)),
            Some(ArgValue::Bool(x)) => Ok(ScalarValue::Bool(*x)),
            _ => Err(EvalError::Arithmetic(format!(
                "argument {} of kernel {} must be a scalar",
                kernel.params[i].ir_name, kernel.entry
            ))),
        }
    })
    .map_err(|e| format!("evaluating a launch expression of {}: {e}", kernel.entry))
}

fn integer(kernel: &LaunchSpec, value: ScalarValue) -> Result<i64, String> {
    Ok(match value {
        ScalarValue::I32(v) => v as i64,
        ScalarValue::I64(v) => v,
        ScalarValue::Bool(b) => b as i64,
        ScalarValue::F32(v) => {
            return Err(format!(
                "a launch expression of {} is the f32 {v}, not an integer",
                kernel.entry
            ))
        }
    })
}
