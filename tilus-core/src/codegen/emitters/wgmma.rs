//! `dot` with shared operands: `wgmma.mma_async.sync.aligned.m64nNkK` (sm_90a), `b` read by the
//! tensor cores from shared memory through a 64-bit matrix descriptor, `a` either the same way
//! (the SS form) or from four 32-bit registers per thread holding its A fragment (the RS form,
//! `layout::fragments::wgmma_a`; `crate::verify::wgmma` has the conditions).
//!
//! Each warpgroup issues, for each of its `[64, N]` accumulator blocks and each 16 of `k`, one
//! wgmma. The descriptors describe the k-major 128-byte-swizzled canonical layout: start address
//! `>> 4`, stride byte offset 1024 (the next 8 rows), leading byte offset unused (1), swizzle
//! mode 1 (128 bytes). Advancing `k` by one instruction's `K` (16 16-bit, 32 8-bit or 256 1-bit elements)
//! moves the start address by 32 bytes inside the swizzled row, which is right because the hardware swizzles address bits and the tensor starts
//! on a 1024-byte block (`codegen::smem`).
//!
//! The sequence is synchronous for the program: fence the accumulator registers (and a register
//! `a`'s), `wgmma.fence`, the wgmmas, `commit_group`, `wait_group 0`, fence the registers again
//! (so the compiler reads no accumulator before the wait, and keeps `a`'s registers unchanged
//! and allocated until the tensor cores have read them).

use crate::codegen::context::{Ctx, SharedInfo, SMEM, TID};
use crate::codegen::expr::Divisible;
use crate::codegen::regmap::LayoutMap;
use crate::codegen::CodegenError;
use crate::ir::{Expr, RegisterType, SharedType, VarId};
use crate::target::MmaKind;
use crate::verify::wgmma::{plan_wgmma, plan_wgmma_rs, OperandGeometry};

/// The operand kinds `(a, b)` with a wgmma helper, in the order of [`feature`]'s table: one
/// kind each, and the two mixed-signedness 8-bit integer pairs.
const KINDS: [(MmaKind, MmaKind); 9] = [
    (MmaKind::F16, MmaKind::F16),
    (MmaKind::Bf16, MmaKind::Bf16),
    (MmaKind::I8, MmaKind::I8),
    (MmaKind::U8, MmaKind::U8),
    (MmaKind::U8, MmaKind::I8),
    (MmaKind::I8, MmaKind::U8),
    (MmaKind::E4M3, MmaKind::E4M3),
    (MmaKind::E5M2, MmaKind::E5M2),
    (MmaKind::B1, MmaKind::B1),
];

/// The helper feature of one wgmma shape (`wgmma_f16_n256`; `wgmma_rs_f16_n256` with `a` in
/// registers; `wgmma_rs_u8s8_n64` for mixed 8-bit integers; `wgmma_f16_n256_z` for the form
/// that ignores the accumulator's input, `scale-d = 0`).
fn feature(kinds: (MmaKind, MmaKind), n: usize, rs: bool, zero: bool) -> &'static str {
    // Feature names are `&'static str`: the 2 x 9 x 32 x 2 of them are made once.
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        ["", "rs_"]
            .iter()
            .flat_map(|&form| {
                KINDS.iter().flat_map(move |&k| {
                    (1..=32).flat_map(move |x| {
                        ["", "_z"].map(|z| format!("wgmma_{form}{}_n{}{z}", name(k), 8 * x))
                    })
                })
            })
            .map(|s| &*Box::leak(s.into_boxed_str()))
            .collect()
    });
    let kind_index = KINDS
        .iter()
        .position(|&k| k == kinds)
        .expect("a wgmma kind")
        + KINDS.len() * usize::from(rs);
    names[(kind_index * 32 + n / 8 - 1) * 2 + usize::from(zero)]
}

/// The helper's type name: `f16`, `s8`, or `u8s8` for mixed operands.
fn name((a, b): (MmaKind, MmaKind)) -> String {
    if a == b {
        ty(a).to_string()
    } else {
        format!("{}{}", ty(a), ty(b))
    }
}

/// The PTX name of the operand type.
fn ty(kind: MmaKind) -> &'static str {
    match kind {
        MmaKind::Bf16 => "bf16",
        MmaKind::I8 => "s8",
        MmaKind::U8 => "u8",
        MmaKind::E4M3 => "e4m3",
        MmaKind::E5M2 => "e5m2",
        MmaKind::B1 => "b1",
        _ => "f16",
    }
}

/// `K` of the instruction for `kind`: 32 bytes of 16-, 8- or 1-bit elements.
fn k_of(kind: MmaKind) -> usize {
    match kind {
        MmaKind::F16 | MmaKind::Bf16 => 16,
        MmaKind::B1 => 256,
        _ => 32,
    }
}

/// The instruction's types (`.f32.f16.f16`, `.s32.s8.s8`, `.s32.b1.b1.and.popc`) and its operands after `b`'s
/// descriptor: scale-d (0 with `zero`: `d = a · b`, the accumulator's input ignored), then for
/// floats imm-scale-a and imm-scale-b, then for 16-bit floats the transposes (0: both k-major;
/// the RS form has only `b`'s).
fn suffix_and_tail((kind, b_kind): (MmaKind, MmaKind), rs: bool, zero: bool) -> (String, String) {
    let t = ty(kind);
    let (types, rest) = match kind {
        MmaKind::I8 | MmaKind::U8 => (format!("s32.{t}.{}", ty(b_kind)), ""),
        MmaKind::B1 => ("s32.b1.b1.and.popc".to_string(), ""),
        MmaKind::E4M3 | MmaKind::E5M2 => (format!("f32.{t}.{t}"), ", 1, 1"),
        _ if rs => (format!("f32.{t}.{t}"), ", 1, 1, 0"),
        _ => (format!("f32.{t}.{t}"), ", 1, 1, 0, 0"),
    };
    (types, format!("{}{rest}", if zero { 0 } else { 1 }))
}

/// Helper device functions for the wgmma features in `used` (called from the prelude).
pub(crate) fn helpers(used: &crate::codegen::prelude::Features) -> String {
    let mut s = String::new();
    if !used.iter().any(|u| u.starts_with("wgmma_")) {
        return s;
    }
    s.push_str(
        r#"
// The matrix descriptor of a k-major operand with the 128-byte swizzle at shared address `addr`:
// start >> 4, leading byte offset 1 (unused when k fits one swizzled row), stride byte offset
// 1024 >> 4 (8 rows of 128 bytes), swizzle mode 1 (128 bytes).
static __device__ __forceinline__ uint64_t tilus_wgmma_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
"#,
    );
    for (kinds, zero) in KINDS.into_iter().flat_map(|k| [(k, false), (k, true)]) {
        let z = if zero { "_z" } else { "" };
        for n in (8..=256).step_by(8) {
            if used.contains(feature(kinds, n, true, zero)) {
                s.push_str(&rs_helper(kinds, n, zero));
            }
            if !used.contains(feature(kinds, n, false, zero)) {
                continue;
            }
            let (t, k) = (name(kinds), k_of(kinds.0));
            let (types, tail) = suffix_and_tail(kinds, false, zero);
            let regs = n / 2;
            let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
            let outs: Vec<String> = (0..regs).map(|i| format!("\"+r\"(d[{i}])")).collect();
            s.push_str(&format!(
                "\n// d += a * b on one m64n{n}k{k} block of a warpgroup: a and b from shared memory (descriptors), d = {regs} 32-bit accumulators per thread.\n\
                 static __device__ __forceinline__ void tilus_wgmma_m64n{n}k{k}_{t}{z}(uint32_t* d, uint64_t a, uint64_t b) {{\n\
                 \x20 asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{types} {{{}}}, %{regs}, %{}, {tail};\\n\"\n\
                 \x20              : {}\n\
                 \x20              : \"l\"(a), \"l\"(b));\n\
                 }}\n",
                list.join(", "),
                regs + 1,
                outs.join(", "),
            ));
        }
    }
    s
}

/// The RS helper of one shape: `d += a * b` with `a`'s fragment in four registers (`a0..a7` as
/// `.f16x2`/`.bf16x2` pairs, or `a0..a15` as four 8-bit integers each). Operands: `d`, `{a}`,
/// the descriptor of `b`, scale-d, then for 16-bit floats imm-scale-a, imm-scale-b and
/// imm-trans-b (0: `b` k-major, as in the SS form).
fn rs_helper(kinds: (MmaKind, MmaKind), n: usize, zero: bool) -> String {
    let (t, k) = (name(kinds), k_of(kinds.0));
    let (types, tail) = suffix_and_tail(kinds, true, zero);
    let z = if zero { "_z" } else { "" };
    let regs = n / 2;
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+r\"(d[{i}])")).collect();
    format!(
        "\n// d += a * b on one m64n{n}k{k} block of a warpgroup: a from registers (its A fragment), b from shared memory (descriptor), d = {regs} 32-bit accumulators per thread.\n\
         static __device__ __forceinline__ void tilus_wgmma_rs_m64n{n}k{k}_{t}{z}(uint32_t* d, const uint32_t* a, uint64_t b) {{\n\
         \x20 asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{types} {{{}}}, {{%{}, %{}, %{}, %{}}}, %{}, {tail};\\n\"\n\
         \x20              : {}\n\
         \x20              : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b));\n\
         }}\n",
        list.join(", "),
        regs,
        regs + 1,
        regs + 2,
        regs + 3,
        regs + 4,
        outs.join(", "),
    )
}

/// Where `a` comes from: shared memory (the byte offset of its first element) or registers (for
/// each accumulator block and k step, the fragment: words `[4 l, 4 l + 4)`).
enum AOperand {
    Shared(String),
    Registers(Vec<Vec<usize>>),
}

/// `out = dot(a, b, c)` with `b` in shared memory and `a` in shared memory or registers; with
/// `wait` false (`dot_async`) the group is committed and left in flight.
pub(crate) fn dot(
    cx: &mut Ctx,
    out: VarId,
    a: VarId,
    b: VarId,
    c: VarId,
    wait: bool,
) -> Result<(), CodegenError> {
    let sb = cx.shared_info(b)?;
    let (cdt, cl) = cx.reg(c)?;
    let shared_type = |s: &SharedInfo| SharedType {
        dtype: s.dtype,
        layout: view_layout(s),
    };
    let ct = RegisterType {
        dtype: cdt,
        layout: cl,
    };
    let (plan, a_operand, k) = if cx.shared.contains_key(&a) {
        let sa = cx.shared_info(a)?;
        let plan = plan_wgmma(
            &shared_type(&sa),
            &shared_type(&sb),
            &ct,
            cx.block_threads,
            &cx.target,
        )
        .map_err(|e| cx.err(format!("dot (wgmma): {e}")))?;
        let k = sa.shape[1];
        let base = operand_base(cx, &sa, "a", k, &plan.geometry)?;
        (plan, AOperand::Shared(base), k)
    } else {
        let (adt, al) = cx.reg(a)?;
        let k = al.shape()[1];
        let rs = plan_wgmma_rs(
            &RegisterType {
                dtype: adt,
                layout: al,
            },
            &shared_type(&sb),
            &ct,
            cx.block_threads,
            &cx.target,
        )
        .map_err(|e| cx.err(format!("dot (wgmma): {e}")))?;
        (rs.base, AOperand::Registers(rs.a), k)
    };
    let g = plan.geometry;
    let base_b = operand_base(cx, &sb, "b", k, &g)?;
    let q = LayoutMap::analyze(&plan.c).map_err(|e| cx.err(e))?;
    let regs = plan.n / 2;
    let rs = matches!(a_operand, AOperand::Registers(_));
    // A `c` that is a fresh zero tile (`register(layout, 0)`, never written again) is not
    // copied into `out`: the first wgmma of each block ignores the accumulator (scale-d = 0).
    // No register moves then sit among in-flight wgmmas, where ptxas would serialize them all
    // (C7511/C7517: it does not tell one accumulator's registers from another's).
    let zero_c = out != c && cx.zero_registers.contains(&c);
    let kinds = (plan.kind, plan.b_kind);
    let helper = |zero: bool| {
        format!(
            "tilus_wgmma_{}m64n{}k{}_{}{}",
            if rs { "rs_" } else { "" },
            plan.n,
            g.k_step,
            name(kinds),
            if zero { "_z" } else { "" }
        )
    };
    cx.features.insert(feature(kinds, plan.n, rs, false));
    if zero_c {
        cx.features.insert(feature(kinds, plan.n, rs, true));
    }
    let (cn, on) = (cx.name(c), cx.name(out));
    // A register `a`: its name and words (two 16-bit or four 8-bit elements each).
    let a_words = match &a_operand {
        AOperand::Registers(_) => {
            let (adt, al) = cx.reg(a)?;
            Some((
                cx.name(a),
                crate::codegen::regs::word_count(adt.bits(), al.num_locals()),
            ))
        }
        AOperand::Shared(_) => None,
    };
    let words = q.locals * regs;
    if out != c && !zero_c {
        for w in 0..words {
            cx.w.line(format!("{on}[{w}] = {cn}[{w}];"));
        }
    }
    cx.w.open("");
    cx.w.line(format!(
        "// wgmma m64n{}k{}, {} per warpgroup",
        plan.n,
        g.k_step,
        q.locals * k / g.k_step
    ));
    let groups = cx.block_threads / 128;
    let wg = cx.fresh("wg");
    cx.w.line(format!("const int {wg} = {TID} / 128;"));
    let da = match &a_operand {
        AOperand::Shared(base_a) => {
            let da = cx.fresh("desc_a");
            cx.w.line(format!(
                "const uint64_t {da} = tilus_wgmma_desc((uint32_t)__cvta_generic_to_shared({SMEM}) + {base_a});"
            ));
            da
        }
        AOperand::Registers(_) => String::new(),
    };
    let db = cx.fresh("desc_b");
    cx.w.line(format!(
        "const uint64_t {db} = tilus_wgmma_desc((uint32_t)__cvta_generic_to_shared({SMEM}) + {base_b});"
    ));
    fence_registers(cx, &on, words);
    // wgmma.fence orders the register writes before it: a's writes must be done by then.
    if let Some((an, aw)) = &a_words {
        fence_registers(cx, an, *aw);
    }
    cx.w.line("asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");");
    for j in 0..q.locals {
        // The [64, n] block of quotient local j, per warpgroup: byte offsets of its rows of a
        // (64 rows of 128 bytes per block) and of its columns of b (n rows of 128 bytes).
        let per_group: Vec<(i64, i64)> = (0..groups)
            .map(|w| {
                let idx = q.eval(w % q.threads, j);
                (idx[0] * 64 * 128, idx[1] * plan.n as i64 * 128)
            })
            .collect();
        let (oa, ob) = (cx.fresh("off_a"), cx.fresh("off_b"));
        if !rs {
            cx.w.line(format!(
                "const uint32_t {oa} = {};",
                select_by(&wg, per_group.iter().map(|p| p.0))
            ));
        }
        cx.w.line(format!(
            "const uint32_t {ob} = {};",
            select_by(&wg, per_group.iter().map(|p| p.1))
        ));
        for step in 0..k / g.k_step {
            // One instruction's k is 32 bytes, 2 units of the descriptor's start address.
            let a_arg = match (&a_operand, &a_words) {
                (AOperand::Registers(table), Some((an, _))) => {
                    format!("&{an}[{}]", 4 * table[j][step])
                }
                _ => format!("{da} + (({oa} + {}) >> 4)", 32 * step),
            };
            cx.w.line(format!(
                "{}(&{on}[{}], {a_arg}, {db} + (({ob} + {}) >> 4));",
                helper(zero_c && step == 0),
                j * regs,
                32 * step
            ));
        }
    }
    cx.w.line("asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");");
    if wait {
        cx.w.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");");
        fence_registers(cx, &on, words);
        if let Some((an, aw)) = &a_words {
            fence_registers(cx, an, *aw);
        }
    }
    cx.w.close();
    Ok(())
}

/// `dot_wait(n)`: `wgmma.wait_group n`, then the registers of every `dot_async` accumulator and
/// register `a` are fenced (whichever groups retired, the compiler must not have read the
/// accumulators earlier, nor reused `a`'s registers).
pub(crate) fn wait(cx: &mut Ctx, n: u32) -> Result<(), CodegenError> {
    cx.w.line(format!(
        "asm volatile(\"wgmma.wait_group.sync.aligned {n};\\n\" ::: \"memory\");"
    ));
    for acc in cx.async_accumulators.clone() {
        let (dtype, layout) = cx.reg(acc)?;
        let words = (layout.num_locals() * dtype.bits() as usize).div_ceil(32);
        let name = cx.name(acc);
        fence_registers(cx, &name, words);
    }
    Ok(())
}

/// The register tensors that are a fresh zero tile: written once, by `register(layout, 0)`. A
/// `dot` into another tensor from such a `c` needs no copy of it (see [`dot`]).
pub(crate) fn zero_registers(p: &crate::ir::Program) -> std::collections::HashSet<VarId> {
    use crate::ir::Instruction;
    let mut writes: std::collections::HashMap<VarId, (usize, bool)> = Default::default();
    p.visit_instructions(&mut |i| {
        let zero = matches!(i, Instruction::AllocateRegister { init: Some(v), .. } if *v == 0.0);
        for out in i.outputs() {
            let e = writes.entry(out).or_insert((0, zero));
            e.0 += 1;
        }
    });
    writes
        .into_iter()
        .filter(|(_, (count, zero))| *count == 1 && *zero)
        .map(|(v, _)| v)
        .collect()
}

/// The registers a `dot_async` writes (its accumulators) or reads in flight (a register `a`), in
/// program order without repeats.
pub(crate) fn async_accumulators(p: &crate::ir::Program) -> Vec<VarId> {
    fn walk(p: &crate::ir::Program, body: &[crate::ir::Stmt], out: &mut Vec<VarId>) {
        use crate::ir::{Instruction, StmtKind};
        for s in body {
            match &s.kind {
                StmtKind::Instr(Instruction::DotAsync { out: v, a, .. }) => {
                    let reg_a = p.ty(*a).as_register().is_some().then_some(*a);
                    for v in std::iter::once(*v).chain(reg_a) {
                        if !out.contains(&v) {
                            out.push(v);
                        }
                    }
                }
                other => {
                    for body in other.bodies() {
                        walk(p, body, out);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(p, &p.body, &mut out);
    out
}

/// `values[wg]` as a C expression (one value when all agree).
fn select_by(wg: &str, values: impl Iterator<Item = i64>) -> String {
    let values: Vec<i64> = values.collect();
    if values.iter().all(|&v| v == values[0]) {
        return format!("{}u", values[0]);
    }
    let mut e = format!("{}u", values[values.len() - 1]);
    for (w, v) in values.iter().enumerate().rev().skip(1) {
        e = format!("({wg} == {w} ? {v}u : {e})");
    }
    e
}

/// Tell the compiler every accumulator register may change here (the tensor cores write them
/// between the issue and the wait).
fn fence_registers(cx: &mut Ctx, arr: &str, words: usize) {
    for w in 0..words {
        cx.w.line(format!(
            "asm volatile(\"\" : \"+r\"({arr}[{w}]) :: \"memory\");"
        ));
    }
}

/// The layout of a shared tensor as the instruction sees it (trailing dims of the root).
fn view_layout(s: &SharedInfo) -> crate::layout::SharedLayout {
    let lead = s.root_layout.rank() - s.shape.len();
    crate::layout::SharedLayout {
        shape: s.shape.clone(),
        strides: s.root_layout.strides[lead..].to_vec(),
        swizzle: s.root_layout.swizzle,
    }
}

/// The byte offset (a C expression, from the dynamic shared buffer) of operand `s`'s first
/// element, unswizzled, after checking that it starts a swizzle atom in its rows and that its
/// `k` window (the dim of stride 1, `k` long) lies at a multiple of the instruction's `K` inside
/// one row.
fn operand_base(
    cx: &mut Ctx,
    s: &SharedInfo,
    which: &str,
    k: usize,
    g: &OperandGeometry,
) -> Result<String, CodegenError> {
    let l = &s.root_layout;
    let (row, step) = (g.row_elements, g.k_step);
    // A 1024-byte swizzle atom: 8 rows of 128 bytes.
    let atom = 8 * row;
    let mut terms = vec![format!("{}u", s.root_offset)];
    for (d, origin) in s.origin.iter().enumerate() {
        let stride = l.strides[d];
        if stride == 1 {
            match cx.facts.constant(origin) {
                Some(c) if c % step as i64 == 0 && c >= 0 && c as usize + k <= row => {}
                _ => {
                    return Err(cx.err(format!(
                        "dot (wgmma): the k window of operand {which} must start at a constant multiple of {step} with k = {k} more inside the row of {row}; it starts at `{}`",
                        cx.expr(origin)
                    )))
                }
            }
        } else {
            // The rest of the offset must be a multiple of a swizzle atom.
            let need = atom / gcd(stride, atom);
            let proof = cx.facts.divisible(origin, need as i64);
            if matches!(proof, Divisible::No) {
                return Err(cx.err(format!(
                    "dot (wgmma): operand {which} must start on a 1024-byte swizzle atom (8 rows of 128 bytes), but its offset `{}` in dimension {d} (stride {stride}) is not provably a multiple of {need}",
                    cx.expr(origin)
                )));
            }
            cx.assume(&proof);
        }
        if origin == &Expr::Int(0) {
            continue;
        }
        if stride == 1 {
            // A constant multiple of `K`: whole bytes.
            let c = cx.facts.constant(origin).expect("checked above") as usize;
            terms.push(format!("{}u", g.bytes_of(c)));
        } else if (stride * g.bits).is_multiple_of(8) {
            terms.push(format!(
                "(uint32_t)({}) * {}u",
                cx.expr(origin),
                g.bytes_of(stride)
            ));
        } else {
            // Whole bytes once multiplied (the offset is a multiple of a swizzle atom).
            terms.push(format!(
                "(((uint32_t)({}) * {}u) >> 3)",
                cx.expr(origin),
                stride * g.bits
            ));
        }
    }
    Ok(terms.join(" + "))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
