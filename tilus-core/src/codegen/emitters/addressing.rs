//! `item`, `gather`, `scatter` and atomics: per local, an address computed from a register.
//!
//! A global or shared tensor is addressed as one flat row-major array. Each local of the index
//! tensor becomes one guarded access `0 <= ix < numel` (masked: out-of-range gathers read 0,
//! stores and updates are skipped), so no index can touch memory outside the tensor. Shared
//! tensors (possibly slices of an allocation, possibly swizzled) turn the flat index into the
//! root element offset at run time. Stores and atomics of replicated elements are done by one
//! replica (the same guard as `store_global`).
//!
//! `f32` atomic max/min use the integer-compare lowering: a non-negative value (sign bit clear)
//! is combined with `atomicMax`/`atomicMin` on the bits as `int`, a negative one with
//! `atomicMin`/`atomicMax` on the bits as `unsigned`; each step is exact for every non-NaN
//! value, with `-0 < +0` (the interpreter's total order).

use super::global::replica_guard;
use super::shared::swizzle_c;
use crate::codegen::context::{Ctx, GlobalInfo, SharedInfo, SMEM};
use crate::codegen::regs::{get_bits, word_count, WordBuilder};
use crate::codegen::{cast, CodegenError};
use crate::ir::{AtomicOp, Instruction, VarId, VarType};
use crate::DType;

/// A flat-addressed tensor: its element count and how to form an element's byte address.
struct Flat {
    dtype: DType,
    /// `const long long` holding the element count.
    numel: String,
    target: Target,
}

enum Target {
    /// Byte pointer of a global tensor.
    Global(String),
    Shared(SharedInfo),
}

impl Flat {
    /// Byte address (a `uint8_t*` expression) of flat element `ix` (an in-range `int`).
    fn addr(&self, cx: &Ctx, ix: &str) -> String {
        let bytes = self.dtype.bits() / 8;
        match &self.target {
            Target::Global(ptr) => format!("{ptr} + (long long){ix} * {bytes}"),
            Target::Shared(s) => {
                let root = &s.root_layout;
                let (rank, root_rank) = (s.shape.len(), root.rank());
                let lead = root_rank - rank;
                // A compact row-major view (strides of its own shape, no swizzle): the flat
                // index is the offset from the view's first element, no division needed.
                let compact = root.swizzle.is_none()
                    && (0..rank).all(|k| {
                        root.strides[lead + k] == s.shape[k + 1..].iter().product::<usize>()
                    });
                let mut terms = Vec::new();
                if compact {
                    terms.push(ix.to_string());
                }
                for d in 0..root_rank {
                    if compact {
                        let origin = cx.expr(&s.origin[d]);
                        if origin != "0" {
                            terms.push(match root.strides[d] {
                                1 => format!("({origin})"),
                                st => format!("({origin}) * {st}"),
                            });
                        }
                        continue;
                    }
                    let origin = cx.expr(&s.origin[d]);
                    let mut part = if origin == "0" {
                        Vec::new()
                    } else {
                        vec![origin]
                    };
                    if d >= lead {
                        let k = d - lead;
                        let inner: usize = s.shape[k + 1..].iter().product();
                        let q = if inner == 1 {
                            ix.to_string()
                        } else {
                            format!("({ix} / {inner})")
                        };
                        part.push(if k == 0 {
                            q
                        } else {
                            format!("{q} % {}", s.shape[k])
                        });
                    }
                    if part.is_empty() {
                        continue;
                    }
                    let p = if part.len() == 1 {
                        part[0].clone()
                    } else {
                        format!("({})", part.join(" + "))
                    };
                    terms.push(match root.strides[d] {
                        1 => p,
                        st => format!("{p} * {st}"),
                    });
                }
                let off = if terms.is_empty() {
                    "0".to_string()
                } else {
                    terms.join(" + ")
                };
                let off = swizzle_c(&format!("({off})"), root.swizzle);
                let base = if s.root_offset == 0 {
                    SMEM.to_string()
                } else {
                    format!("({SMEM} + {})", s.root_offset)
                };
                format!("{base} + ({off}) * {bytes}")
            }
        }
    }
}

/// Declare the element count of `v` (a global or shared tensor) and describe its addressing.
fn flat(cx: &mut Ctx, v: VarId, write: bool) -> Result<Flat, CodegenError> {
    let (dtype, numel, target) = match cx.p.ty(v) {
        VarType::Global(_) => {
            let g: GlobalInfo = cx.global(v)?;
            let bytes = g.dtype.bits() / 8;
            cx.assume_aligned(&g.ptr_param, bytes);
            let n = if g.dims.is_empty() {
                "1LL".to_string()
            } else {
                g.dims
                    .iter()
                    .map(|d| format!("(long long){d}"))
                    .collect::<Vec<_>>()
                    .join(" * ")
            };
            let ptr = if write {
                g.ptr.clone()
            } else {
                format!("(const uint8_t*){}", g.ptr)
            };
            (g.dtype, n, Target::Global(ptr))
        }
        VarType::Shared(_) => {
            let s = cx.shared_info(v)?;
            let n: usize = s.shape.iter().product();
            (s.dtype, format!("{n}LL"), Target::Shared(s))
        }
        other => {
            return Err(cx.err(format!(
                "{} must be a global or shared tensor, not {}",
                cx.ir_name(v),
                other.describe()
            )))
        }
    };
    if !matches!(dtype.bits(), 8 | 16 | 32) {
        return Err(cx.err(format!(
            "{} holds {dtype}; only 8-, 16- and 32-bit elements are addressed by index",
            cx.ir_name(v)
        )));
    }
    let name = cx.fresh("numel");
    cx.w.line(format!("const long long {name} = {numel};"));
    Ok(Flat {
        dtype,
        numel: name,
        target,
    })
}

fn uint_type(bits: u32) -> &'static str {
    match bits {
        8 => "uint8_t",
        16 => "uint16_t",
        _ => "uint32_t",
    }
}

/// Declare `const int ix = index[i];` and its in-range test; returns (ix, condition).
fn index_local(cx: &mut Ctx, index: &str, i: usize, f: &Flat) -> (String, String) {
    let ix = cx.fresh("ix");
    cx.w.line(format!("const int {ix} = (int){index}[{i}];"));
    let cond = format!("{ix} >= 0 && (long long){ix} < {}", f.numel);
    (ix, cond)
}

pub(crate) fn emit(cx: &mut Ctx, i: &Instruction) -> Result<(), CodegenError> {
    match i {
        Instruction::Item { out, x } => item(cx, *out, *x),
        Instruction::Gather { out, src, index } => gather(cx, *out, *src, *index),
        Instruction::Scatter { src, dst, index } => scatter(cx, *src, *dst, *index),
        Instruction::Atomic {
            op,
            dst,
            index,
            value,
            compare,
            out,
        } => atomic(cx, *op, *dst, *index, *value, *compare, *out),
        _ => Err(cx.err("not an addressing instruction")),
    }
}

/// Every thread holds the one element at local 0.
fn item(cx: &mut Ctx, out: VarId, x: VarId) -> Result<(), CodegenError> {
    let (dtype, _) = cx.reg(x)?;
    let code = get_bits(&cx.name(x), 0, dtype.bits());
    let value = if dtype.is_float() {
        cast::decode_to_f32_expr(dtype, &code)
    } else {
        format!("(int){}", crate::codegen::scalar::decode(dtype, &code))
    };
    let line = format!("{} = {value};", cx.name(out));
    cx.w.line(line);
    Ok(())
}

fn gather(cx: &mut Ctx, out: VarId, src: VarId, index: VarId) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(index)?;
    cx.w.open("");
    let f = flat(cx, src, false)?;
    let bits = f.dtype.bits();
    let ty = uint_type(bits);
    let locals = layout.num_locals();
    let idx = cx.name(index);
    let mut wb = WordBuilder::new(word_count(bits, locals));
    for l in 0..locals {
        let (ix, cond) = index_local(cx, &idx, l, &f);
        let v = cx.fresh("g");
        let addr = f.addr(cx, &ix);
        cx.w.line(format!(
            "const uint32_t {v} = ({cond}) ? (uint32_t)*(const {ty}*)({addr}) : 0u;"
        ));
        if bits == 32 {
            wb.word(l, &v);
        } else {
            wb.field(l * bits as usize, bits, &v);
        }
    }
    // Written after every read: `out` may be the index tensor itself.
    for line in wb.finish(&cx.name(out)) {
        cx.w.line(line);
    }
    cx.w.close();
    Ok(())
}

fn scatter(cx: &mut Ctx, src: VarId, dst: VarId, index: VarId) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(src)?;
    let lay = cx.layout(&layout)?;
    let guard = replica_guard(&cx.layouts[lay].map, cx.block_threads);
    cx.w.open("");
    let f = flat(cx, dst, true)?;
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let bits = f.dtype.bits();
    let ty = uint_type(bits);
    let (idx, arr) = (cx.name(index), cx.name(src));
    for l in 0..layout.num_locals() {
        let (ix, cond) = index_local(cx, &idx, l, &f);
        let addr = f.addr(cx, &ix);
        let value = get_bits(&arr, l * bits as usize, bits);
        cx.w.line(format!("if ({cond}) *({ty}*)({addr}) = ({ty}){value};"));
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}

/// The call performing one update; `a` is the byte address, `v` and `c` the value and compared
/// codes (`uint32_t`); the result is the old code as `uint32_t`.
fn atomic_call(op: AtomicOp, dtype: DType, a: &str, v: &str, c: &str) -> String {
    let (ptr, val, cmp) = match dtype {
        DType::Int(32) => (
            format!("(int*)({a})"),
            format!("(int){v}"),
            format!("(int){c}"),
        ),
        _ => (
            format!("(unsigned int*)({a})"),
            v.to_string(),
            c.to_string(),
        ),
    };
    let call = match (op, dtype) {
        (AtomicOp::Add, DType::F32) => {
            format!("__float_as_uint(atomicAdd((float*)({a}), __uint_as_float({v})))")
        }
        (AtomicOp::Max | AtomicOp::Min, DType::F32) => {
            let (pos, neg) = if op == AtomicOp::Max {
                ("atomicMax", "atomicMin")
            } else {
                ("atomicMin", "atomicMax")
            };
            format!(
                "(({v} >> 31) == 0u ? (uint32_t){pos}((int*)({a}), (int){v}) : {neg}((unsigned int*)({a}), {v}))"
            )
        }
        (AtomicOp::Cas, _) => format!("atomicCAS({ptr}, {cmp}, {val})"),
        _ => format!("{}({ptr}, {val})", op.cuda_name()),
    };
    format!("(uint32_t){call}")
}

fn atomic(
    cx: &mut Ctx,
    op: AtomicOp,
    dst: VarId,
    index: VarId,
    value: VarId,
    compare: Option<VarId>,
    out: Option<VarId>,
) -> Result<(), CodegenError> {
    let (_, layout) = cx.reg(value)?;
    let lay = cx.layout(&layout)?;
    let guard = replica_guard(&cx.layouts[lay].map, cx.block_threads);
    if guard.is_some() && out.is_some() {
        return Err(cx.err("returning the old values of an atomic needs a layout without replicas"));
    }
    cx.w.open("");
    let f = flat(cx, dst, true)?;
    if !matches!(f.dtype, DType::Int(32) | DType::UInt(32) | DType::F32) {
        return Err(cx.err(format!("atomics on {} are not supported", f.dtype)));
    }
    if let Some(g) = &guard {
        cx.w.open(format!("if ({g})"));
    }
    let (idx, arr) = (cx.name(index), cx.name(value));
    let cmp = compare.map(|c| cx.name(c));
    let mut olds = Vec::new();
    for l in 0..layout.num_locals() {
        let (ix, cond) = index_local(cx, &idx, l, &f);
        let addr = f.addr(cx, &ix);
        let v = format!("{arr}[{l}]");
        let c = cmp
            .as_ref()
            .map(|c| format!("{c}[{l}]"))
            .unwrap_or_default();
        let call = atomic_call(op, f.dtype, &addr, &v, &c);
        if out.is_some() {
            let o = cx.fresh("old");
            cx.w.line(format!("const uint32_t {o} = ({cond}) ? {call} : 0u;"));
            olds.push(o);
        } else {
            cx.w.line(format!("if ({cond}) {call};"));
        }
    }
    if let Some(o) = out {
        let name = cx.name(o);
        for (l, v) in olds.iter().enumerate() {
            cx.w.line(format!("{name}[{l}] = {v};"));
        }
    }
    if guard.is_some() {
        cx.w.close();
    }
    cx.w.close();
    Ok(())
}
