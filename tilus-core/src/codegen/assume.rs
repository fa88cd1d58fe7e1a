//! Launch assumptions: conditions on the arguments that let the generated code use vectorized
//! memory accesses. The launcher checks them with [`super::CudaKernel::check_args`] and reports a
//! failure naming the argument, instead of launching a kernel that would fault or misbehave.

use super::{CudaKernel, ParamKind};
use crate::ir::{BinaryOp, Expr, UnaryOp};
use std::fmt;

/// The value of one launch argument, as the checks see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgValue {
    I32(i32),
    /// A device address.
    Pointer(u64),
}

/// One condition the generated code relies on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    /// Check this assumption against the arguments of `kernel`.
    pub fn check(&self, kernel: &CudaKernel, args: &[ArgValue]) -> Result<(), String> {
        match self {
            Assumption::Divisible { expr, divisor, .. } => {
                let v = eval_param_expr(kernel, expr, args)?;
                if v % divisor != 0 {
                    return Err(format!(
                        "kernel {} requires {self} (it uses {divisor}-element vector accesses), \
                         but {} gives {v}",
                        kernel.entry,
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
                                "argument {param} of kernel {}: address {addr:#x} is not aligned \
                                 to {bytes} bytes (the kernel uses {bytes}-byte vector accesses)",
                                kernel.entry
                            ));
                        }
                        Ok(())
                    }
                    _ => Err(format!(
                        "argument {param} of kernel {} must be a device pointer",
                        kernel.entry
                    )),
                }
            }
        }
    }
}

fn argument_list(kernel: &CudaKernel, expr: &Expr, args: &[ArgValue]) -> String {
    let mut out: Vec<String> = Vec::new();
    collect_vars(expr, &mut |v| {
        if let Some(i) = kernel.param_index(v) {
            if let Some(ArgValue::I32(x)) = args.get(i) {
                let s = format!("{} = {x}", kernel.params[i].ir_name);
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    });
    out.join(", ")
}

fn collect_vars(e: &Expr, f: &mut dyn FnMut(crate::ir::VarId)) {
    match e {
        Expr::Int(_) | Expr::Bool(_) => {}
        Expr::Var(v) => f(*v),
        Expr::Unary(_, a) => collect_vars(a, f),
        Expr::Binary(_, a, b) => {
            collect_vars(a, f);
            collect_vars(b, f);
        }
        Expr::Select(c, a, b) => {
            collect_vars(c, f);
            collect_vars(a, f);
            collect_vars(b, f);
        }
    }
}

/// Evaluate an expression over scalar parameters (booleans as 0/1), with C semantics.
pub(crate) fn eval_param_expr(
    kernel: &CudaKernel,
    e: &Expr,
    args: &[ArgValue],
) -> Result<i32, String> {
    let ev = |x: &Expr| eval_param_expr(kernel, x, args);
    Ok(match e {
        Expr::Int(v) => *v,
        Expr::Bool(b) => *b as i32,
        Expr::Var(v) => {
            let i = kernel.param_index(*v).ok_or_else(|| {
                format!("expression uses variable {} that is not a parameter", v.0)
            })?;
            match args.get(i) {
                Some(ArgValue::I32(x)) => *x,
                _ => {
                    return Err(format!(
                        "argument {} of kernel {} must be an i32",
                        kernel.params[i].ir_name, kernel.entry
                    ))
                }
            }
        }
        Expr::Unary(UnaryOp::Neg, a) => ev(a)?.wrapping_neg(),
        Expr::Unary(UnaryOp::Not, a) => (ev(a)? == 0) as i32,
        Expr::Select(c, a, b) => {
            if ev(c)? != 0 {
                ev(a)?
            } else {
                ev(b)?
            }
        }
        Expr::Binary(op, a, b) => {
            let (x, y) = (ev(a)?, ev(b)?);
            let overflow = || {
                format!(
                    "integer overflow evaluating a launch expression of {}",
                    kernel.entry
                )
            };
            match op {
                BinaryOp::Add => x.checked_add(y).ok_or_else(overflow)?,
                BinaryOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
                BinaryOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
                BinaryOp::Div | BinaryOp::Mod if y == 0 => {
                    return Err(format!(
                        "division by zero evaluating a launch expression of {}",
                        kernel.entry
                    ))
                }
                BinaryOp::Div => x.checked_div(y).ok_or_else(overflow)?,
                BinaryOp::Mod => x.checked_rem(y).ok_or_else(overflow)?,
                BinaryOp::Min => x.min(y),
                BinaryOp::Max => x.max(y),
                BinaryOp::Lt => (x < y) as i32,
                BinaryOp::Le => (x <= y) as i32,
                BinaryOp::Gt => (x > y) as i32,
                BinaryOp::Ge => (x >= y) as i32,
                BinaryOp::Eq => (x == y) as i32,
                BinaryOp::Ne => (x != y) as i32,
                BinaryOp::And => (x != 0 && y != 0) as i32,
                BinaryOp::Or => (x != 0 || y != 0) as i32,
            }
        }
    })
}
