//! `item(x)` / `x.item()`, `gather(src, index)`, `gather_rows(src, index, dim)`,
//! `scatter(x, dst, index)`, `scatter_rows(x, dst, index, dim)` and the atomics `atomic_add(dst, index, x)` ..
//! `atomic_cas(dst, index, compare, x)`.

use syn::{Expr as SynExpr, ExprCall};
use tilus_core::ir::syntax::Op;
use tilus_core::ir::{AtomicOp, Expr, ProgramBuilder, ScalarType, VarType};

use super::super::expr::{build, Resolved, Scope};
use super::super::*;

impl Translator<'_, '_> {
    /// An argument that must be a global or shared tensor.
    fn memory_arg(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        instr: &str,
        role: &str,
    ) -> R<VarId> {
        self.table_arg(b, e, instr, role, false)
    }

    /// A global or shared tensor, or with `registers` also a register tensor (the table of
    /// `gather_rows`, read from other lanes by shuffles).
    fn table_arg(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        instr: &str,
        role: &str,
        registers: bool,
    ) -> R<VarId> {
        let text = e.to_token_stream().to_string();
        match self.value(b, e, DestHint::Temp)? {
            Value::Tensor(v)
                if matches!(
                    b.ty(v),
                    VarType::Global(_) | VarType::Shared(_) | VarType::Unknown
                ) || (registers && matches!(b.ty(v), VarType::Register(_))) =>
            {
                Ok(v)
            }
            Value::Pointer(_) => Err(self.err(
                e,
                format!("`{text}` is a kernel parameter; make a view of it first: `view_global({text}, [..])`"),
            )),
            Value::Poisoned => Err(Reported),
            other => {
                let found = match other {
                    Value::Tensor(v) => b.ty(v).describe().to_string(),
                    other => self.describe(&other),
                };
                let want = if registers {
                    "a global, shared or register tensor"
                } else {
                    "a global or shared tensor"
                };
                Err(self.err(
                    e,
                    format!("the {role} of `{instr}` must be {want}, but `{text}` is {found}"),
                ))
            }
        }
    }

    /// `item(x)`: the one element of a register tensor as a uniform scalar.
    pub(super) fn item_of<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        x: &SynExpr,
        dest: DestHint,
    ) -> R<Value> {
        let x = self.tensor_arg(b, x, "item", "operand", Scope::Register)?;
        let site = self.site(node);
        b.set_span(site);
        let name = match dest {
            DestHint::New(n) => self.unique(&format!("{n}_item")),
            _ => self.unique("item"),
        };
        let out = b.item(&name, x);
        let ty = match b.ty(out) {
            VarType::Scalar(t) => t,
            _ => ScalarType::I32,
        };
        Ok(Value::Scalar(Expr::Var(out), ty))
    }

    pub(super) fn addressing_call(
        &mut self,
        b: &mut ProgramBuilder,
        c: &ExprCall,
        op: Op,
        args: &[&SynExpr],
        name: &str,
        dest: DestHint,
    ) -> R<Value> {
        match op {
            Op::Item => self.item_of(b, c, args[0], dest),
            Op::Gather => {
                let src = self.memory_arg(b, args[0], name, "source");
                let index = self.tensor_arg(b, args[1], name, "index", Scope::Register);
                let (src, index) = (src?, index?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "gathered");
                Ok(Value::Tensor(build!(d, |d| b.gather(d, src, index))))
            }
            Op::Lookup => {
                let table = self.memory_arg(b, args[0], name, "table");
                let rows = self.tensor_arg(b, args[1], name, "rows", Scope::Register);
                let cols = self.tensor_arg(b, args[2], name, "columns", Scope::Register);
                let (table, rows, cols) = (table?, rows?, cols?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "looked_up");
                Ok(Value::Tensor(build!(d, |d| b.lookup(d, table, rows, cols))))
            }
            Op::GatherRows => {
                let src = self.table_arg(b, args[0], name, "source", true);
                let index = self.tensor_arg(b, args[1], name, "index", Scope::Register);
                let dim = self.const_dim(args[2], name, "widens");
                let (src, index, dim) = (src?, index?, dim?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "rows");
                Ok(Value::Tensor(
                    build!(d, |d| b.gather_rows(d, src, index, dim))
                ))
            }
            Op::Scatter => {
                let x = self.tensor_arg(b, args[0], name, "value", Scope::Register);
                let dst = self.memory_arg(b, args[1], name, "destination");
                let index = self.tensor_arg(b, args[2], name, "index", Scope::Register);
                let (x, dst, index) = (x?, dst?, index?);
                let site = self.site(c);
                b.set_span(site);
                b.scatter(x, dst, index);
                Ok(Value::Unit)
            }
            Op::ScatterRows => {
                let x = self.tensor_arg(b, args[0], name, "value", Scope::Register);
                let dst = self.memory_arg(b, args[1], name, "destination");
                let index = self.tensor_arg(b, args[2], name, "index", Scope::Register);
                let dim = self.const_dim(args[3], name, "narrows");
                let (x, dst, index, dim) = (x?, dst?, index?, dim?);
                let site = self.site(c);
                b.set_span(site);
                b.scatter_rows(x, dst, index, dim);
                Ok(Value::Unit)
            }
            Op::Atomic(op) => {
                let dst = self.memory_arg(b, args[0], name, "destination");
                let index = self.tensor_arg(b, args[1], name, "index", Scope::Register);
                let compare = if op == AtomicOp::Cas {
                    self.tensor_arg(b, args[2], name, "compared value", Scope::Register)
                        .map(Some)
                } else {
                    Ok(None)
                };
                let last = args[args.len() - 1];
                let x = self.tensor_arg(b, last, name, "value", Scope::Register);
                let (dst, index, compare, x) = (dst?, index?, compare?, x?);
                let site = self.site(c);
                b.set_span(site);
                // The old values are returned where the result is bound (`let old = ..`).
                let out = match dest {
                    DestHint::Temp => None,
                    d => Some(match self.dest(d, "old") {
                        Resolved::New(n) => n.into(),
                        Resolved::Existing(v) => v.into(),
                    }),
                };
                Ok(match b.atomic(op, dst, index, x, compare, out) {
                    Some(o) => Value::Tensor(o),
                    None => Value::Unit,
                })
            }
            _ => Err(self.err(c, "not an addressing instruction")),
        }
    }
}
