//! `sum`, `reduce_max`, `reduce_min`, `argmax`, `any`, `all`: reductions along one dimension,
//! lowered in the three stages of [`crate::verify::plan_reduce`] (thread-local, warp shuffles,
//! shared memory).
//!
//! Values are combined in a 32-bit type ([`Acc`]: `float` for floats, so f16 and bf16 sums
//! accumulate in f32; `int` or `unsigned` for integers) and encoded once at the end. Integer sums
//! add in `unsigned`, modulo 2^32: the result is exact whenever the sum fits its dtype, which the
//! VM requires (an overflowing sum is an interpreter error), and each addition is one
//! instruction where a 64-bit accumulator with a final clamp took four to six (perf note 51).
//! Every stage is symmetric (the two lanes of a shuffle compute `a + b` and `b + a`, equal bits)
//! and the shared stage reads the partials in one fixed order, so every thread that holds a
//! row's result holds the same bits, as replicas must. `argmax` carries `(value, index)`
//! pairs and prefers the smaller index on ties, which makes the combination order irrelevant.

use crate::codegen::context::{Ctx, SMEM, TID};
use crate::codegen::emitters::elementwise::store_codes;
use crate::codegen::regs::get_bits;
use crate::codegen::scalar;
use crate::codegen::CodegenError;
use crate::ir::{ReduceOp, VarId};
use crate::verify::{plan_reduce, ReducePlan};
use crate::DType;

/// The C type a reduction combines its partials in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Acc {
    /// Floats, in f32.
    Float,
    /// Signed integers compared (maximum, minimum, argmax): sign-extended to `int`.
    Int,
    /// Unsigned integers, and every integer sum (wrapping modulo 2^32).
    Unsigned,
}

impl Acc {
    fn of(d: DType, op: ReduceOp) -> Acc {
        if d.is_float() {
            Acc::Float
        } else if d.is_signed() && op != ReduceOp::Sum {
            Acc::Int
        } else {
            Acc::Unsigned
        }
    }

    fn name(self) -> &'static str {
        match self {
            Acc::Float => "float",
            Acc::Int => "int",
            Acc::Unsigned => "unsigned",
        }
    }

    /// The value of code variable `c` of dtype `d` in this type (signed codes sign-extended,
    /// also on their way into an unsigned sum, whose modular arithmetic then stays exact).
    fn decode(self, d: DType, c: &str) -> String {
        match self {
            Acc::Float => scalar::decode(d, c),
            Acc::Int => scalar::sign_extend(d, c),
            Acc::Unsigned if d.is_signed() => format!("(unsigned){}", scalar::sign_extend(d, c)),
            Acc::Unsigned => format!("(unsigned)({c})"),
        }
    }

    /// The code of dtype `d` for value `v` (an integer result is in `d`'s range: its low bits).
    fn encode(self, d: DType, v: &str) -> String {
        match self {
            Acc::Float => scalar::round(d, v),
            _ if d.bits() == 32 => format!("(uint32_t)({v})"),
            _ => format!(
                "((uint32_t)({v}) & {})",
                crate::codegen::regs::hex(d.code_mask())
            ),
        }
    }
}

/// The statement that folds `(y, iy)` into `(v, iv)`.
fn combine(ct: Acc, op: ReduceOp, v: &str, iv: &str, y: &str, iy: &str) -> String {
    let float = ct == Acc::Float;
    match op {
        ReduceOp::Sum if float => format!("{v} = __fadd_rn({v}, {y});"),
        ReduceOp::Sum => format!("{v} += {y};"),
        ReduceOp::Max if float => format!("{v} = fmaxf({v}, {y});"),
        ReduceOp::Min if float => format!("{v} = fminf({v}, {y});"),
        ReduceOp::Max | ReduceOp::Any => format!("{v} = max({v}, {y});"),
        ReduceOp::Min | ReduceOp::All => format!("{v} = min({v}, {y});"),
        ReduceOp::ArgMax => {
            format!("if ({y} > {v} || ({y} == {v} && {iy} < {iv})) {{ {v} = {y}; {iv} = {iy}; }}")
        }
    }
}

/// C expression for the scratch slot of layout thread `r` ([`ReducePlan::slot_of`]).
fn slot_expr(plan: &ReducePlan, r: &str) -> String {
    let top = plan.lane_top();
    if top == 0 {
        return r.to_string();
    }
    let is_mask = |b: u32| plan.lane_masks.contains(&(1usize << b));
    let kept = (0..top).filter(|&b| !is_mask(b)).count();
    let mut parts = vec![format!("(({r} >> {top}) << {kept})")];
    // Each run of kept bits moves down by the shuffle bits below it.
    let mut b = 0;
    let mut pos = 0;
    while b < top {
        if is_mask(b) {
            b += 1;
            continue;
        }
        let start = b;
        while b < top && !is_mask(b) {
            b += 1;
        }
        let width = b - start;
        parts.push(format!(
            "((({r} >> {start}) & {}) << {pos})",
            (1u32 << width) - 1
        ));
        pos += width;
    }
    parts.join(" | ")
}

pub(crate) fn reduce(
    cx: &mut Ctx,
    out: VarId,
    x: VarId,
    op: ReduceOp,
    dim: usize,
) -> Result<(), CodegenError> {
    let (xd, xl) = cx.reg(x)?;
    let (od, _) = cx.reg(out)?;
    let plan = plan_reduce(&xl, dim).map_err(|e| cx.err(e))?;
    let ct = Acc::of(xd, op);
    let vt = ct.name();
    let bits = xd.bits();
    let argmax = op == ReduceOp::ArgMax;
    let (xn, o) = (cx.name(x), cx.name(out));
    // For argmax: the thread's own coordinate along `dim`.
    let tcoord = if argmax {
        let lid = cx.layout(&xl)?;
        cx.layouts[lid].dims[dim].clone()
    } else {
        "0".to_string()
    };
    cx.w.open("");
    // Stage 1: each thread's locals, combined pairwise (a tree of depth log2(locals) rather
    // than a chain: the combinations of one level are independent, so they issue back to back).
    let mut vs = Vec::new();
    let mut is = Vec::new();
    for (j, group) in plan.groups.iter().enumerate() {
        let mut level: Vec<(String, String)> = Vec::new();
        for (k, &i) in group.iter().enumerate() {
            let c = cx.fresh("c");
            cx.w.line(format!(
                "const uint32_t {c} = {};",
                get_bits(&xn, i * bits as usize, bits)
            ));
            let (v, iv) = if k == 0 {
                (
                    cx.fresh(&format!("{o}_v{j}")),
                    cx.fresh(&format!("{o}_i{j}")),
                )
            } else {
                (cx.fresh("y"), cx.fresh("iy"))
            };
            cx.w.line(format!("{vt} {v} = {};", ct.decode(xd, &c)));
            if argmax {
                let coord = crate::codegen::expr::add_const(&tcoord, plan.local_coord[i] as i64);
                cx.w.line(format!("int {iv} = {coord};"));
            }
            level.push((v, iv));
        }
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            for pair in level.chunks(2) {
                if let [(v, iv), (y, iy)] = pair {
                    cx.w.line(combine(ct, op, v, iv, y, iy));
                }
                next.push(pair[0].clone());
            }
            level = next;
        }
        let (v, iv) = level.pop().expect("a group has at least one local");
        vs.push(v);
        is.push(iv);
    }
    // Stage 2: the butterfly over the lane bits of `dim`.
    for &m in &plan.lane_masks {
        for (v, iv) in vs.iter().zip(&is) {
            let (y, iy) = (cx.fresh("y"), cx.fresh("iy"));
            cx.w.line(format!(
                "const {vt} {y} = __shfl_xor_sync(0xffffffffu, {v}, {m});"
            ));
            if argmax {
                cx.w.line(format!(
                    "const int {iy} = __shfl_xor_sync(0xffffffffu, {iv}, {m});"
                ));
            }
            cx.w.line(combine(ct, op, v, iv, &y, &iy));
        }
    }
    // Stage 3: the remaining thread digits through the shared scratch.
    if !plan.shared_digits.is_empty() {
        shared_stage(cx, &plan, op, ct, &vs, &is)?;
    }
    let codes: Vec<String> = vs
        .iter()
        .zip(&is)
        .map(|(v, iv)| {
            if argmax {
                format!("(uint32_t){iv}")
            } else {
                ct.encode(od, v)
            }
        })
        .collect();
    store_codes(cx, &o, od.bits(), &codes);
    cx.w.close();
    Ok(())
}

fn shared_stage(
    cx: &mut Ctx,
    plan: &ReducePlan,
    op: ReduceOp,
    ct: Acc,
    vs: &[String],
    is: &[String],
) -> Result<(), CodegenError> {
    let argmax = op == ReduceOp::ArgMax;
    let vt = ct.name();
    // Every `Acc` is 4 bytes, as `ReducePlan::scratch_bytes` plans.
    let vbytes = 4;
    let ol = plan.out_locals();
    let base = cx.plan.reduce_scratch;
    let (sv, si, r, rb) = (
        cx.fresh("red_v"),
        cx.fresh("red_i"),
        cx.fresh("red_r"),
        cx.fresh("red_rb"),
    );
    cx.w.line(format!(
        "{vt}* {sv} = ({vt}*)({SMEM} + {base});  // reduction scratch: {} slots x {ol}",
        plan.slots
    ));
    if argmax {
        cx.w.line(format!(
            "int* {si} = (int*)({SMEM} + {});",
            base + plan.slots * ol * vbytes
        ));
    }
    let threads = plan.threads;
    let r_expr = if threads >= cx.block_threads {
        TID.to_string()
    } else {
        format!("({TID} % {threads})")
    };
    cx.w.line(format!("const int {r} = {r_expr};"));
    // One writer per slot: a layout thread (not a replica) with its shuffle bits zero.
    let mut cond = Vec::new();
    if threads < cx.block_threads {
        cond.push(format!("{TID} < {threads}"));
    }
    let lane_bits: usize = plan.lane_masks.iter().sum();
    if lane_bits != 0 {
        cond.push(format!("({r} & {lane_bits}) == 0"));
    }
    let slot = slot_expr(plan, &r);
    let head = if cond.is_empty() {
        String::new()
    } else {
        format!("if ({})", cond.join(" && "))
    };
    cx.w.open(head);
    let s = cx.fresh("s");
    cx.w.line(format!("const int {s} = {slot};"));
    for (j, (v, iv)) in vs.iter().zip(is).enumerate() {
        cx.w.line(format!("{sv}[{s} * {ol} + {j}] = {v};"));
        if argmax {
            cx.w.line(format!("{si}[{s} * {ol} + {j}] = {iv};"));
        }
    }
    cx.w.close();
    cx.w.line(cx.block_barrier());
    // The row's first partner (every shared digit zero), then the others in a fixed order.
    let digit = |t: &str, place: usize, size: usize| format!("(({t} / {place}) % {size})");
    let zeroed: Vec<String> = plan
        .shared_digits
        .iter()
        .map(|&(p, n)| format!(" - {} * {p}", digit(&r, p, n)))
        .collect();
    cx.w.line(format!("const int {rb} = {r}{};", zeroed.concat()));
    let count: usize = plan.shared_digits.iter().map(|&(_, n)| n).product();
    let read = |cx: &mut Ctx, partner: &str, first: bool| {
        let s = cx.fresh("s");
        cx.w.line(format!("const int {s} = {};", slot_expr(plan, partner)));
        for (j, (v, iv)) in vs.iter().zip(is).enumerate() {
            if first {
                cx.w.line(format!("{v} = {sv}[{s} * {ol} + {j}];"));
                if argmax {
                    cx.w.line(format!("{iv} = {si}[{s} * {ol} + {j}];"));
                }
            } else {
                let (y, iy) = (cx.fresh("y"), cx.fresh("iy"));
                cx.w.line(format!("const {vt} {y} = {sv}[{s} * {ol} + {j}];"));
                if argmax {
                    cx.w.line(format!("const int {iy} = {si}[{s} * {ol} + {j}];"));
                }
                cx.w.line(combine(ct, op, v, iv, &y, &iy));
            }
        }
    };
    read(cx, &rb, true);
    let k = cx.fresh("k");
    cx.w.line("#pragma unroll");
    cx.w.open(format!("for (int {k} = 1; {k} < {count}; ++{k})"));
    let mut terms = vec![rb.clone()];
    let mut below = 1;
    for &(p, n) in &plan.shared_digits {
        terms.push(format!("{} * {p}", digit(&k, below, n)));
        below *= n;
    }
    let partner = cx.fresh("p");
    cx.w.line(format!("const int {partner} = {};", terms.join(" + ")));
    read(cx, &partner, false);
    cx.w.close();
    // Every thread has read its partials before the next reduction writes the scratch.
    cx.w.line(cx.block_barrier());
    Ok(())
}

/// `a + b` in `ct` (floats rounded per addition, as `sum` accumulates; integers modulo 2^32).
fn add(ct: Acc, a: &str, b: &str) -> String {
    match ct {
        Acc::Float => format!("__fadd_rn({a}, {b})"),
        _ => format!("{a} + {b}"),
    }
}

/// `out = cumsum(x, dim)` along the digits of [`crate::verify::plan_scan`], innermost first:
/// every local keeps its running prefix `s` and the total `t` of the block of digits combined so
/// far. A local digit adds the totals of the lower blocks in registers; a lane digit scans the
/// totals across its lanes (Hillis-Steele with `__shfl_up_sync`), adds the exclusive part, and
/// takes the block total from the digit's last lane. Values add in the sum's [`Acc`]: integers
/// modulo 2^32, exact since the VM defines only prefixes that fit the dtype.
pub(crate) fn scan(cx: &mut Ctx, out: VarId, x: VarId, dim: usize) -> Result<(), CodegenError> {
    let (xd, xl) = cx.reg(x)?;
    let plan = crate::verify::plan_scan(&xl, dim).map_err(|e| cx.err(e))?;
    let ct = Acc::of(xd, ReduceOp::Sum);
    let vt = ct.name();
    let bits = xd.bits();
    let locals = xl.num_locals();
    let (xn, o) = (cx.name(x), cx.name(out));
    cx.w.open("");
    let mut s = Vec::new();
    let mut t = Vec::new();
    for i in 0..locals {
        let (c, si, ti) = (
            cx.fresh("c"),
            cx.fresh(&format!("{o}_s{i}")),
            cx.fresh(&format!("{o}_t{i}")),
        );
        cx.w.line(format!(
            "const uint32_t {c} = {};",
            get_bits(&xn, i * bits as usize, bits)
        ));
        cx.w.line(format!("{vt} {si} = {};", ct.decode(xd, &c)));
        cx.w.line(format!("{vt} {ti} = {si};"));
        s.push(si);
        t.push(ti);
    }
    for step in &plan.steps {
        match *step {
            crate::verify::ScanStep::Local { place, size } => {
                // Blocks: locals whose digit is 0, with their members along the digit.
                for base in (0..locals).filter(|i| (i / place) % size == 0) {
                    let members: Vec<usize> = (0..size).map(|v| base + v * place).collect();
                    let run = cx.fresh("run");
                    cx.w.line(format!("{vt} {run} = {};", t[members[0]]));
                    for &m in &members[1..] {
                        cx.w.line(format!("{} = {};", s[m], add(ct, &run, &s[m])));
                        cx.w.line(format!("{run} = {};", add(ct, &run, &t[m])));
                    }
                    for &m in &members {
                        cx.w.line(format!("{} = {run};", t[m]));
                    }
                }
            }
            crate::verify::ScanStep::Shared { place, size } => {
                // Every thread publishes its totals in its own slots; after a barrier each one
                // reads the totals of the members of its group along the digit (the threads
                // that differ from it only in this digit, same replica), in a fixed order so
                // that all members compute the same bits; a second barrier frees the scratch.
                let bt = cx.block_threads;
                let lt = xl.num_threads();
                let (sc, r, v) = (cx.fresh("scan_sc"), cx.fresh("scan_r"), cx.fresh("scan_v"));
                cx.w.line(format!(
                    "{vt}* {sc} = ({vt}*)({SMEM} + {});  // scan scratch: {bt} threads x {locals}",
                    cx.plan.reduce_scratch
                ));
                let r_expr = if lt >= bt {
                    TID.to_string()
                } else {
                    format!("({TID} % {lt})")
                };
                cx.w.line(format!("const int {r} = {r_expr};"));
                cx.w.line(format!("const int {v} = ({r} / {place}) % {size};"));
                for (i, ti) in t.iter().enumerate() {
                    cx.w.line(format!("{sc}[{TID} * {locals} + {i}] = {ti};"));
                }
                cx.w.line(cx.block_barrier());
                let zero = if ct == Acc::Float { "0.0f" } else { "0u" };
                for i in 0..locals {
                    let (ex, tot) = (cx.fresh("ex"), cx.fresh("tot"));
                    cx.w.line(format!("{vt} {ex} = {zero};"));
                    cx.w.line(format!("{vt} {tot} = {zero};"));
                    for u in 0..size {
                        let w = cx.fresh("w");
                        cx.w.line(format!(
                            "const {vt} {w} = {sc}[({TID} + ({u} - {v}) * {place}) * {locals} + {i}];"
                        ));
                        cx.w.line(format!("if ({u} < {v}) {ex} = {};", add(ct, &ex, &w)));
                        cx.w.line(format!("{tot} = {};", add(ct, &tot, &w)));
                    }
                    cx.w.line(format!("{} = {};", s[i], add(ct, &ex, &s[i])));
                    cx.w.line(format!("{} = {tot};", t[i]));
                }
                cx.w.line(cx.block_barrier());
            }
            crate::verify::ScanStep::Lane { place, size } => {
                let v = cx.fresh("v");
                cx.w.line(format!(
                    "const int {v} = ({TID} >> {}) & {};",
                    place.trailing_zeros(),
                    size - 1
                ));
                let last = cx.fresh("last");
                cx.w.line(format!(
                    "const int {last} = ({TID} & 31) | {};",
                    (size - 1) * place
                ));
                for i in 0..locals {
                    let inc = cx.fresh("inc");
                    cx.w.line(format!("{vt} {inc} = {};", t[i]));
                    let mut off = 1;
                    while off < size {
                        let y = cx.fresh("y");
                        cx.w.line(format!(
                            "const {vt} {y} = __shfl_up_sync(0xffffffffu, {inc}, {});",
                            off * place
                        ));
                        cx.w.line(format!("if ({v} >= {off}) {inc} = {};", add(ct, &y, &inc)));
                        off *= 2;
                    }
                    let ex = cx.fresh("ex");
                    cx.w.line(format!(
                        "const {vt} {ex} = __shfl_up_sync(0xffffffffu, {inc}, {place});"
                    ));
                    cx.w.line(format!("if ({v} > 0) {} = {};", s[i], add(ct, &ex, &s[i])));
                    cx.w.line(format!(
                        "{} = __shfl_sync(0xffffffffu, {inc}, {last});",
                        t[i]
                    ));
                }
            }
        }
    }
    let codes: Vec<String> = s.iter().map(|v| ct.encode(xd, v)).collect();
    store_codes(cx, &o, bits, &codes);
    cx.w.close();
    Ok(())
}
