//! Elementwise math (`exp(x)`, `not(x)`, ...), comparisons (`lt(x, y)`, `x < y`), `select`
//! (`where`, a Rust keyword, so it is spelled `select` or `where_`), `arange`, and the bit
//! operators `& | ^ << >>` on tensors.

use syn::{BinOp, Expr as SynExpr, ExprCall};
use tilus_core::ir::syntax::Op;
use tilus_core::ir::{BinaryOp, CmpOp, ElementOp, Operand, ProgramBuilder, ScalarType};

use super::expr::{build, Scope};
use super::*;

/// The elementwise operator of a Rust bit operator on tensors.
pub fn bit_op(op: &BinOp) -> Option<ElementOp> {
    Some(match op {
        BinOp::BitAnd(_) => ElementOp::And,
        BinOp::BitOr(_) => ElementOp::Or,
        BinOp::BitXor(_) => ElementOp::Xor,
        BinOp::Shl(_) => ElementOp::Shl,
        BinOp::Shr(_) => ElementOp::Shr,
        _ => return None,
    })
}

/// A bit operator on `i32` constants, folded when the kernel is compiled (`(1 << BITS) - 1`);
/// `Err` for a shift outside `0..32` or one that loses set bits.
pub fn fold_bits(op: ElementOp, a: i32, c: i32) -> Result<i32, String> {
    let shift = || {
        u32::try_from(c)
            .ok()
            .filter(|&s| s < 32)
            .ok_or_else(|| format!("a shift by {c} (constants shift by 0 to 31)"))
    };
    Ok(match op {
        ElementOp::And => a & c,
        ElementOp::Or => a | c,
        ElementOp::Xor => a ^ c,
        ElementOp::Shr => a >> shift()?,
        ElementOp::Shl => {
            let s = shift()?;
            let r = a.wrapping_shl(s);
            if r >> s != a {
                return Err(format!("`{a} << {c}` overflows i32"));
            }
            r
        }
        _ => return Err(format!("`{}` is not a bit operator", op.name())),
    })
}

fn int(t: ScalarType) -> bool {
    matches!(t, ScalarType::I32 | ScalarType::I64)
}

/// The type of a bit operation on integer scalars of types `a` and `b`.
fn wider(a: ScalarType, b: ScalarType) -> ScalarType {
    if a == ScalarType::I64 || b == ScalarType::I64 {
        ScalarType::I64
    } else {
        ScalarType::I32
    }
}

/// The comparison of a scalar comparison operator, for tensors.
pub fn cmp_op(op: BinaryOp) -> Option<CmpOp> {
    Some(match op {
        BinaryOp::Lt => CmpOp::Lt,
        BinaryOp::Le => CmpOp::Le,
        BinaryOp::Gt => CmpOp::Gt,
        BinaryOp::Ge => CmpOp::Ge,
        BinaryOp::Eq => CmpOp::Eq,
        BinaryOp::Ne => CmpOp::Ne,
        _ => return None,
    })
}

impl Translator<'_, '_> {
    /// `Op::Math`, `Op::Compare`, `Op::Select` and `Op::Arange` calls (arity already checked).
    pub(super) fn math_call(
        &mut self,
        b: &mut ProgramBuilder,
        c: &ExprCall,
        op: Op,
        args: &[&SynExpr],
        name: &str,
        dest: DestHint,
    ) -> R<Value> {
        match op {
            Op::Math(m) => {
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register)?;
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, m.name());
                Ok(Value::Tensor(build!(d, |d| b.unary(d, m, x))))
            }
            Op::Compare(cmp) => {
                let x = self.tensor_arg(b, args[0], name, "first operand", Scope::Register);
                let y = self.value(b, args[1], DestHint::Temp);
                let (x, y) = (x?, y?);
                let rhs = self.operand(args[1], y)?;
                self.compare_instr(b, c, cmp, x, rhs, dest)
            }
            Op::Select => {
                let cond = self.tensor_arg(b, args[0], name, "condition", Scope::Register);
                let x = self.tensor_arg(b, args[1], name, "first choice", Scope::Register);
                let y = self.value(b, args[2], DestHint::Temp);
                let (cond, x, y) = (cond?, x?, y?);
                let other = self.operand(args[2], y)?;
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "sel");
                Ok(Value::Tensor(build!(d, |d| b.select(
                    d,
                    cond,
                    x,
                    other.clone()
                ))))
            }
            Op::Arange => {
                let layout = self.layout_arg(b, args[0], name);
                let dim = match self.const_int(args[1]) {
                    Some(d) if d >= 0 => Ok(d as usize),
                    _ => Err(self.err(
                        args[1],
                        "the dimension of `arange` is a non-negative constant",
                    )),
                };
                let offset = self.scalar(b, args[2], ScalarType::I32);
                let (layout, dim, offset) = (layout?, dim?, offset?);
                let site = self.site_with(c, Some(args[0]), None);
                b.set_span(site);
                let d = self.dest(dest, "idx");
                Ok(Value::Tensor(build!(d, |d| b.arange(
                    d,
                    layout.clone(),
                    dim,
                    offset.clone()
                ))))
            }
            _ => Err(self.err(c, "not an elementwise math instruction")),
        }
    }

    /// `x op y` for tensors, a `u1` mask.
    pub(super) fn compare_instr<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        op: CmpOp,
        x: VarId,
        rhs: Operand,
        dest: DestHint,
    ) -> R<Value> {
        if self.in_grid {
            return Err(self.err(node, "the grid can only use scalars"));
        }
        self.expect_scope(b, node, x, Scope::Register, "a comparison")?;
        let site = self.site(node);
        b.set_span(site);
        let d = self.dest(dest, "mask");
        Ok(Value::Tensor(build!(d, |d| b.compare(
            d,
            op,
            x,
            rhs.clone()
        ))))
    }

    /// `x & y`, `x << y`, ...: the left operand must be a register tensor.
    pub(super) fn bit_binary(
        &mut self,
        b: &mut ProgramBuilder,
        bin: &syn::ExprBinary,
        op: ElementOp,
        dest: DestHint,
    ) -> R<Value> {
        let lhs = self.value(b, &bin.left, DestHint::Temp);
        let rhs = self.value(b, &bin.right, DestHint::Temp);
        match (lhs?, rhs?) {
            (Value::Poisoned, _) | (_, Value::Poisoned) => Ok(Value::Poisoned),
            (Value::Tensor(x), r) => {
                let operand = self.operand(bin.right.as_ref(), r)?;
                self.elementwise(b, bin, op, x, operand, dest)
            }
            // Integer constants fold (`(1 << BITS) - 1`).
            (
                Value::Scalar(Expr::Int(x), ScalarType::I32),
                Value::Scalar(Expr::Int(y), ScalarType::I32),
            ) => fold_bits(op, x, y)
                .map(|v| Value::Scalar(Expr::Int(v), ScalarType::I32))
                .map_err(|e| self.err(bin, e)),
            // Run-time integer scalars (`tile & 1`, `lane >> 2`): shifts keep the left
            // operand's type, the others promote an i32 mixed with an i64.
            (Value::Scalar(a, ta), Value::Scalar(c, tc)) if int(ta) && int(tc) => {
                let (sop, ty) = match op {
                    ElementOp::And => (BinaryOp::BitAnd, wider(ta, tc)),
                    ElementOp::Or => (BinaryOp::BitOr, wider(ta, tc)),
                    ElementOp::Xor => (BinaryOp::BitXor, wider(ta, tc)),
                    ElementOp::Shl => (BinaryOp::Shl, ta),
                    _ => (BinaryOp::Shr, ta),
                };
                Ok(Value::Scalar(Expr::binary(sop, a, c), ty))
            }
            (l, _) => {
                let found = self.describe(&l);
                Err(self.err(
                    bin,
                    format!(
                        "`{}` applies to integer tensors (write `{}(x, y)`) and integer scalars, found {found} on the left",
                        bin.op.to_token_stream(),
                        op.name()
                    ),
                ))
            }
        }
    }
}
