//! Instruction calls, named after the paper's Table 1.

mod addressing;

use syn::{Expr as SynExpr, ExprCall, GenericArgument, PathArguments, Type};
use tilus_core::ir::syntax::{self, Family, Op, Syntax};
use tilus_core::ir::{BinaryOp, ElementOp, Expr, ProgramBuilder, ScalarType, VarType};
use tilus_core::layout::{SharedLayout, Swizzle};
use tilus_core::DType;

use super::expr::{build, Scope};
use super::*;

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Global => "a global tensor",
        Scope::Shared => "a shared tensor",
        Scope::Register => "a register tensor",
        Scope::SharedOrRegister => "a register or shared tensor",
    }
}

impl Translator<'_, '_> {
    /// Check that `var` lives in `scope`.
    pub(super) fn expect_scope<T: ToTokens + 'static>(
        &mut self,
        b: &ProgramBuilder,
        node: &T,
        var: VarId,
        scope: Scope,
        what: &str,
    ) -> R<()> {
        let ty = b.ty(var);
        let ok = matches!(
            (&ty, scope),
            (VarType::Unknown, _)
                | (VarType::Global(_), Scope::Global)
                | (VarType::Shared(_), Scope::Shared | Scope::SharedOrRegister)
                | (
                    VarType::Register(_),
                    Scope::Register | Scope::SharedOrRegister
                )
        );
        if ok {
            Ok(())
        } else {
            Err(self.err(
                node,
                format!(
                    "{what} needs {}, found {}",
                    scope_name(scope),
                    ty.describe()
                ),
            ))
        }
    }

    /// An argument that must be a tensor in `scope`.
    pub(super) fn tensor_arg(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        instr: &str,
        role: &str,
        scope: Scope,
    ) -> R<VarId> {
        let text = e.to_token_stream().to_string();
        match self.value(b, e, DestHint::Temp)? {
            Value::Tensor(v) => {
                let ty = b.ty(v);
                let ok = matches!(
                    (&ty, scope),
                    (VarType::Unknown, _)
                        | (VarType::Global(_), Scope::Global)
                        | (VarType::Shared(_), Scope::Shared | Scope::SharedOrRegister)
                        | (VarType::Register(_), Scope::Register | Scope::SharedOrRegister)
                );
                if ok {
                    Ok(v)
                } else {
                    Err(self.err(
                        e,
                        format!(
                            "the {role} of `{instr}` must be {}, but `{text}` is {}",
                            scope_name(scope),
                            ty.describe()
                        ),
                    ))
                }
            }
            Value::Pointer(_) if scope == Scope::Global => Err(self.err(
                e,
                format!("`{text}` is a kernel parameter; make a view of it first: `view_global({text}, [..])`"),
            )),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(
                    e,
                    format!("the {role} of `{instr}` must be {}, found {found}", scope_name(scope)),
                ))
            }
        }
    }

    pub(super) fn layout_arg(
        &mut self,
        b: &mut ProgramBuilder,
        e: &SynExpr,
        instr: &str,
    ) -> R<Layout> {
        match self.value(b, e, DestHint::Temp)? {
            Value::Layout(l, _) => Ok(l),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(
                    e,
                    format!("`{instr}` expects a layout here, e.g. `layout!(spatial(8, 4))`; found {found}"),
                ))
            }
        }
    }

    fn array_arg(&mut self, b: &mut ProgramBuilder, e: &SynExpr, what: &str) -> R<Vec<Expr>> {
        match self.value(b, e, DestHint::Temp)? {
            Value::Array(a) => Ok(a),
            Value::Poisoned => Err(Reported),
            other => {
                let found = self.describe(&other);
                Err(self.err(
                    e,
                    format!("expected {what} as an array `[..]`, found {found}"),
                ))
            }
        }
    }

    /// Global extents are `i32` (strides derive from them and stay `int`): an `i64` extent is
    /// an error at its element of the array `arg`.
    fn i32_extents(
        &mut self,
        b: &ProgramBuilder,
        arg: &SynExpr,
        shape: &[Expr],
        instr: &str,
    ) -> R<()> {
        let ty = |v: VarId| match b.ty(v) {
            VarType::Scalar(s) => Some(s),
            _ => None,
        };
        let mut bad = false;
        for (d, e) in shape.iter().enumerate() {
            if e.scalar_type(&ty) != Some(ScalarType::I64) {
                continue;
            }
            let node: &SynExpr = match arg {
                SynExpr::Array(a) => a.elems.iter().nth(d).unwrap_or(arg),
                _ => arg,
            };
            let text = quote::quote!(#node).to_string();
            let _ = self.err(
                node,
                format!(
                    "view extents are i32; extent {d} of `{instr}` (`{text}`) is an i64 scalar: \
                     narrow it with `as i32` (offsets may be i64, extents and strides may not)"
                ),
            );
            bad = true;
        }
        if bad {
            Err(Reported)
        } else {
            Ok(())
        }
    }

    /// Extents known at compile time (shared tiles, slices).
    fn const_shape(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<Vec<usize>> {
        let items = self.array_arg(b, e, "the extents")?;
        let mut out = Vec::new();
        for x in items {
            match x {
                Expr::Int(v) if v > 0 => out.push(v as usize),
                Expr::Int(v) => {
                    return Err(self.err(e, format!("extents must be positive, found {v}")))
                }
                _ => {
                    return Err(self.err(
                        e,
                        "shared-memory extents must be constants (integers and tile parameters)",
                    ))
                }
            }
        }
        Ok(out)
    }

    /// A constant list of dimension indices (`permute_shared`'s `[1, 0]`).
    fn const_dims(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<Vec<usize>> {
        let items = self.array_arg(b, e, "the dimensions")?;
        items
            .into_iter()
            .map(|x| match x {
                Expr::Int(v) if v >= 0 => Ok(v as usize),
                _ => Err(self.err(e, "dimensions are non-negative constants")),
            })
            .collect()
    }

    /// The `::<T>` of an instruction.
    fn dtype_targ(
        &mut self,
        c: &ExprCall,
        seg: &syn::PathSegment,
        required: bool,
    ) -> R<Option<DType>> {
        let args: Vec<&GenericArgument> = match &seg.arguments {
            PathArguments::AngleBracketed(a) => a.args.iter().collect(),
            PathArguments::None => Vec::new(),
            PathArguments::Parenthesized(p) => {
                return Err(self.err(p, "expected `::<T>`"));
            }
        };
        match args.as_slice() {
            [] if required => Err(self.err(
                c,
                format!(
                    "`{}` needs a data type: `{}`",
                    seg.ident,
                    syntax::lookup(&seg.ident.to_string()).map_or("", |s| s.usage)
                ),
            )),
            [] => Ok(None),
            [GenericArgument::Type(Type::Path(p))] if p.path.get_ident().is_some() => {
                let name = p
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                if let Some(Binding::DType(d)) = self.lookup(&name) {
                    return Ok(Some(*d));
                }
                match crate::dtypes::parse(&name) {
                    Ok(d) => Ok(Some(d)),
                    Err(msg) => Err(self.err(p, msg)),
                }
            }
            [other, ..] => Err(self.err(*other, "expected one data type, e.g. `::<f16>`")),
        }
    }

    fn arity(&mut self, c: &ExprCall, name: &str, syntax: &Syntax) -> R<()> {
        let (min, max) = syntax.arity;
        let n = c.args.len();
        if n >= min && n <= max {
            return Ok(());
        }
        let want = if min == max {
            format!("{min} argument{}", if min == 1 { "" } else { "s" })
        } else {
            format!("{min} or {max} arguments")
        };
        Err(self.err(
            c,
            format!("`{name}` takes {want}: `{}`; found {n}", syntax.usage),
        ))
    }

    pub(super) fn call(
        &mut self,
        b: &mut ProgramBuilder,
        c: &ExprCall,
        dest: DestHint,
    ) -> R<Value> {
        let seg = match &*c.func {
            SynExpr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
                &p.path.segments[0]
            }
            other => return Err(self.err(other, "expected an instruction name")),
        };
        let name = seg.ident.to_string();
        if let Some(h) = self.helper(&name) {
            return self.call_helper(b, c, &h, dest);
        }
        if self.failed_helpers.contains(&name) {
            return Err(Reported);
        }
        let args: Vec<&SynExpr> = c.args.iter().collect();
        let Some(syntax) = syntax::lookup(&name) else {
            return Err(self.err(&seg.ident, unknown_instruction(&name)));
        };
        if self.in_grid && syntax.family != Family::Scalar && !matches!(syntax.op, Op::MinMax(_)) {
            return Err(self.err(
                c,
                "the grid is computed from `i32` parameters and tile parameters, with + - * / % and `cdiv`, `min`, `max`",
            ));
        }
        self.arity(c, &name, syntax)?;
        // Messages name the instruction as the user spelled it.
        let name = name.as_str();
        match syntax.op {
            Op::Cdiv => {
                let x = self.scalar(b, args[0], ScalarType::I32);
                let y = self.scalar(b, args[1], ScalarType::I32);
                let (x, y) = (x?, y?);
                match (&x, &y) {
                    (_, Expr::Int(0)) => Err(self.err(args[1], "division by zero")),
                    (Expr::Int(p), Expr::Int(q)) => {
                        let sum = p
                            .checked_add(q - 1)
                            .ok_or(())
                            .map_err(|_| self.err(c, "`cdiv` overflows i32"))?;
                        Ok(Value::Scalar(Expr::Int(sum / q), ScalarType::I32))
                    }
                    _ => Ok(Value::Scalar(Expr::cdiv(x, y), ScalarType::I32)),
                }
            }
            Op::Gcd => match (self.const_int(args[0]), self.const_int(args[1])) {
                (Some(x), Some(y)) => Ok(Value::Scalar(Expr::Int(gcd(x, y)), ScalarType::I32)),
                _ => Err(self.err(c, "`gcd` takes constants (integers and tile parameters)")),
            },
            Op::MinMax(op) => {
                let op = if op == ElementOp::Min {
                    BinaryOp::Min
                } else {
                    BinaryOp::Max
                };
                self.min_max(b, c, op, args[0], args[1], dest)
            }
            Op::Binary(op) => {
                let x = self.tensor_arg(b, args[0], name, "first operand", Scope::Register);
                let y = self.value(b, args[1], DestHint::Temp);
                let (x, y) = (x?, y?);
                let rhs = self.operand(args[1], y)?;
                self.elementwise(b, c, op, x, rhs, dest)
            }
            Op::MulAdd => {
                let x = self.tensor_arg(b, args[0], name, "first operand", Scope::Register);
                let y = self.value(b, args[1], DestHint::Temp);
                let z = self.tensor_arg(b, args[2], name, "addend", Scope::Register);
                let (x, y, z) = (x?, y?, z?);
                let rhs = self.operand(args[1], y)?;
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "mul_add");
                Ok(Value::Tensor(build!(d, |d| b.mul_add(
                    d,
                    x,
                    rhs.clone(),
                    z
                ))))
            }
            Op::Neg => {
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register)?;
                self.neg(b, c, x, dest)
            }
            Op::Math(_) | Op::Compare(_) | Op::Select | Op::Arange => {
                self.math_call(b, c, syntax.op, &args, name, dest)
            }
            Op::BlockIndices => Err(self.err(
                c,
                "bind the block indices with a pattern: `let [bi, bj] = block_indices();`",
            )),
            Op::ViewGlobal => {
                let dtype = self.dtype_targ(c, seg, false);
                let ptr = match self.value(b, args[0], DestHint::Temp) {
                    Ok(Value::Pointer(p)) => Ok(p),
                    Ok(Value::Poisoned) | Err(_) => Err(Reported),
                    Ok(other) => {
                        let found = self.describe(&other);
                        Err(self.err(
                            args[0],
                            format!("`view_global` views a `Global<T>`/`GlobalMut<T>` kernel parameter, found {found}"),
                        ))
                    }
                };
                let shape = self.array_arg(b, args[1], "the extents");
                let (dtype, ptr, shape) = (dtype?, ptr?, shape?);
                self.i32_extents(b, args[1], &shape, "view_global")?;
                let dtype = match (dtype, b.ty(ptr)) {
                    (Some(d), _) => d,
                    (None, VarType::Pointer { dtype, .. }) => dtype,
                    _ => return Err(Reported),
                };
                let site = self.site(c);
                b.set_span(site);
                let n = self.dest_name(dest, "view")?;
                Ok(Value::Tensor(b.view_global(&n, ptr, dtype, shape)))
            }
            Op::AllocateGlobal => {
                let dtype = self.dtype_targ(c, seg, true);
                let shape = self.array_arg(b, args[0], "the extents");
                let (dtype, shape) = (dtype?, shape?);
                self.i32_extents(b, args[0], &shape, "allocate_global")?;
                let site = self.site(c);
                b.set_span(site);
                let n = self.dest_name(dest, "scratch")?;
                Ok(Value::Tensor(b.allocate_global(
                    &n,
                    dtype.unwrap_or(DType::F32),
                    shape,
                )))
            }
            Op::AllocateRegister => {
                let dtype = self.dtype_targ(c, seg, true);
                let layout = self.layout_arg(b, args[0], name);
                let init = match args.get(1) {
                    None => Ok(None),
                    Some(e) => match self.value(b, e, DestHint::Temp) {
                        Ok(Value::Float(f)) => Ok(Some(f)),
                        Ok(Value::Scalar(Expr::Int(i), ScalarType::I32)) => Ok(Some(i as f64)),
                        Ok(Value::Poisoned) | Err(_) => Err(Reported),
                        Ok(_) => Err(self.err(
                            *e,
                            "the initial value of a register tensor is a constant, e.g. `0.0`",
                        )),
                    },
                };
                let (dtype, layout, init) = (dtype?, layout?, init?);
                let site = self.site_with(c, Some(args[0]), None);
                b.set_span(site);
                let d = self.dest(dest, "regs");
                let dtype = dtype.unwrap_or(DType::F32);
                let out = build!(d, |d| b.allocate_register(d, dtype, layout.clone(), init));
                self.check_replicated(args[0], &layout, "compute", out);
                Ok(Value::Tensor(out))
            }
            Op::AllocateShared => {
                let dtype = self.dtype_targ(c, seg, true);
                let shape = self.const_shape(b, args[0]);
                let swizzle = match args.get(1) {
                    None => Ok(None),
                    Some(e) => self.swizzle(e).map(Some),
                };
                let (dtype, shape, swizzle) = (dtype?, shape?, swizzle?);
                let mut strides = vec![1usize; shape.len()];
                for i in (0..shape.len().saturating_sub(1)).rev() {
                    strides[i] = strides[i + 1] * shape[i + 1];
                }
                let site = self.site(c);
                b.set_span(site);
                let n = self.dest_name(dest, "smem")?;
                let layout = SharedLayout {
                    shape,
                    strides,
                    swizzle,
                };
                Ok(Value::Tensor(b.allocate_shared(
                    &n,
                    dtype.unwrap_or(DType::F16),
                    layout,
                )))
            }
            Op::LoadGlobal | Op::LoadShared => {
                let scope = if syntax.op == Op::LoadGlobal {
                    Scope::Global
                } else {
                    Scope::Shared
                };
                let src = self.tensor_arg(b, args[0], name, "source", scope);
                let layout = self.layout_arg(b, args[1], name);
                let offset = self.array_arg(b, args[2], "the offset");
                let fill = match args.get(3) {
                    None => Ok(None),
                    Some(e) if scope == Scope::Global => self.fill_arg(b, e).map(Some),
                    Some(e) => Err(self.err(
                        *e,
                        "`load_shared` reads inside the tile and takes no fill value",
                    )),
                };
                let (src, layout, offset, fill) = (src?, layout?, offset?, fill?);
                let site = self.site_with(c, Some(args[1]), Some(Range::of(args[2])));
                b.set_span(site);
                let d = self.dest(dest, "tile");
                let out = if let Some(f) = fill {
                    build!(d, |d| b.load_global_fill(
                        d,
                        src,
                        layout.clone(),
                        offset.clone(),
                        f
                    ))
                } else if scope == Scope::Global {
                    build!(d, |d| b.load_global(d, src, layout.clone(), offset.clone()))
                } else {
                    build!(d, |d| b.load_shared(d, src, layout.clone(), offset.clone()))
                };
                self.check_replicated(args[1], &layout, "load", out);
                Ok(Value::Tensor(out))
            }
            Op::StoreGlobal | Op::StoreShared => {
                let scope = if syntax.op == Op::StoreGlobal {
                    Scope::Global
                } else {
                    Scope::Shared
                };
                let x = self.tensor_arg(b, args[0], name, "value", Scope::Register);
                let dst = self.tensor_arg(b, args[1], name, "destination", scope);
                let offset = self.array_arg(b, args[2], "the offset");
                let (x, dst, offset) = (x?, dst?, offset?);
                let site = self.site_with(c, None, Some(Range::of(args[2])));
                b.set_span(site);
                if scope == Scope::Global {
                    b.store_global(x, dst, offset);
                } else {
                    b.store_shared(x, dst, offset);
                }
                Ok(Value::Unit)
            }
            Op::SliceShared => {
                let src = self.tensor_arg(b, args[0], name, "source", Scope::Shared);
                let offset = self.array_arg(b, args[1], "the offset");
                let shape = self.const_shape(b, args[2]);
                let (src, offset, shape) = (src?, offset?, shape?);
                let site = self.site_with(c, None, Some(Range::of(args[1])));
                b.set_span(site);
                let n = self.dest_name(dest, "slice")?;
                Ok(Value::Tensor(b.slice_shared(&n, src, offset, shape)))
            }
            Op::PermuteShared => {
                let src = self.tensor_arg(b, args[0], name, "source", Scope::Shared);
                let dims = self.const_dims(b, args[1]);
                let (src, dims) = (src?, dims?);
                let site = self.site_with(c, None, Some(Range::of(args[1])));
                b.set_span(site);
                let n = self.dest_name(dest, "permuted")?;
                Ok(Value::Tensor(b.permute_shared(&n, src, dims)))
            }
            Op::CopyAsync => {
                let src = self.tensor_arg(b, args[0], name, "source", Scope::Global);
                let dst = self.tensor_arg(b, args[1], name, "destination", Scope::Shared);
                let offset = self.array_arg(b, args[2], "the offset");
                let (src, dst, offset) = (src?, dst?, offset?);
                let site = self.site_with(c, None, Some(Range::of(args[2])));
                b.set_span(site);
                b.copy_async(dst, src, offset);
                Ok(Value::Unit)
            }
            Op::Mbarriers => {
                let count = match self.const_int(args[0]) {
                    Some(n) if n >= 1 => Ok(n as u32),
                    _ => Err(self.err(args[0], "the number of barriers is a positive constant")),
                };
                let arrivals = match self.const_int(args[1]) {
                    Some(n) if n >= 1 => Ok(n as u32),
                    _ => Err(self.err(
                        args[1],
                        "the arrivals per phase are a positive constant (each tma_load is one, each mbarrier_arrive one per warp)",
                    )),
                };
                let (count, arrivals) = (count?, arrivals?);
                let site = self.site(c);
                b.set_span(site);
                let n = self.dest_name(dest, "barriers")?;
                Ok(Value::Tensor(b.mbarriers(&n, count, arrivals)))
            }
            Op::TmaLoad => {
                let src = self.tensor_arg(b, args[0], name, "source", Scope::Global);
                let dst = self.tensor_arg(b, args[1], name, "destination", Scope::Shared);
                let offset = self.array_arg(b, args[2], "the offset");
                let bars = self.tensor_arg(b, args[3], name, "barriers", Scope::Shared);
                let index = self.scalar(b, args[4], ScalarType::I32);
                let (src, dst, offset, bars, index) = (src?, dst?, offset?, bars?, index?);
                let site = self.site_with(c, None, Some(Range::of(args[2])));
                b.set_span(site);
                b.tma_load(src, dst, offset, bars, index);
                Ok(Value::Unit)
            }
            Op::TmaStore => {
                let src = self.tensor_arg(b, args[0], name, "source", Scope::Shared);
                let dst = self.tensor_arg(b, args[1], name, "destination", Scope::Global);
                let offset = self.array_arg(b, args[2], "the offset");
                let (src, dst, offset) = (src?, dst?, offset?);
                let site = self.site_with(c, None, Some(Range::of(args[2])));
                b.set_span(site);
                b.tma_store(src, dst, offset);
                Ok(Value::Unit)
            }
            Op::TmaStoreWait => {
                let site = self.site(c);
                b.set_span(site);
                b.tma_store_wait();
                Ok(Value::Unit)
            }
            Op::MbarrierArrive => {
                let bars = self.tensor_arg(b, args[0], name, "barriers", Scope::Shared);
                let index = self.scalar(b, args[1], ScalarType::I32);
                let (bars, index) = (bars?, index?);
                let site = self.site(c);
                b.set_span(site);
                b.mbarrier_arrive(bars, index);
                Ok(Value::Unit)
            }
            Op::MbarrierWait => {
                let bars = self.tensor_arg(b, args[0], name, "barriers", Scope::Shared);
                let index = self.scalar(b, args[1], ScalarType::I32);
                let phase = self.scalar(b, args[2], ScalarType::I32);
                let (bars, index, phase) = (bars?, index?, phase?);
                let site = self.site(c);
                b.set_span(site);
                b.mbarrier_wait(bars, index, phase);
                Ok(Value::Unit)
            }
            Op::CommitGroup => {
                let site = self.site(c);
                b.set_span(site);
                b.copy_async_commit_group();
                Ok(Value::Unit)
            }
            Op::DotWait => {
                let n = match self.const_int(args[0]) {
                    Some(n) if n >= 0 => n as u32,
                    _ => return Err(self.err(
                        args[0],
                        "the number of dot_async groups left in flight is a non-negative constant",
                    )),
                };
                let site = self.site(c);
                b.set_span(site);
                b.dot_wait(n);
                Ok(Value::Unit)
            }
            Op::DotAsync => {
                // `a` may be in registers (the RS form of wgmma); the verifier checks the rest.
                let x = self.tensor_arg(b, args[0], name, "first operand", Scope::SharedOrRegister);
                let y = self.tensor_arg(b, args[1], name, "second operand", Scope::Shared);
                let z = self.tensor_arg(b, args[2], name, "accumulator", Scope::Register);
                let (x, y, z) = (x?, y?, z?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "dot_async");
                Ok(Value::Tensor(build!(d, |d| b.dot_async(d, x, y, z))))
            }
            Op::WaitGroup => {
                let n = match self.const_int(args[0]) {
                    Some(n) if n >= 0 => n as u32,
                    _ => {
                        return Err(self.err(
                            args[0],
                            "the number of groups left in flight is a non-negative constant",
                        ))
                    }
                };
                let site = self.site(c);
                b.set_span(site);
                b.copy_async_wait_group(n);
                Ok(Value::Unit)
            }
            Op::Cast | Op::CastBiased => {
                let dtype = self.dtype_targ(c, seg, true);
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register);
                // With a layout: the same elements per thread in another local order.
                let layout = args.get(1).map(|l| self.layout_arg(b, l, name)).transpose();
                let (dtype, x, layout) = (dtype?, x?, layout?);
                let site = match args.get(1) {
                    Some(l) => self.site_with(c, Some(*l), None),
                    None => self.site(c),
                };
                b.set_span(site);
                let d = self.dest(dest, "cast");
                let dtype = dtype.unwrap_or(DType::F32);
                Ok(Value::Tensor(match (syntax.op, layout) {
                    (Op::CastBiased, l) => build!(d, |d| b.cast_biased(d, x, dtype, l.clone())),
                    (_, None) => build!(d, |d| b.cast(d, x, dtype)),
                    (_, Some(l)) => build!(d, |d| b.cast_to(d, x, dtype, l.clone())),
                }))
            }
            Op::View => {
                let dtype = self.dtype_targ(c, seg, true);
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register);
                let layout = self.layout_arg(b, args[1], name);
                let (dtype, x, layout) = (dtype?, x?, layout?);
                let site = self.site_with(c, Some(args[1]), None);
                b.set_span(site);
                let d = self.dest(dest, "view");
                let dtype = dtype.unwrap_or(DType::F32);
                Ok(Value::Tensor(build!(d, |d| b.view(
                    d,
                    x,
                    dtype,
                    layout.clone()
                ))))
            }
            Op::Dot => {
                let x = self.tensor_arg(b, args[0], name, "first operand", Scope::SharedOrRegister);
                let y =
                    self.tensor_arg(b, args[1], name, "second operand", Scope::SharedOrRegister);
                let z = self.tensor_arg(b, args[2], name, "accumulator", Scope::Register);
                let (x, y, z) = (x?, y?, z?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, "dot");
                Ok(Value::Tensor(build!(d, |d| b.dot(d, x, y, z))))
            }
            Op::PlaneDot => {
                let w = self.tensor_arg(b, args[0], name, "weight planes", Scope::Register);
                let a = self.tensor_arg(b, args[1], name, "activation planes", Scope::Register);
                let dim = self.const_dim(args[2], name, "sums over");
                let (w, a, dim) = (w?, a?, dim?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, name);
                Ok(Value::Tensor(build!(d, |d| b.plane_dot(d, w, a, dim))))
            }
            Op::Reduce(op) => {
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register);
                let dim = self.const_dim(args[1], name, "reduces");
                let (x, dim) = (x?, dim?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, name);
                Ok(Value::Tensor(build!(d, |d| b.reduce(d, x, op, dim))))
            }
            Op::Scan(op) => {
                let x = self.tensor_arg(b, args[0], name, "operand", Scope::Register);
                let dim = self.const_dim(args[1], name, "scans");
                let (x, dim) = (x?, dim?);
                let site = self.site(c);
                b.set_span(site);
                let d = self.dest(dest, name);
                Ok(Value::Tensor(build!(d, |d| b.scan(d, x, op, dim))))
            }
            Op::Synchronize => {
                let site = self.site(c);
                b.set_span(site);
                b.synchronize();
                Ok(Value::Unit)
            }
            Op::Exit => {
                let site = self.site(c);
                b.set_span(site);
                b.exit();
                Ok(Value::Unit)
            }
            Op::Fence => {
                let site = self.site(c);
                b.set_span(site);
                b.fence();
                Ok(Value::Unit)
            }
            Op::GridDependency(g) => {
                let site = self.site(c);
                b.set_span(site);
                b.grid_dependency(g);
                Ok(Value::Unit)
            }
            Op::Item
            | Op::Gather
            | Op::GatherRows
            | Op::Lookup
            | Op::Scatter
            | Op::ScatterRows
            | Op::Atomic(_) => self.addressing_call(b, c, syntax.op, &args, name, dest),
            Op::Print => {
                let (label, x) = if args.len() == 2 {
                    match args[0] {
                        SynExpr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => (s.value(), args[1]),
                        other => {
                            return Err(self.err(other, "the label of `print` is a string literal"))
                        }
                    }
                } else {
                    (args[0].to_token_stream().to_string(), args[0])
                };
                let v = self.value(b, x, DestHint::Temp)?;
                let operand = self.operand(x, v)?;
                let site = self.site(c);
                b.set_span(site);
                b.print(&label, operand);
                Ok(Value::Unit)
            }
        }
    }

    /// `x.min(y)`, `x.max(y)`: the method forms of `min`/`max`.
    pub(super) fn method_call(
        &mut self,
        b: &mut ProgramBuilder,
        m: &syn::ExprMethodCall,
        dest: DestHint,
    ) -> R<Value> {
        let name = m.method.to_string();
        match name.as_str() {
            "min" | "max" if m.args.len() == 1 => {
                let op = if name == "min" { BinaryOp::Min } else { BinaryOp::Max };
                self.min_max(b, m, op, &m.receiver, &m.args[0], dest)
            }
            "item" if m.args.is_empty() => self.item_of(b, m, &m.receiver, dest),
            _ => Err(self.err(
                &m.method,
                format!("method calls are not supported in a kernel (except `.min(..)`/`.max(..)`/`.item()`); write `{name}(..)` if `{name}` is an instruction"),
            )),
        }
    }

    fn min_max<T: ToTokens + 'static>(
        &mut self,
        b: &mut ProgramBuilder,
        node: &T,
        op: BinaryOp,
        x: &SynExpr,
        y: &SynExpr,
        dest: DestHint,
    ) -> R<Value> {
        let vx = self.value(b, x, DestHint::Temp);
        let vy = self.value(b, y, DestHint::Temp);
        match (vx?, vy?) {
            (Value::Scalar(p, tp), Value::Scalar(q, tq)) => {
                let (e, ty) = self.scalar_binary(node, op, (p, tp), (q, tq))?;
                Ok(Value::Scalar(e, ty))
            }
            (Value::Float(p), Value::Float(q)) => Ok(Value::Float(if op == BinaryOp::Min {
                p.min(q)
            } else {
                p.max(q)
            })),
            (Value::Tensor(t), other) => {
                let rhs = self.operand(y, other)?;
                self.element(b, node, op, t, rhs, dest)
            }
            (other, Value::Tensor(t)) => {
                let rhs = self.operand(x, other)?;
                self.element(b, node, op, t, rhs, dest)
            }
            (Value::Poisoned, _) | (_, Value::Poisoned) => Err(Reported),
            (p, q) => {
                let (p, q) = (self.describe(&p), self.describe(&q));
                Err(self.err(
                    node,
                    format!("cannot take the minimum or maximum of {p} and {q}"),
                ))
            }
        }
    }

    /// The fill value of a masked load: a float or integer constant (`-1e30`,
    /// `f32::NEG_INFINITY`, `0`).
    fn fill_arg(&mut self, b: &mut ProgramBuilder, e: &SynExpr) -> R<f64> {
        match self.value(b, e, DestHint::Temp) {
            Ok(Value::Float(f)) => Ok(f),
            Ok(Value::Scalar(Expr::Int(i), ScalarType::I32)) => Ok(i as f64),
            Ok(Value::Poisoned) | Err(_) => Err(Reported),
            Ok(_) => Err(self.err(
                e,
                "the fill value of `load_global` is a constant, e.g. `0.0` or `f32::NEG_INFINITY`",
            )),
        }
    }

    /// `swizzle(bits, base, shift)`.
    fn swizzle(&mut self, e: &SynExpr) -> R<Swizzle> {
        if let SynExpr::Call(c) = e {
            if matches!(&*c.func, SynExpr::Path(p) if p.path.is_ident("swizzle"))
                && c.args.len() == 3
            {
                let vals: Vec<Option<i32>> = c.args.iter().map(|a| self.const_int(a)).collect();
                if let [Some(bits), Some(base), Some(shift)] = vals.as_slice() {
                    if *bits >= 0 && *base >= 0 && *shift >= 0 {
                        return Ok(Swizzle {
                            bits: *bits as u32,
                            base: *base as u32,
                            shift: *shift as u32,
                        });
                    }
                }
            }
        }
        Err(self.err(
            e,
            "expected `swizzle(bits, base, shift)` with non-negative constants",
        ))
    }

    /// The name of a new tensor; instructions that create views cannot write an existing one.
    fn dest_name(&mut self, dest: DestHint, temp: &str) -> R<String> {
        match dest {
            DestHint::New(n) => Ok(self.unique(&n)),
            // The caller reports that an existing tensor cannot be rebound to a new view.
            DestHint::Temp | DestHint::Existing(_) => Ok(self.unique(temp)),
        }
    }
}

impl Translator<'_, '_> {
    /// The dimension argument of a reduction or scan: a non-negative constant, or an error
    /// saying what `name` `verb` ("reduces", "scans").
    fn const_dim(&mut self, arg: &SynExpr, name: &str, verb: &str) -> R<usize> {
        match self.const_int(arg) {
            Some(d) if d >= 0 => Ok(d as usize),
            _ => Err(self.err(
                arg,
                format!("the dimension `{name}` {verb} is a non-negative constant"),
            )),
        }
    }
}

/// Greatest common divisor (of absolute values; `gcd(0, 0) = 0`).
pub fn gcd(a: i32, b: i32) -> i32 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.min(i32::MAX as u32) as i32
}

/// The message for a call of `name`, which is no instruction: a near spelling if there is one,
/// else the instructions of the family whose spellings come closest.
pub(super) fn unknown_instruction(name: &str) -> String {
    if let Some(s) = suggest(name, syntax::spellings()) {
        return format!("unknown instruction `{name}`; did you mean `{s}`?");
    }
    let closest = syntax::INSTRUCTIONS
        .iter()
        .flat_map(|s| {
            std::iter::once(s.name)
                .chain(s.aliases.iter().copied())
                .map(move |n| (edit_distance(name, n), s.family))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, f)| f)
        .unwrap_or(Family::Elementwise);
    format!(
        "`{name}` is not an instruction; the closest family, {}, has: {}",
        closest.name(),
        syntax::family_names(closest).join(", ")
    )
}
