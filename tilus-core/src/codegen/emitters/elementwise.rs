//! Register-to-register instructions: `register` (allocate), `add`/`sub`/... (Binary), `neg`,
//! `cast`, `view`, and printing a tensor.
//!
//! Each emitter first computes every result element's code into a temporary, then assembles the
//! output words, so an output that aliases an input (`acc = add(acc, x)`) is always correct.

use crate::codegen::cast;
use crate::codegen::context::{Ctx, TID};
use crate::codegen::regmap::LayoutMap;
use crate::codegen::regs::{get_bits, hex, word_count, WordBuilder};
use crate::codegen::scalar::{self, CType};
use crate::codegen::CodegenError;
use crate::ir::{ElementOp, Operand, VarId};
use crate::layout::Layout;
use crate::DType;
use std::collections::HashMap;

/// `out = register(dtype, layout, init)`.
pub(crate) fn allocate(
    cx: &mut Ctx,
    out: VarId,
    dtype: DType,
    layout: &Layout,
    init: Option<f64>,
) -> Result<(), CodegenError> {
    let arr = cx.name(out);
    let locals = layout.num_locals();
    let bits = dtype.bits();
    let words = word_count(bits, locals);
    let Some(v) = init else {
        cx.w.line(format!("// {arr}: uninitialised"));
        return Ok(());
    };
    let (code, _) = scalar::constant(dtype, v);
    // Pack the constant code into every element position at compile time.
    let mut vals = vec![0u32; words];
    for i in 0..locals {
        let pos = i * bits as usize;
        let (w, s) = (pos / 32, pos % 32);
        vals[w] |= code << s;
        if s + bits as usize > 32 {
            vals[w + 1] |= code >> (32 - s);
        }
    }
    if vals.iter().all(|&x| x == vals[0]) {
        let w = cx.fresh("w");
        cx.w.open(format!("for (int {w} = 0; {w} < {words}; ++{w})"));
        cx.w.line(format!("{arr}[{w}] = {};", hex(vals[0])));
        cx.w.close();
    } else {
        for (w, x) in vals.iter().enumerate() {
            cx.w.line(format!("{arr}[{w}] = {};", hex(*x)));
        }
    }
    Ok(())
}

/// For each local `j` of `lhs`, the local of `rhs` holding the broadcast source of `lhs`'s
/// element, the same for every thread (the verifier's thread-local broadcast condition).
pub(crate) fn broadcast_locals(
    lhs: &LayoutMap,
    rhs: &LayoutMap,
    block_threads: usize,
) -> Result<Vec<usize>, String> {
    let (lr, rr) = (lhs.rank(), rhs.rank());
    if rr > lr {
        return Err("the right operand has a higher rank".into());
    }
    let lead = lr - rr;
    let mut reference: Vec<Option<usize>> = vec![None; lhs.locals];
    let mut seen = std::collections::HashSet::new();
    for t in 0..block_threads {
        let (tl, tr) = (t % lhs.threads, t % rhs.threads);
        if !seen.insert((tl, tr)) {
            continue;
        }
        let held: HashMap<Vec<i64>, usize> = (0..rhs.locals)
            .rev()
            .map(|k| (rhs.eval(tr, k), k))
            .collect();
        for (j, r) in reference.iter_mut().enumerate() {
            let li = lhs.eval(tl, j);
            let ri: Vec<i64> = (0..rr)
                .map(|d| if rhs.shape[d] == 1 { 0 } else { li[lead + d] })
                .collect();
            let k = *held.get(&ri).ok_or_else(|| {
                format!("thread {t} holds lhs {li:?} but not the rhs element {ri:?}")
            })?;
            match r {
                None => *r = Some(k),
                Some(x) if *x == k => {}
                Some(x) => {
                    return Err(format!(
                        "thread {t} holds rhs {ri:?} at local {k}, thread 0 at local {x}"
                    ))
                }
            }
        }
    }
    Ok(reference.into_iter().map(|x| x.unwrap_or(0)).collect())
}

/// `out = op(lhs, rhs)`.
pub(crate) fn binary(
    cx: &mut Ctx,
    out: VarId,
    op: ElementOp,
    lhs: VarId,
    rhs: &Operand,
) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(lhs)?;
    let ct = CType::of(dt);
    let bits = dt.bits();
    let locals = lay.num_locals();
    let lid = cx.layout(&lay)?;
    let (x, o) = (cx.name(lhs), cx.name(out));
    if super::math::is_bitwise(op) {
        return super::math::bitwise(cx, out, op, lhs, rhs);
    }
    if packed_half(cx, out, op, lhs, rhs, dt, lid)? {
        return Ok(());
    }
    cx.w.open("");
    // The right operand, per lhs local.
    let rhs_vals = operand_values(cx, lid, dt, rhs, locals)?;
    let mut codes = Vec::new();
    for (j, rv) in rhs_vals.iter().enumerate() {
        let v = decode_local(cx, &x, j, dt);
        let r = cx.fresh("y");
        if let Some(e) = (dt == DType::Int(32))
            .then(|| int32_binop(op, &v, rv))
            .flatten()
        {
            cx.w.line(format!("const uint32_t {r} = {e};"));
            codes.push(r);
            continue;
        }
        cx.w.line(format!(
            "const {} {r} = {};",
            ct.name(),
            scalar::binop(ct, op, &v, rv)
        ));
        codes.push(scalar::round(dt, &r));
    }
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}

/// `a op b` on `i32` values (`long long` expressions in range) as the `uint32_t` code, in
/// 32-bit arithmetic. An i32 overflow (or a division by zero) is an interpreter error, so a
/// program the interpreter runs never needs the 64-bit computation and clamp of
/// [`scalar::binop`] and [`scalar::encode`]: the 32-bit result has the same bits, at one
/// instruction instead of about six (index arithmetic in look-up loops is all i32).
fn int32_binop(op: ElementOp, a: &str, b: &str) -> Option<String> {
    let (ua, ub) = (format!("(uint32_t)({a})"), format!("(uint32_t)({b})"));
    let (ia, ib) = (format!("(int)({a})"), format!("(int)({b})"));
    Some(match op {
        ElementOp::Add => format!("{ua} + {ub}"),
        ElementOp::Sub => format!("{ua} - {ub}"),
        ElementOp::Mul => format!("{ua} * {ub}"),
        ElementOp::Div => format!("(uint32_t)({ib} == 0 ? 0 : {ia} / {ib})"),
        ElementOp::Mod => format!("(uint32_t)({ib} == 0 ? 0 : {ia} % {ib})"),
        ElementOp::Min => format!("(uint32_t)min({ia}, {ib})"),
        ElementOp::Max => format!("(uint32_t)max({ia}, {ib})"),
        _ => return None,
    })
}

/// Emit the decoding of local `j` of register array `arr` (a tensor of `dt`) and return the
/// name of its value, a `const` of `CType::of(dt)`.
pub(crate) fn decode_local(cx: &mut Ctx, arr: &str, j: usize, dt: DType) -> String {
    let (c, v) = (cx.fresh("c"), cx.fresh("x"));
    let bits = dt.bits();
    cx.w.line(format!(
        "const uint32_t {c} = {};",
        get_bits(arr, j * bits as usize, bits)
    ));
    cx.w.line(format!(
        "const {} {v} = {};",
        CType::of(dt).name(),
        scalar::decode(dt, &c)
    ));
    v
}

/// For a tensor right operand `r` of dtype `dt`: which local of `r` each local of the left
/// operand (layout id `lid`) reads, and `r`'s register array name.
fn broadcast_operand(
    cx: &mut Ctx,
    lid: usize,
    dt: DType,
    r: VarId,
) -> Result<(Vec<usize>, String), CodegenError> {
    let (rdt, rlay) = cx.reg(r)?;
    if rdt != dt {
        return Err(cx.err("the operands of an elementwise instruction differ in dtype"));
    }
    let rid = cx.layout(&rlay)?;
    let map = broadcast_locals(&cx.layouts[lid].map, &cx.layouts[rid].map, cx.block_threads)
        .map_err(|e| cx.err(format!("broadcast: {e}")))?;
    Ok((map, cx.name(r)))
}

/// The right operand of an elementwise instruction, one C expression per local of the left
/// operand (layout id `lid`): broadcast tensor elements (each decoded once), a scalar, or an
/// immediate. Emits the decoding lines.
pub(crate) fn operand_values(
    cx: &mut Ctx,
    lid: usize,
    dt: DType,
    rhs: &Operand,
    locals: usize,
) -> Result<Vec<String>, CodegenError> {
    let ct = CType::of(dt);
    let bits = dt.bits();
    Ok(match rhs {
        Operand::Tensor(r) => {
            let (map, rn) = broadcast_operand(cx, lid, dt, *r)?;
            let mut decoded: HashMap<usize, String> = HashMap::new();
            let mut vals = Vec::new();
            for &k in &map {
                if let Some(n) = decoded.get(&k) {
                    vals.push(n.clone());
                    continue;
                }
                let (c, v) = (
                    cx.fresh(&format!("{rn}_c{k}")),
                    cx.fresh(&format!("{rn}_v{k}")),
                );
                cx.w.line(format!(
                    "const uint32_t {c} = {};",
                    get_bits(&rn, k * bits as usize, bits)
                ));
                cx.w.line(format!(
                    "const {} {v} = {};",
                    ct.name(),
                    scalar::decode(dt, &c)
                ));
                decoded.insert(k, v.clone());
                vals.push(v);
            }
            vals
        }
        Operand::Scalar(e) => {
            let (c, v) = (scalar_operand_code(cx, e, dt), cx.fresh("sv"));
            cx.w.line(format!(
                "const {} {v} = {};",
                ct.name(),
                scalar::decode(dt, &c)
            ));
            vec![v; locals]
        }
        Operand::Imm(v) => {
            let (_, lit) = scalar::constant(dt, *v);
            vec![lit; locals]
        }
    })
}

/// Emit the code (a `uint32_t` variable) of scalar operand `e` converted to `dt`, as the
/// interpreter converts it (`interp::instr::scalar_code`): to a float dtype through `float`,
/// to an integer dtype rounding half to even and clamping (exact for every `i32` in range).
pub(crate) fn scalar_operand_code(cx: &mut Ctx, e: &crate::ir::Expr, dt: DType) -> String {
    let (s, c) = (cx.fresh("s"), cx.fresh("sc"));
    let value = cx.expr(e);
    let (line, code) = match (dt.is_float(), cx.is_f32(e)) {
        (true, _) => (
            format!("const float {s} = (float)({value});"),
            cast::encode_from_f32_expr(dt, &s),
        ),
        (false, true) => (
            format!("const long long {s} = __float2ll_rn({value});"),
            scalar::encode(dt, &s),
        ),
        (false, false) => (
            format!("const long long {s} = (long long)({value});"),
            scalar::encode(dt, &s),
        ),
    };
    cx.w.line(line);
    cx.w.line(format!("const uint32_t {c} = {code};"));
    c
}

/// `out = a * b + c` on f32 tensors: one `__fmaf_rn` per element (the interpreter rounds the
/// exact result once, as the FFMA does); f16 and bf16 in pairs ([`mul_add_half`]).
pub(crate) fn mul_add(
    cx: &mut Ctx,
    out: VarId,
    a: VarId,
    b: &Operand,
    c: VarId,
) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(a)?;
    if matches!(dt, DType::F16 | DType::BF16) {
        return mul_add_half(cx, out, a, b, c, dt, &lay);
    }
    if dt != DType::F32 {
        return Err(cx.err("mul_add is defined for f32, f16 and bf16 tensors"));
    }
    let locals = lay.num_locals();
    let lid = cx.layout(&lay)?;
    let (an, cn, o) = (cx.name(a), cx.name(c), cx.name(out));
    cx.w.open("");
    let bvals = operand_values(cx, lid, dt, b, locals)?;
    // The addend as it is where it has `a`'s layout, else broadcast like `b`.
    let cvals = if cx.reg(c)?.1 == lay {
        (0..locals)
            .map(|j| format!("__uint_as_float({cn}[{j}])"))
            .collect()
    } else {
        operand_values(cx, lid, dt, &Operand::Tensor(c), locals)?
    };
    let mut codes = Vec::new();
    for (j, (bv, cv)) in bvals.iter().zip(&cvals).enumerate() {
        let r = cx.fresh("y");
        cx.w.line(format!(
            "const float {r} = __fmaf_rn(__uint_as_float({an}[{j}]), {bv}, {cv});"
        ));
        codes.push(format!("__float_as_uint({r})"));
    }
    store_codes(cx, &o, 32, &codes);
    cx.w.close();
    Ok(())
}

/// Bind each element code (a `uint32_t` expression) to a temporary, then write every word of
/// `arr` at once.
pub(crate) fn store_codes(cx: &mut Ctx, arr: &str, bits: u32, codes: &[String]) {
    let mut wb = WordBuilder::new(word_count(bits, codes.len()));
    for (j, code) in codes.iter().enumerate() {
        let r = cx.fresh(&format!("{arr}_{j}"));
        cx.w.line(format!("const uint32_t {r} = {code};"));
        wb.field(j * bits as usize, bits, &r);
    }
    for l in wb.finish(arr) {
        cx.w.line(l);
    }
}

/// `add`/`sub`/`mul` of f16 or bf16 on packed pairs: one `fma.rn.{f16,bf16}x2` per word
/// (overflow gives an infinity, as `DType::round` does). A correctly rounded f16/bf16 result
/// equals the interpreter's exact result rounded through f32 (f32 has more than twice the
/// precision plus two bits, which also keeps the overflow threshold exact), so the bits agree. The right operand's pair is the word
/// itself, or assembled with one `__byte_perm` (broadcasts); `Scalar` operands (exact i32 values,
/// not f16) and the other operators use the element path. Returns false when not applicable.
fn packed_half(
    cx: &mut Ctx,
    out: VarId,
    op: ElementOp,
    lhs: VarId,
    rhs: &Operand,
    dt: DType,
    lid: usize,
) -> Result<bool, CodegenError> {
    let locals = cx.layouts[lid].map.locals;
    let name = match (dt, op) {
        (DType::F16, ElementOp::Add) => "f16x2_add",
        (DType::F16, ElementOp::Sub) => "f16x2_sub",
        (DType::F16, ElementOp::Mul) => "f16x2_mul",
        (DType::BF16, ElementOp::Add) => "bf16x2_add",
        (DType::BF16, ElementOp::Sub) => "bf16x2_sub",
        (DType::BF16, ElementOp::Mul) => "bf16x2_mul",
        _ => return Ok(false),
    };
    if !locals.is_multiple_of(2) || matches!(rhs, Operand::Scalar(_)) {
        return Ok(false);
    }
    let (x, o) = (cx.name(lhs), cx.name(out));
    let pairs = half_pairs(cx, lid, dt, rhs, locals)?;
    let args = pairs
        .iter()
        .enumerate()
        .map(|(w, pair)| format!("{x}[{w}], {pair}"))
        .collect();
    cx.w.open("");
    packed_words(cx, name, &o, args);
    cx.w.close();
    Ok(true)
}

/// `out[w] = tilus_{name}(args[w])` for every word, through temporaries so that an operand
/// that is also the output is read whole before it is written.
fn packed_words(cx: &mut Ctx, name: &'static str, out: &str, args: Vec<String>) {
    cx.features.insert(name);
    let mut temps = Vec::new();
    for (w, a) in args.iter().enumerate() {
        let t = cx.fresh(&format!("{out}_{w}"));
        cx.w.line(format!("const uint32_t {t} = tilus_{name}({a});"));
        temps.push(t);
    }
    for (w, t) in temps.iter().enumerate() {
        cx.w.line(format!("{out}[{w}] = {t};"));
    }
}

/// The right operand of a packed f16/bf16 instruction whose left operand has layout id `lid`
/// and `locals` elements: one `uint32_t` pair expression per word (an odd last word's high
/// half is 0). A tensor's pair is its own word where the broadcast keeps it, else assembled
/// with one `__byte_perm`; a scalar is converted to `dt` as the element path converts it.
fn half_pairs(
    cx: &mut Ctx,
    lid: usize,
    dt: DType,
    rhs: &Operand,
    locals: usize,
) -> Result<Vec<String>, CodegenError> {
    let words = locals.div_ceil(2);
    Ok(match rhs {
        Operand::Imm(v) => {
            let (code, _) = scalar::constant(dt, *v);
            let last = if locals % 2 == 1 {
                code
            } else {
                code | (code << 16)
            };
            (0..words)
                .map(|w| {
                    hex(if w + 1 == words {
                        last
                    } else {
                        code | (code << 16)
                    })
                })
                .collect()
        }
        Operand::Scalar(e) => {
            let c = scalar_operand_code(cx, e, dt);
            (0..words)
                .map(|w| {
                    if w + 1 == words && locals % 2 == 1 {
                        c.clone()
                    } else {
                        format!("({c} | ({c} << 16))")
                    }
                })
                .collect()
        }
        Operand::Tensor(r) => {
            let (map, rn) = broadcast_operand(cx, lid, dt, *r)?;
            (0..words)
                .map(|w| {
                    let k0 = map[2 * w];
                    let Some(&k1) = map.get(2 * w + 1) else {
                        return get_bits(&rn, k0 * 16, 16);
                    };
                    if k0 % 2 == 0 && k1 == k0 + 1 {
                        format!("{rn}[{}]", k0 / 2)
                    } else {
                        // Bytes of the low half from word k0/2, of the high half from k1/2.
                        let lo = if k0 % 2 == 0 { 0x10 } else { 0x32 };
                        let hi = if k1 % 2 == 0 { 0x54 } else { 0x76 };
                        format!(
                            "__byte_perm({rn}[{}], {rn}[{}], 0x{:04x})",
                            k0 / 2,
                            k1 / 2,
                            (hi << 8) | lo
                        )
                    }
                })
                .collect()
        }
    })
}

/// `out = a * b + c` on f16 or bf16 tensors: one `fma.rn.{f16,bf16}x2` per word; `b` and `c`
/// in pairs as [`half_pairs`] makes them.
fn mul_add_half(
    cx: &mut Ctx,
    out: VarId,
    a: VarId,
    b: &Operand,
    c: VarId,
    dt: DType,
    lay: &Layout,
) -> Result<(), CodegenError> {
    let locals = lay.num_locals();
    let lid = cx.layout(lay)?;
    let name = if dt == DType::BF16 {
        "bf16x2_fma"
    } else {
        "f16x2_fma"
    };
    let (an, o) = (cx.name(a), cx.name(out));
    cx.w.open("");
    let pairs = half_pairs(cx, lid, dt, b, locals)?;
    let addends = half_pairs(cx, lid, dt, &Operand::Tensor(c), locals)?;
    let args = pairs
        .iter()
        .zip(&addends)
        .enumerate()
        .map(|(w, (pair, addend))| format!("{an}[{w}], {pair}, {addend}"))
        .collect();
    packed_words(cx, name, &o, args);
    cx.w.close();
    Ok(())
}

/// `out = neg(x)`: floats flip the sign bit (f8e5m2 goes through `float`, because its negated
/// infinity saturates to the largest finite value; f16 and bf16 keep infinities like f32);
/// integers negate and clamp.
pub(crate) fn neg(cx: &mut Ctx, out: VarId, x: VarId) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(x)?;
    let bits = dt.bits();
    let locals = lay.num_locals();
    let words = word_count(bits, locals);
    let (xn, o) = (cx.name(x), cx.name(out));
    let saturating_inf = dt == DType::F8E5M2;
    if dt.is_float() && !saturating_inf {
        let mut masks = vec![0u32; words];
        for i in 0..locals {
            let pos = i * bits as usize + bits as usize - 1;
            masks[pos / 32] |= 1 << (pos % 32);
        }
        for (w, m) in masks.iter().enumerate() {
            cx.w.line(format!("{o}[{w}] = {xn}[{w}] ^ {};", hex(*m)));
        }
        return Ok(());
    }
    cx.w.open("");
    let mut codes = Vec::new();
    for j in 0..locals {
        let (c, v) = (cx.fresh("c"), cx.fresh("x"));
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&xn, j * bits as usize, bits)
        ));
        cx.w.line(format!(
            "const {} {v} = -{};",
            CType::of(dt).name(),
            scalar::decode(dt, &c)
        ));
        codes.push(scalar::round(dt, &v));
    }
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}

/// `out = cast<dtype>(x)`: a vectorized cast function per group of locals when one exists,
/// else element by element: integer to integer exactly (clamped), everything else through
/// `float`, which gives the interpreter's `convert(src.decode(c), dtype)` bit for bit.
/// `biased` adds each position's bias (`cast::biased_cast_offsets`): the biased plan does it
/// for free, the element path adds the constant.
pub(crate) fn cast(
    cx: &mut Ctx,
    out: VarId,
    x: VarId,
    dtype: DType,
    biased: bool,
) -> Result<(), CodegenError> {
    let (src, lay) = cx.reg(x)?;
    let (_, out_lay) = cx.reg(out)?;
    let locals = lay.num_locals();
    // Output local `i` is input local `sigma[i]` (the identity unless the cast reorders).
    let sigma = lay.local_permutation(&out_lay).ok_or_else(|| {
        cx.err("cast: the result's layout does not hold the operand's elements on the same threads")
    })?;
    let identity = sigma.iter().enumerate().all(|(i, &s)| i == s);
    let (xn, o) = (cx.name(x), cx.name(out));
    let (sb, db) = (src.bits(), dtype.bits());
    let bias = if biased {
        cast::biased_cast_offsets(src, dtype, &sigma)
    } else {
        vec![0.0; locals]
    };
    let biased = bias.iter().any(|&b| b != 0.0);
    // A plan's function reads its input words while writing its output: not in place.
    let call_plan = |cx: &mut Ctx, plan: &cast::CastPlan| {
        cx.cast_fns
            .entry(plan.fn_name.clone())
            .or_insert_with(|| cast::cast_source(plan));
        for g in 0..locals / plan.group {
            cx.w.line(format!(
                "{}(&{xn}[{}], &{o}[{}]);",
                plan.fn_name,
                g * plan.in_words,
                g * plan.out_words
            ));
        }
    };
    if biased {
        if let Some(plan) = cast::biased_cast_plan(src, dtype, &sigma).filter(|_| out != x) {
            call_plan(cx, &plan);
            return Ok(());
        }
    }
    if src == dtype && identity && !biased {
        for w in 0..word_count(sb, locals) {
            cx.w.line(format!("{o}[{w}] = {xn}[{w}];"));
        }
        return Ok(());
    }
    if !biased && super::cast_pair::try_emit(cx, out, x, src, dtype, &sigma)? {
        return Ok(());
    }
    let plan = cast::PackOrder::recognize(&sigma)
        .and_then(|order| cast::cast_plan_ordered(src, dtype, order))
        .filter(|_| !biased);
    if let Some(plan) = plan {
        let aligned = plan.group > 0
            && locals % plan.group == 0
            && plan.in_words * 32 == plan.group * sb as usize
            && plan.out_words * 32 == plan.group * db as usize
            && out != x;
        if aligned {
            call_plan(cx, &plan);
            return Ok(());
        }
    }
    cx.w.open("");
    let mut codes = Vec::new();
    for (i, &j) in sigma.iter().enumerate() {
        let (c, v) = (cx.fresh("c"), cx.fresh("x"));
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&xn, j * sb as usize, sb)
        ));
        if biased {
            // Only a biased plan's types get here (integers to f16/bf16): the sum is exact.
            cx.w.line(format!(
                "const float {v} = {} + {:?}f;",
                cast::decode_to_f32_expr(src, &c),
                bias[i] as f32
            ));
            codes.push(cast::encode_from_f32_expr(dtype, &v));
        } else if src == dtype {
            codes.push(c);
        } else if !src.is_float() && !dtype.is_float() {
            cx.w.line(format!(
                "const long long {v} = {};",
                scalar::decode(src, &c)
            ));
            codes.push(scalar::encode(dtype, &v));
        } else {
            cx.w.line(format!(
                "const float {v} = {};",
                cast::decode_to_f32_expr(src, &c)
            ));
            codes.push(cast::encode_from_f32_expr(dtype, &v));
        }
    }
    store_codes(cx, &o, db, &codes);
    cx.w.close();
    Ok(())
}

/// `out = view<dtype>(x, layout)`: the same bits under another type and layout.
pub(crate) fn view(cx: &mut Ctx, out: VarId, x: VarId) -> Result<(), CodegenError> {
    if out == x {
        return Ok(());
    }
    let (sd, sl) = cx.reg(x)?;
    let (od, ol) = cx.reg(out)?;
    let (xn, o) = (cx.name(x), cx.name(out));
    let win = word_count(sd.bits(), sl.num_locals());
    let wout = word_count(od.bits(), ol.num_locals());
    for w in 0..wout {
        if w < win {
            cx.w.line(format!("{o}[{w}] = {xn}[{w}];"));
        } else {
            cx.w.line(format!("{o}[{w}] = 0u;"));
        }
    }
    Ok(())
}

/// `print(label, tensor)`: every (non-replica) thread prints its elements.
pub(crate) fn print_tensor(cx: &mut Ctx, label: &str, t: VarId) -> Result<(), CodegenError> {
    let (dt, lay) = cx.reg(t)?;
    let lid = cx.layout(&lay)?;
    let map = cx.layouts[lid].map.clone();
    let dims = cx.layouts[lid].dims.clone();
    let name = cx.name(t);
    let ct = CType::of(dt);
    cx.w.open(format!("if ({TID} < {})", map.threads));
    for j in 0..map.locals {
        let c = cx.fresh("c");
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&name, j * dt.bits() as usize, dt.bits())
        ));
        let idx: Vec<String> = (0..map.rank())
            .map(|d| crate::codegen::expr::add_const(&dims[d], map.local_index[j][d]))
            .collect();
        let fmt = vec!["%d"; idx.len()].join(", ");
        cx.w.line(format!(
            "printf(\"[block %d,%d,%d] {label}[{fmt}] = {}\\n\", blockIdx.x, blockIdx.y, blockIdx.z, {}, {});",
            scalar::printf_conv(ct),
            idx.join(", "),
            scalar::decode(dt, &c)
        ));
    }
    cx.w.close();
    Ok(())
}
