//! Elementwise math (`Unary`), the bit operations of `Binary` (`and`, `or`, `xor`, `shl`,
//! `shr`), comparisons into `u1` masks, `select` and `arange`.
//!
//! Float functions decode each element to `float`, call the CUDA math library's accurate
//! function (no fast-math intrinsics; `__fsqrt_rn` and `__fdiv_rn` are IEEE round-to-nearest
//! whatever the compiler flags) and encode the result to the dtype, as `cast` does. The
//! accuracy of each function is documented on [`crate::ir::MathOp`].

use crate::codegen::cast;
use crate::codegen::context::Ctx;
use crate::codegen::emitters::elementwise::{
    broadcast_locals, decode_local, operand_values, scalar_operand_code, store_codes,
};
use crate::codegen::expr::add_const;
use crate::codegen::regs::{get_bits, hex};
use crate::codegen::scalar::{self, f32_lit, CType};
use crate::codegen::CodegenError;
use crate::ir::{CmpOp, ElementOp, Expr, MathOp, Operand, VarId, GELU_K0, GELU_K1};
use crate::layout::Layout;

/// The `float` expression of a float `op` at `float` variable `v`.
fn float_fn(op: MathOp, v: &str) -> String {
    // 1 / (1 + e^-t), times x: one IEEE division.
    let logistic = |num: &str, t: &str| format!("__fdiv_rn({num}, __fadd_rn(1.0f, expf(-({t}))))");
    match op {
        MathOp::Exp => format!("expf({v})"),
        MathOp::Exp2 => format!("exp2f({v})"),
        MathOp::Log => format!("logf({v})"),
        MathOp::Log2 => format!("log2f({v})"),
        MathOp::Sqrt => format!("__fsqrt_rn({v})"),
        MathOp::Rsqrt => format!("rsqrtf({v})"),
        MathOp::Abs => format!("fabsf({v})"),
        MathOp::Tanh => format!("tanhf({v})"),
        MathOp::Sigmoid => logistic("1.0f", v),
        MathOp::Silu => logistic(v, v),
        MathOp::Gelu => {
            let t = format!(
                "__fmul_rn({v}, __fmaf_rn({}, __fmul_rn({v}, {v}), {}))",
                f32_lit(GELU_K1 as f32),
                f32_lit(GELU_K0 as f32)
            );
            logistic(v, &t)
        }
        MathOp::Sin => format!("sinf({v})"),
        MathOp::Cos => format!("cosf({v})"),
        MathOp::Floor => format!("floorf({v})"),
        MathOp::Round => format!("rintf({v})"),
        // Integer ops are handled by the caller.
        MathOp::Not | MathOp::Popc => v.to_string(),
    }
}

/// `out = op(x)`.
pub(crate) fn unary(cx: &mut Ctx, out: VarId, op: MathOp, x: VarId) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(x)?;
    if op.is_integer() == dt.is_float() {
        return Err(cx.err(format!("{} is not defined for {dt} tensors", op.name())));
    }
    let bits = dt.bits();
    let (xn, o) = (cx.name(x), cx.name(out));
    cx.w.open("");
    let mut codes = Vec::new();
    for j in 0..lay.num_locals() {
        let c = cx.fresh("c");
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&xn, j * bits as usize, bits)
        ));
        match op {
            MathOp::Not => codes.push(format!("(~{c} & {})", hex(dt.code_mask()))),
            // The count of a code's bits, clamped like any integer result.
            MathOp::Popc => codes.push(scalar::encode(dt, &format!("(long long)__popc({c})"))),
            _ => {
                let (v, r) = (cx.fresh("x"), cx.fresh("y"));
                cx.w.line(format!(
                    "const float {v} = {};",
                    cast::decode_to_f32_expr(dt, &c)
                ));
                cx.w.line(format!("const float {r} = {};", float_fn(op, &v)));
                codes.push(cast::round_from_f32_expr(dt, &r));
            }
        }
    }
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}

pub(crate) fn is_bitwise(op: ElementOp) -> bool {
    matches!(
        op,
        ElementOp::And | ElementOp::Or | ElementOp::Xor | ElementOp::Shl | ElementOp::Shr
    )
}

/// `out = lhs op rhs` for the bit operations of integer tensors, on the 64-bit sign- or
/// zero-extended values: the low `bits` bits of the result are the code. Shift amounts are
/// reduced modulo the width (the interpreter rejects amounts outside `0..bits`).
pub(crate) fn bitwise(
    cx: &mut Ctx,
    out: VarId,
    op: ElementOp,
    lhs: VarId,
    rhs: &Operand,
) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(lhs)?;
    if dt.is_float() {
        return Err(cx.err(format!("{} is defined for integer tensors", op.name())));
    }
    let bits = dt.bits();
    let locals = lay.num_locals();
    let lid = cx.layout(&lay)?;
    let (x, o) = (cx.name(lhs), cx.name(out));
    let mask = hex(dt.code_mask());
    cx.w.open("");
    let rhs_vals = operand_values(cx, lid, dt, rhs, locals)?;
    let mut codes = Vec::new();
    for (j, y) in rhs_vals.iter().enumerate() {
        let (c, v) = (cx.fresh("c"), cx.fresh("x"));
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&x, j * bits as usize, bits)
        ));
        cx.w.line(format!("const long long {v} = {};", scalar::decode(dt, &c)));
        let amount = format!("((unsigned long long)({y}) % {bits}ull)");
        let r = match op {
            ElementOp::And => format!("{v} & {y}"),
            ElementOp::Or => format!("{v} | {y}"),
            ElementOp::Xor => format!("{v} ^ {y}"),
            ElementOp::Shl => format!("(long long)((unsigned long long){v} << {amount})"),
            _ => format!("{v} >> {amount}"),
        };
        codes.push(format!("((uint32_t)({r}) & {mask})"));
    }
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}

/// `out = lhs op rhs`, a `u1` mask. An i32 scalar is compared exactly (in `double` for float
/// tensors), as the interpreter does.
pub(crate) fn compare(
    cx: &mut Ctx,
    out: VarId,
    op: CmpOp,
    lhs: VarId,
    rhs: &Operand,
) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(lhs)?;
    let locals = lay.num_locals();
    let lid = cx.layout(&lay)?;
    let (x, o) = (cx.name(lhs), cx.name(out));
    let ct = CType::of(dt);
    cx.w.open("");
    let (rhs_vals, exact) = match rhs {
        // Compared exactly: an i32 as a 64-bit integer, an f32 as a double.
        Operand::Scalar(e) => {
            let s = cx.fresh("s");
            let ty = if cx.is_f32(e) { "double" } else { "long long" };
            let line = format!("const {ty} {s} = ({ty})({});", cx.expr(e));
            cx.w.line(line);
            (vec![s; locals], true)
        }
        _ => (operand_values(cx, lid, dt, rhs, locals)?, false),
    };
    let sym = op.symbol();
    let mut codes = Vec::new();
    for (j, y) in rhs_vals.iter().enumerate() {
        let v = decode_local(cx, &x, j, dt);
        let test = if exact && ct == CType::Float {
            format!("(double){v} {sym} (double){y}")
        } else {
            format!("{v} {sym} {y}")
        };
        codes.push(format!("(({test}) ? 1u : 0u)"));
    }
    store_codes(cx, &o, 1, &codes);
    cx.w.close();
    Ok(())
}

/// `out = cond ? a : b`, on codes: the chosen element is copied bit for bit; a scalar or an
/// immediate `b` is converted to the dtype as the interpreter does.
pub(crate) fn select(
    cx: &mut Ctx,
    out: VarId,
    cond: VarId,
    a: VarId,
    b: &Operand,
) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(a)?;
    let (_, clay) = cx.reg(cond)?;
    let bits = dt.bits();
    let locals = lay.num_locals();
    let lid = cx.layout(&lay)?;
    let cid = cx.layout(&clay)?;
    let bt = cx.block_threads;
    let cmap = broadcast_locals(&cx.layouts[lid].map, &cx.layouts[cid].map, bt)
        .map_err(|e| cx.err(format!("select: the condition: {e}")))?;
    let (an, cn, o) = (cx.name(a), cx.name(cond), cx.name(out));
    cx.w.open("");
    let other: Vec<String> = match b {
        Operand::Tensor(r) => {
            let (rdt, rlay) = cx.reg(*r)?;
            if rdt != dt {
                return Err(cx.err("select: the choices differ in dtype"));
            }
            let rid = cx.layout(&rlay)?;
            let rmap = broadcast_locals(&cx.layouts[lid].map, &cx.layouts[rid].map, bt)
                .map_err(|e| cx.err(format!("select: broadcast: {e}")))?;
            let rn = cx.name(*r);
            rmap.iter()
                .map(|&k| get_bits(&rn, k * bits as usize, bits))
                .collect()
        }
        Operand::Imm(v) => vec![hex(scalar::constant(dt, *v).0); locals],
        Operand::Scalar(e) => vec![scalar_operand_code(cx, e, dt); locals],
    };
    let codes: Vec<String> = (0..locals)
        .map(|j| {
            format!(
                "({} ? {} : {})",
                get_bits(&cn, cmap[j], 1),
                get_bits(&an, j * bits as usize, bits),
                other[j]
            )
        })
        .collect();
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}

/// `out = arange(layout, dim, offset)`: each local's index along `dim` (the thread's part plus
/// the local's constant part) plus the offset.
pub(crate) fn arange(
    cx: &mut Ctx,
    out: VarId,
    layout: &Layout,
    dim: usize,
    offset: &Expr,
) -> Result<(), CodegenError> {
    let lid = cx.layout(layout)?;
    let map = cx.layouts[lid].map.clone();
    if dim >= map.rank() {
        return Err(cx.err("arange: the dimension is outside the layout's rank"));
    }
    let base = cx.layouts[lid].dims[dim].clone();
    let o = cx.name(out);
    cx.w.open("");
    let off = cx.fresh("off");
    let line = format!("const int {off} = {};", cx.expr(offset));
    cx.w.line(line);
    let codes: Vec<String> = (0..map.locals)
        .map(|j| {
            let idx = add_const(&base, map.local_index[j][dim]);
            format!("(uint32_t)({idx} + {off})")
        })
        .collect();
    store_codes(cx, &o, 32, &codes);
    cx.w.close();
    Ok(())
}
