//! Rules of the elementwise math, comparison, `select` and `arange` instructions.

use super::dot::broadcast_thread_local;
use super::Checker;
use crate::dtype::Kind;
use crate::ir::{Expr, MathOp, Operand, ScalarType, SpanId, VarId};
use crate::layout::Layout;
use crate::DType;

impl Checker<'_> {
    /// Float functions take f16, bf16 and f32 tensors; `not` and `popc` integer tensors.
    pub(super) fn check_unary(&mut self, out: VarId, op: MathOp, x: VarId, span: SpanId) {
        let name = op.name();
        let r = self.reg(x, span, name, "the operand");
        if let Some(r) = r {
            let ok = if op.is_integer() {
                r.dtype.kind() != Kind::Float
            } else {
                matches!(r.dtype, DType::F16 | DType::BF16 | DType::F32)
            };
            if !ok {
                let want = if op.is_integer() {
                    "integer tensors"
                } else {
                    "f16, bf16 and f32 tensors"
                };
                let msg = format!(
                    "{name} is defined for {want}, but {} holds {}",
                    self.name(x),
                    r.dtype
                );
                self.err(span, msg);
            }
        }
        self.define(out, r.is_some(), span, name);
    }

    /// Like `Binary`: the right operand has the left's dtype and broadcasts to it.
    pub(super) fn check_compare(
        &mut self,
        out: VarId,
        lhs: VarId,
        rhs: &Operand,
        span: SpanId,
        name: &str,
    ) {
        let l = self.reg(lhs, span, name, "the left operand");
        self.check_rhs(lhs, l, rhs, span, name);
        self.define(out, l.is_some(), span, name);
    }

    /// `cond` is a u1 mask broadcasting to `a`; `b` is a right operand of `a`.
    pub(super) fn check_select(
        &mut self,
        out: VarId,
        cond: VarId,
        a: VarId,
        b: &Operand,
        span: SpanId,
    ) {
        let name = "select";
        let c = self.reg(cond, span, name, "the condition");
        let ra = self.reg(a, span, name, "the first choice");
        self.check_rhs(a, ra, b, span, name);
        if let Some(c) = c {
            if c.dtype != DType::UInt(1) {
                let msg = format!(
                    "select: the condition {} must be a u1 mask (from lt, eq, ...), but it holds {}",
                    self.name(cond),
                    c.dtype
                );
                self.err(span, msg);
            }
            if let Some(ra) = ra {
                if self.block_threads > 0 {
                    if let Err(e) =
                        broadcast_thread_local(&ra.layout, &c.layout, self.block_threads)
                    {
                        let msg = format!(
                            "select: the condition {} cannot be broadcast to {} in registers: {e}",
                            self.name(cond),
                            self.name(a)
                        );
                        self.err(span, msg);
                    }
                }
            }
        }
        self.define(out, ra.is_some(), span, name);
    }

    pub(super) fn check_arange(
        &mut self,
        out: VarId,
        layout: &Layout,
        dim: usize,
        offset: &Expr,
        span: SpanId,
    ) {
        let what = format!("arange {}", self.name(out));
        self.check_layout(layout, span, &what);
        let rank = layout.shape().len();
        if dim >= rank {
            self.err(
                span,
                format!("{what}: dimension {dim} is outside the layout's rank {rank}"),
            );
        }
        self.expect_expr(offset, ScalarType::I32, span, "the offset of arange");
        self.define(out, true, span, "arange");
    }
}
