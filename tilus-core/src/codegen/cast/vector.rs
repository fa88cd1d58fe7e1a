//! The vectorized algorithms: they build the op lists of `ops.rs`.
//!
//! Every algorithm turns a group of packed codes into `group/2` words of f16/bf16 pairs. The
//! output word `k` holds element `2k` in its low lane (bits 0..16) and `2k+1` in its high lane.
//! Most algorithms have two phases:
//!
//! 1. **Placement**: move code `2k` into lane 0 and code `2k+1` into lane 1 of one word, at a bit
//!    offset that the second phase can use. One `prmt` does it for both lanes: it picks, for each
//!    lane, two consecutive bytes out of two registers. The registers are input words or
//!    *views*: the input bit stream shifted by a few bits (one `shf.r` funnel shift each, shared
//!    by every output word that uses it), so that codes which straddle bytes or words, or sit at
//!    an unusable offset, land where they must. A small search ([`plan_placement`]) picks the
//!    set of views that minimises the op count.
//! 2. **Value**: bit tricks that turn the placed code into the 16-bit float, with one packed
//!    `fma.rn` doing the arithmetic on both lanes at once (see each builder for why it is exact).

use super::ops::{Builder, Half, Program, Val};
use super::{PackOrder, Special, SrcKind};
use std::collections::HashSet;

/// Both 16-bit lanes set to `v`.
fn lanes(v: u32) -> u32 {
    debug_assert!(v <= 0xFFFF);
    v | (v << 16)
}

/// All four bytes set to `v`.
fn bytes(v: u32) -> u32 {
    debug_assert!(v <= 0xFF);
    v * 0x0101_0101
}

/// Elements per group: the fewest (an even number) whose bits fill whole 32-bit words and, for
/// a split order, whole blocks of it.
pub(crate) fn group_size(bits: u32, order: PackOrder) -> usize {
    let mut g = 2usize;
    while !(g * bits as usize).is_multiple_of(32) || !g.is_multiple_of(order.block()) {
        g += 2;
    }
    g
}

/// Where one lane's code may be placed.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// Integers: any offset `o` with `o + bits <= limit` (the two lanes may differ).
    IntMax(i32),
    /// Floats: both lanes at offset `t` exactly. The planner may also put both lanes at one other
    /// offset and add one shift of the whole word.
    Exact(i32),
    /// Integers, biased casts: any offset `o` with `lo <= o` and `o + bits <= limit`.
    IntRange(i32, i32),
}

/// Byte `byte` (0..4) of the view whose bit 0 is stream bit `origin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ByteRef {
    origin: i32,
    byte: u32,
}

/// A way to fill one lane: its low and high byte (`None`: not needed, any byte will do) and the
/// resulting bit offset of the code within the lane.
#[derive(Clone, Copy, Debug)]
struct LaneOpt {
    lo: Option<ByteRef>,
    hi: Option<ByteRef>,
    off: i32,
}

/// How one output word is placed: the two lanes and a final shift of the whole word
/// (positive: left). With `direct`, no `prmt`: that view already holds code `2k` in its low
/// lane and code `2k+1` in its high lane (a split pack order puts them 16 bits apart).
#[derive(Clone, Copy, Debug)]
struct WordPlan {
    lanes: [LaneOpt; 2],
    shift: i32,
    direct: Option<i32>,
}

/// Views whose origin is a multiple of 32 are input words (or zero): free.
fn view_is_free(origin: i32) -> bool {
    origin.rem_euclid(32) == 0
}

/// The view's register: stream bits `[origin, origin + 32)`, zero outside the group.
fn view(bld: &mut Builder, origin: i32) -> Val {
    let w = origin.div_euclid(32) as i64;
    let r = origin.rem_euclid(32) as u32;
    if r == 0 {
        return bld.input(w);
    }
    let (lo, hi) = (bld.input(w), bld.input(w + 1));
    bld.funnel(lo, hi, r, &format!("view of stream bits from {origin}"))
}

/// All ways to put the code at stream bits `[p, p + bits)` into a lane, using views with the
/// given origins.
fn lane_opts(p: i32, bits: i32, origins: &[i32], ok: impl Fn(i32) -> bool) -> Vec<LaneOpt> {
    let mut v = Vec::new();
    for &origin in origins {
        for x in -1..=3i32 {
            let base = origin + 8 * x;
            let off = p - base;
            if off < 0 || off + bits > 16 || !ok(off) {
                continue;
            }
            let lo_needed = p < base + 8;
            let hi_needed = p + bits > base + 8;
            if lo_needed && x < 0 {
                continue;
            }
            let lo = lo_needed.then_some(ByteRef {
                origin,
                byte: x as u32,
            });
            let hi = hi_needed.then(|| {
                if x < 3 {
                    ByteRef {
                        origin,
                        byte: (x + 1) as u32,
                    }
                } else {
                    ByteRef {
                        origin: origin + 32,
                        byte: 0,
                    }
                }
            });
            v.push(LaneOpt { lo, hi, off });
        }
    }
    v
}

/// The distinct view origins a pair of lanes reads, in order of first use.
fn pair_origins(l0: &LaneOpt, l1: &LaneOpt) -> Vec<i32> {
    let mut o = Vec::new();
    for r in [l0.lo, l0.hi, l1.lo, l1.hi].into_iter().flatten() {
        if !o.contains(&r.origin) {
            o.push(r.origin);
        }
    }
    o
}

/// Greedy placement with a fixed set of view shifts: returns the op count and the plans.
/// `None` when some word cannot be placed with these shifts.
fn greedy(
    bits: i32,
    n_in: usize,
    codes: &[[i32; 2]],
    rule: Rule,
    shifts: &[i32],
) -> Option<(usize, Vec<WordPlan>)> {
    let mut have: HashSet<i32> = HashSet::new();
    let mut total = 0;
    let mut plans = Vec::new();
    for &[p0, p1] in codes {
        let mut origins = Vec::new();
        for &s in shifts {
            for w in -1..=(n_in as i32) {
                let o = 32 * w + s;
                if o >= p0 + bits - 40 && o <= p1 + 8 {
                    origins.push(o);
                }
            }
        }
        let ok = |off: i32| match rule {
            Rule::IntMax(limit) => off + bits <= limit,
            Rule::IntRange(lo, limit) => off >= lo && off + bits <= limit,
            Rule::Exact(_) => true,
        };
        let o0 = lane_opts(p0, bits, &origins, ok);
        let o1 = lane_opts(p1, bits, &origins, ok);
        let mut best: Option<(usize, WordPlan, Vec<i32>)> = None;
        // Direct: one view with both codes already in their lanes.
        for &o in &origins {
            let offs = [p0 - o, p1 - o - 16];
            if offs
                .iter()
                .any(|&off| off < 0 || off + bits > 16 || !ok(off))
            {
                continue;
            }
            let shift = match rule {
                Rule::IntMax(_) | Rule::IntRange(..) => 0,
                Rule::Exact(t) if offs[0] == offs[1] => t - offs[0],
                Rule::Exact(_) => continue,
            };
            let new_view = usize::from(!view_is_free(o) && !have.contains(&o));
            let cost = new_view + usize::from(shift != 0);
            if best.as_ref().is_none_or(|b| cost < b.0) {
                let lane = |off| LaneOpt {
                    lo: None,
                    hi: None,
                    off,
                };
                best = Some((
                    cost,
                    WordPlan {
                        lanes: [lane(offs[0]), lane(offs[1])],
                        shift,
                        direct: Some(o),
                    },
                    vec![o],
                ));
            }
        }
        for l0 in &o0 {
            for l1 in &o1 {
                let shift = match rule {
                    Rule::IntMax(_) | Rule::IntRange(..) => 0,
                    Rule::Exact(t) => {
                        if l0.off != l1.off {
                            continue;
                        }
                        t - l0.off
                    }
                };
                let used = pair_origins(l0, l1);
                if used.len() > 2 {
                    continue;
                }
                let new_views = used
                    .iter()
                    .filter(|&&o| !view_is_free(o) && !have.contains(&o))
                    .count();
                let cost = new_views + 1 + usize::from(shift != 0);
                if best.as_ref().is_none_or(|b| cost < b.0) {
                    best = Some((
                        cost,
                        WordPlan {
                            lanes: [*l0, *l1],
                            shift,
                            direct: None,
                        },
                        used,
                    ));
                }
            }
        }
        let (cost, plan, used) = best?;
        total += cost;
        have.extend(used);
        plans.push(plan);
    }
    Some((total, plans))
}

/// Chooses the view shifts (at most two besides the input words themselves) that minimise the
/// number of ops of the placement phase; `None` when no such set places every code (e.g. bf16
/// magic numbers for 7-bit integers: offset 0 for codes at all eight bit residues).
///
/// With `wide`, shifts up to 15 bits are tried: a split order puts codes at every residue of
/// a 16-bit lane, and a view that reaches them saves a `prmt` per word.
fn plan_placement(
    bits: i32,
    n_in: usize,
    codes: &[[i32; 2]],
    rule: Rule,
    wide: bool,
) -> Option<Vec<WordPlan>> {
    let reach = if wide { 15 } else { 7 };
    let cands: Vec<i32> = (-reach..=reach).filter(|&s| s != 0).collect();
    let mut sets: Vec<Vec<i32>> = vec![vec![0]];
    for (i, &a) in cands.iter().enumerate() {
        sets.push(vec![0, a]);
        for &b in &cands[i + 1..] {
            sets.push(vec![0, a, b]);
        }
    }
    let mut best: Option<(usize, Vec<WordPlan>)> = None;
    for set in &sets {
        let Some((cost, plans)) = greedy(bits, n_in, codes, rule, set) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| cost < b.0) {
            best = Some((cost, plans));
        }
    }
    best.map(|b| b.1)
}

/// Emits the placement of one output word: a `prmt` of at most two views, then the optional
/// shift. Returns the word and the code offsets of its two lanes.
fn realize(bld: &mut Builder, plan: &WordPlan, what: &str) -> (Val, [i32; 2]) {
    let [l0, l1] = plan.lanes;
    if let Some(origin) = plan.direct {
        let mut p = view(bld, origin);
        if plan.shift > 0 {
            p = bld.shl(p, plan.shift as u32, "align both lanes");
        } else if plan.shift < 0 {
            p = bld.shr(p, (-plan.shift) as u32, "align both lanes");
        }
        return (p, [l0.off + plan.shift, l1.off + plan.shift]);
    }
    let used = pair_origins(&l0, &l1);
    let va = view(bld, used[0]);
    let vb = if used.len() > 1 {
        view(bld, used[1])
    } else {
        va
    };
    let nib = |r: ByteRef| -> u32 {
        let idx = used.iter().position(|&o| o == r.origin).unwrap() as u32;
        // With a single view both operands are that view: bytes 0..3 suffice.
        4 * idx + r.byte
    };
    let mut sel = 0u32;
    for (i, l) in [l0, l1].iter().enumerate() {
        let lo = l.lo.map(nib);
        let hi = l.hi.map(nib);
        let (lo, hi) = match (lo, hi) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) => (a, if a % 4 != 3 { a + 1 } else { a }),
            (None, Some(b)) => (if b % 4 != 0 { b - 1 } else { b }, b),
            (None, None) => unreachable!("a lane holds a code"),
        };
        sel |= (lo | (hi << 4)) << (8 * i);
    }
    let mut p = bld.prmt(va, vb, Val::Imm(sel), &format!("{what} into lanes"));
    if plan.shift > 0 {
        p = bld.shl(p, plan.shift as u32, "align both lanes");
    } else if plan.shift < 0 {
        p = bld.shr(p, (-plan.shift) as u32, "align both lanes");
    }
    let offs = [l0.off + plan.shift, l1.off + plan.shift];
    (p, offs)
}

/// Stream positions of the two codes of each output word.
fn pair_positions(bits: u32, group: usize, order: PackOrder) -> Vec<[i32; 2]> {
    (0..group / 2)
        .map(|k| {
            order
                .pair_slots(k)
                .map(|slot| (slot * bits as usize) as i32)
        })
        .collect()
}

fn int_name(bits: u32, signed: bool) -> String {
    format!("{}{}", if signed { "i" } else { "u" }, bits)
}

/// Integers by the magic-number trick, into `ty` directly.
///
/// A lane holding the bits of `2^L` (`L` = mantissa width: 1024.0 = 0x6400 for f16, 128.0 =
/// 0x4300 for bf16) with the code ORed into its mantissa at offset `o` is exactly
/// `2^L + code * 2^o`, as long as `o + bits <= L` (the code stays inside the mantissa). A signed
/// code first gets its sign bit flipped (the same `lop3` does AND-mask and XOR-magic-and-sign),
/// which turns two's complement `v` into `v + 2^(bits-1)`. One packed fma then computes
/// `X * 2^-o - (2^(L-o) + 2^(bits-1))`: the product is exact (a power of two, far from
/// underflow), and the exact result is the small integer `v`, which both formats represent, so
/// the single rounding of the fma changes nothing. Zero comes out as +0.
///
/// With `subtract_sign_bias == false` the result is the unsigned `v + 2^(bits-1)` (used by
/// [`int_via_f16`]).
fn int_magic_words(
    bld: &mut Builder,
    bits: u32,
    signed: bool,
    ty: Half,
    subtract_sign_bias: bool,
    order: PackOrder,
) -> Option<Vec<Val>> {
    let group = group_size(bits, order);
    let n_in = group * bits as usize / 32;
    let l = ty.man_bits() as i32;
    let plans = plan_placement(
        bits as i32,
        n_in,
        &pair_positions(bits, group, order),
        Rule::IntMax(l),
        order != PackOrder::Natural,
    )?;
    let magic = ty.bits_exact(2f64.powi(l)) as u32;
    let bias = if signed && subtract_sign_bias {
        2f64.powi(bits as i32 - 1)
    } else {
        0.0
    };
    let mut outs = Vec::new();
    for plan in &plans {
        let (p, offs) = realize(bld, plan, "codes");
        let lane = |f: &dyn Fn(i32) -> u32| f(offs[0]) | (f(offs[1]) << 16);
        let mask = lane(&|o| ((1u32 << bits) - 1) << o);
        let xor = lane(&|o| {
            magic
                | if signed {
                    1 << (o + bits as i32 - 1)
                } else {
                    0
                }
        });
        let x = bld.lop3(
            p,
            Val::Imm(mask),
            Val::Imm(xor),
            |a, b, c| (a & b) ^ c,
            if signed {
                "code into the mantissa of 2^L, sign bit flipped"
            } else {
                "code into the mantissa of 2^L"
            },
        );
        let scale = ty.pair(2f64.powi(-offs[0]), 2f64.powi(-offs[1]));
        let off = ty.pair(
            -(2f64.powi(l - offs[0]) + bias),
            -(2f64.powi(l - offs[1]) + bias),
        );
        outs.push(bld.fma2(
            ty,
            x,
            Val::Imm(scale),
            Val::Imm(off),
            "x * 2^-o - (2^(L-o) + bias): exact",
        ));
    }
    Some(outs)
}

/// The largest bias a biased cast may leave: `2^6`. A lane's value is then at most 64 + 2^bits,
/// so the products the mma accumulates, and the correction subtracted after it, stay within a
/// few bits of the weights' own magnitude.
pub(crate) const MAX_BIAS_LOG2: i32 = 6;

/// Integers to `ty` plus a per-lane bias, one `lop3` per output word: the code goes into the
/// mantissa at an offset `o` whose ulp is 1 in the binade `2^(L-o)` (`L` the mantissa width),
/// so the lane is exactly `2^(L-o) + u` with `u` the unsigned code (a signed code gets its
/// sign bit flipped, `u = v + 2^(bits-1)`). The value is the code's plus the bias
/// `2^(L-o) (+ 2^(bits-1))`, which depends only on the lane's position in the group, never on
/// the code: the caller subtracts it from whatever it accumulates (see `Instruction::Cast`).
/// The placement keeps `o >= L - MAX_BIAS_LOG2`; views (funnel shifts) shared by several words
/// move the other codes there. `None` when the type does not fit (`bits > MAX_BIAS_LOG2`) or no
/// placement exists.
fn int_biased(bits: u32, signed: bool, ty: Half, order: PackOrder) -> Option<Program> {
    let l = ty.man_bits() as i32;
    let lo = (l - MAX_BIAS_LOG2).max(0);
    if bits as i32 + lo > l {
        return None;
    }
    let group = group_size(bits, order);
    let n_in = group * bits as usize / 32;
    let mut bld = Builder::new(n_in);
    let plans = plan_placement(
        bits as i32,
        n_in,
        &pair_positions(bits, group, order),
        Rule::IntRange(lo, l),
        order != PackOrder::Natural,
    )?;
    let mut outs = Vec::new();
    for plan in &plans {
        let (p, offs) = realize(&mut bld, plan, "codes");
        let lane = |f: &dyn Fn(i32) -> u32| f(offs[0]) | (f(offs[1]) << 16);
        let mask = lane(&|o| ((1u32 << bits) - 1) << o);
        let xor = lane(&|o| {
            ty.bits_exact(2f64.powi(l - o)) as u32
                | if signed {
                    1 << (o + bits as i32 - 1)
                } else {
                    0
                }
        });
        outs.push(bld.lop3(
            p,
            Val::Imm(mask),
            Val::Imm(xor),
            |a, b, c| (a & b) ^ c,
            "code into the mantissa of 2^(L-o): 2^(L-o) + code",
        ));
    }
    Some(bld.finish(
        outs,
        format!(
            "{} -> {ty:?} + bias: the code in the mantissa of 2^(L-o), one lop3 per pair.",
            int_name(bits, signed)
        ),
    ))
}

/// The biased program for a pair and order (integers only).
pub(crate) fn build_biased(src: SrcKind, ty: Half, order: PackOrder) -> Option<Program> {
    match src {
        SrcKind::UInt(bits) => int_biased(bits, false, ty, order),
        SrcKind::Int(bits) => int_biased(bits, true, ty, order),
        SrcKind::Float { .. } => None,
    }
}

fn int_magic(bits: u32, signed: bool, ty: Half, order: PackOrder) -> Option<Program> {
    let group = group_size(bits, order);
    let mut bld = Builder::new(group * bits as usize / 32);
    let outs = int_magic_words(&mut bld, bits, signed, ty, true, order)?;
    Some(bld.finish(
        outs,
        format!(
            "{} -> {ty:?}: magic number 2^{} per lane (lop3 mask|magic), one packed fma.",
            int_name(bits, signed),
            ty.man_bits()
        ),
    ))
}

/// Integers to bf16 through f16: the f16 magic trick yields the exact unsigned value
/// `u = v + 2^(bits-1)` (or `v`), an integer below 256. Its f16 mantissa has at most 7
/// significant bits after the leading one, so its low 3 mantissa bits are zero; shifting the
/// whole word right by 3 then gives, in each lane, the bf16 pattern with the same exponent field
/// and mantissa: the bf16 value `u * 2^(15-127)` (normal, or zero). The high lane's low three
/// bits that the shift moves into the low lane are those zero mantissa bits, and the low
/// lane's sign bit (0) moves to bit 12. One bf16 fma `y * 2^112 - 2^(bits-1)` is then exact.
fn int_via_f16(bits: u32, signed: bool, order: PackOrder) -> Option<Program> {
    let group = group_size(bits, order);
    let mut bld = Builder::new(group * bits as usize / 32);
    let f16s = int_magic_words(&mut bld, bits, signed, Half::F16, false, order)?;
    let outs = convert_f16_uints_to_bf16(&mut bld, f16s, bits, signed);
    Some(bld.finish(
        outs,
        format!(
            "{} -> BF16: f16 magic number (exact unsigned value), >> 3 reinterprets as bf16 * 2^-112, one bf16 fma.",
            int_name(bits, signed)
        ),
    ))
}

fn convert_f16_uints_to_bf16(
    bld: &mut Builder,
    f16s: Vec<Val>,
    bits: u32,
    signed: bool,
) -> Vec<Val> {
    let scale = Half::BF16.splat(2f64.powi(112));
    let off = if signed {
        Half::BF16.splat(-(2f64.powi(bits as i32 - 1)))
    } else {
        0x8000_8000 // -0.0: x + (-0) == x for every x, +0 included
    };
    f16s.into_iter()
        .map(|f| {
            let y = bld.shr(
                f,
                3,
                "f16 bits of a small integer >> 3 == bf16 bits of it * 2^-112",
            );
            bld.fma2(
                Half::BF16,
                y,
                Val::Imm(scale),
                Val::Imm(off),
                "y * 2^112 - bias: exact",
            )
        })
        .collect()
}

/// 8-bit integers: one `prmt` builds `[code, 0x64]` in each lane straight from the input word
/// and the magic byte (no mask needed: the code fills the f16 mantissa's low byte exactly),
/// so `x = 1024 + u` with `u` the unsigned code (sign bit flipped for i8 by one `lop3` per
/// four codes). Then f16: one fma `x - (1024 + bias)`; bf16: `x - 1024` in f16, `>> 3`, one
/// bf16 fma (see [`int_via_f16`]).
fn int8_prmt(signed: bool, ty: Half) -> Program {
    let mut bld = Builder::new(1);
    let mut w = bld.input(0);
    if signed {
        w = bld.lop3(
            w,
            Val::Imm(0x8080_8080),
            Val::Imm(0),
            |a, b, _| a ^ b,
            "flip sign bits: two's complement v -> v + 128",
        );
    }
    let mut f = Vec::new();
    for k in 0..2u32 {
        let sel = (2 * k) | (4 << 4) | ((2 * k + 1) << 8) | (4 << 12);
        let x = bld.prmt(
            w,
            Val::Imm(0x64),
            Val::Imm(sel),
            "lanes [code, 0x64] = 1024 + u",
        );
        f.push(x);
    }
    let outs = match ty {
        Half::F16 => {
            let bias = if signed { 128.0 } else { 0.0 };
            f.into_iter()
                .map(|x| {
                    bld.fma2(
                        Half::F16,
                        x,
                        Val::Imm(Half::F16.splat(1.0)),
                        Val::Imm(Half::F16.splat(-(1024.0 + bias))),
                        "x - (1024 + bias): exact",
                    )
                })
                .collect()
        }
        Half::BF16 => {
            let u: Vec<Val> = f
                .into_iter()
                .map(|x| {
                    bld.fma2(
                        Half::F16,
                        x,
                        Val::Imm(Half::F16.splat(1.0)),
                        Val::Imm(Half::F16.splat(-1024.0)),
                        "x - 1024: the unsigned code, exact",
                    )
                })
                .collect();
            convert_f16_uints_to_bf16(&mut bld, u, 8, signed)
        }
    };
    bld.finish(
        outs,
        format!(
            "{} -> {ty:?}: prmt builds [code, 0x64] lanes (1024 + code), packed fma.",
            int_name(8, signed)
        ),
    )
}

/// Float parameters of a source.
#[derive(Clone, Copy, Debug)]
struct FloatSrc {
    e: u32,
    m: u32,
    special: Special,
}

impl FloatSrc {
    fn bits(&self) -> u32 {
        1 + self.e + self.m
    }
    fn bias(&self) -> i32 {
        (1 << (self.e - 1)) - 1
    }
    fn name(&self) -> String {
        match self.special {
            Special::E4M3 => "f8e4m3".into(),
            Special::E5M2 => "f8e5m2".into(),
            Special::None => format!("f{}e{}m{}", self.bits(), self.e, self.m),
        }
    }
    /// Value of the nonnegative code `em` (no NaN/inf handling).
    fn magnitude(&self, em: u32) -> f64 {
        let (e, m) = (em >> self.m, em & ((1 << self.m) - 1));
        let frac = m as f64 / 2f64.powi(self.m as i32);
        if e == 0 {
            2f64.powi(1 - self.bias()) * frac
        } else {
            2f64.powi(e as i32 - self.bias()) * (1.0 + frac)
        }
    }
}

/// Layout of a float code placed in a lane: exponent and mantissa bits at `[t, sp)` directly
/// below the target's exponent/mantissa boundary, so that `t = M_t - m` and the code's exponent
/// field lines up with the low bits of the target's exponent field; `sp = M_t + e`.
struct FloatPlace {
    t: u32,
    sp: u32,
}

fn float_place(f: &FloatSrc, ty: Half) -> FloatPlace {
    FloatPlace {
        t: ty.man_bits() - f.m,
        sp: ty.man_bits() + f.e,
    }
}

/// NaN (e4m3) and inf/NaN (e5m2) codes, on a lane word `x` that holds the code's exponent and
/// mantissa bits at `[t, sp)` and zeros at `[sp, 15)` (bit 15 may hold the sign).
///
/// Such a code has all its exponent bits set (e5m2) or all its bits set (e4m3). Adding one unit
/// at the lowest of those bits carries into bit `sp` exactly for these codes (no lane overflows:
/// bit `sp < 15` was zero). For those lanes the missing target exponent bits `[sp, sp + k)`
/// (`k = E_t - e`) are then set: `x | (n & bit)` when `k == 1`, else `x + (n & bit) * (2^k - 1)`
/// (one `mad`; the bits were zero, so the add is an OR). The lane then has an all-ones exponent:
/// inf when the mantissa is zero (e5m2 only), NaN otherwise (e4m3's NaN has mantissa 111).
/// The later rebias fma keeps inf as inf and NaN as NaN. No branch, no select.
fn fix_special(bld: &mut Builder, x: Val, f: &FloatSrc, ty: Half, pl: &FloatPlace) -> Val {
    let k = ty.exp_bits() - f.e;
    let unit = match f.special {
        Special::None => return x,
        _ if k == 0 => return x, // same exponent width and bias: inf/NaN map by themselves
        Special::E4M3 => pl.t,
        Special::E5M2 => pl.t + f.m,
    };
    let n = bld.add(
        x,
        Val::Imm(lanes(1 << unit)),
        "carry into the bit above the code iff it is a NaN/inf code",
    );
    let flag = lanes(1 << pl.sp);
    if k == 1 {
        bld.lop3(
            x,
            n,
            Val::Imm(flag),
            |a, b, c| a | (b & c),
            "set the missing exponent bit: all-ones exponent",
        )
    } else {
        let fl = bld.lop3(
            n,
            Val::Imm(flag),
            Val::Imm(0),
            |a, b, _| a & b,
            "NaN/inf flag",
        );
        bld.mad(
            fl,
            Val::Imm((1 << k) - 1),
            x,
            "spread the flag over the missing exponent bits",
        )
    }
}

/// The rebias multiply: a lane with the code's exponent field `e` in the low bits of the
/// target's exponent field reads as `2^(e - B_t) * 1.m` (normal) or `2^(1 - B_t) * 0.m` (e = 0,
/// a target subnormal), while the code means `2^(e - B) * 1.m` or `2^(1 - B) * 0.m`: in both
/// cases exactly `2^(B_t - B)` times more. One packed fma `x * 2^(B_t - B) + (-0)` multiplies
/// by that power of two; the exact product is the source value, which the target represents,
/// so nothing rounds, subnormal codes included. (Adding -0 keeps every value, +0 and -0 too.)
fn rebias(bld: &mut Builder, x: Val, f: &FloatSrc, ty: Half) -> Val {
    let k = ty.bias() - f.bias();
    if k == 0 {
        return x;
    }
    bld.fma2(
        ty,
        x,
        Val::Imm(ty.splat(2f64.powi(k))),
        Val::Imm(0x8000_8000),
        "x * 2^(bias_t - bias): exact rebias, subnormals too",
    )
}

/// Any float code, by placement: the code lands at offset `t` (exponent and mantissa where
/// they belong, the sign at bit `sp`), one `lop3` keeps exponent and mantissa, one shift and
/// one `lop3` move the sign to bit 15, then NaN/inf fix-up and the rebias fma.
fn float_generic(f: FloatSrc, ty: Half, order: PackOrder) -> Option<Program> {
    let bits = f.bits();
    let group = group_size(bits, order);
    let n_in = group * bits as usize / 32;
    let pl = float_place(&f, ty);
    let plans = plan_placement(
        bits as i32,
        n_in,
        &pair_positions(bits, group, order),
        Rule::Exact(pl.t as i32),
        order != PackOrder::Natural,
    )?;
    let mut bld = Builder::new(n_in);
    let mut outs = Vec::new();
    for plan in &plans {
        let (p, offs) = realize(&mut bld, plan, "codes");
        debug_assert_eq!(offs, [pl.t as i32; 2]);
        let x = if pl.sp == 15 {
            let mask = lanes(((1u32 << bits) - 1) << pl.t);
            bld.lop3(
                p,
                Val::Imm(mask),
                Val::Imm(0),
                |a, b, _| a & b,
                "code in place",
            )
        } else {
            let mask = lanes(((1u32 << (f.e + f.m)) - 1) << pl.t);
            let x = bld.lop3(
                p,
                Val::Imm(mask),
                Val::Imm(0),
                |a, b, _| a & b,
                "exponent and mantissa in place",
            );
            let x = fix_special(&mut bld, x, &f, ty, &pl);
            let s = bld.shl(p, 15 - pl.sp, "sign bit to bit 15 of each lane");
            bld.lop3(
                x,
                s,
                Val::Imm(0x8000_8000),
                |a, b, c| a | (b & c),
                "add the sign",
            )
        };
        outs.push(rebias(&mut bld, x, &f, ty));
    }
    Some(bld.finish(
        outs,
        format!(
            "{} -> {ty:?}: place exponent|mantissa under the target's, move the sign, rebias with one packed fma (x * 2^{}).",
            f.name(),
            ty.bias() - f.bias()
        ),
    ))
}

/// 8-bit floats, split into bytes once per input word: every lane is `[LO, HI]` where
/// `HI = sign | em >> (8 - t)` and `LO = (em << t) & 0xFF`, computed for the four codes of a
/// word at once (shift, `lop3` mask, `lop3` sign; shift, `lop3` mask); one `prmt` per output
/// word then pairs the bytes into clean lanes (sign at 15, exponent|mantissa at `[t, sp)`,
/// zeros elsewhere), ready for the NaN fix-up and the rebias fma.
fn float8_bytesplit(f: FloatSrc, ty: Half) -> Option<Program> {
    let pl = float_place(&f, ty);
    if f.bits() != 8 || pl.t == 0 || pl.t >= 8 {
        return None;
    }
    let t = pl.t;
    let mut bld = Builder::new(1);
    let w = bld.input(0);
    let hi_em = if t > 1 {
        let hs = bld.shr(w, 8 - t, "high part of exponent|mantissa");
        bld.lop3(
            hs,
            Val::Imm(bytes((1 << (t - 1)) - 1)),
            Val::Imm(0),
            |a, b, _| a & b,
            "per byte",
        )
    } else {
        Val::Imm(0)
    };
    let hi = bld.lop3(
        hi_em,
        w,
        Val::Imm(0x8080_8080),
        |a, b, c| a | (b & c),
        "high bytes: sign | high part",
    );
    let ls = bld.shl(w, t, "low part of the mantissa");
    let lo = bld.lop3(
        ls,
        Val::Imm(bytes((0xFF << t) & 0xFF)),
        Val::Imm(0),
        |a, b, _| a & b,
        "low bytes",
    );
    let mut outs = Vec::new();
    for k in 0..2u32 {
        let (j0, j1) = (2 * k, 2 * k + 1);
        let sel = j0 | ((4 + j0) << 4) | (j1 << 8) | ((4 + j1) << 12);
        let x = bld.prmt(lo, hi, Val::Imm(sel), "lanes [LO, HI]");
        let x = fix_special(&mut bld, x, &f, ty, &pl);
        outs.push(rebias(&mut bld, x, &f, ty));
    }
    Some(bld.finish(
        outs,
        format!(
            "{} -> {ty:?}: split codes into high/low bytes per word, prmt pairs them into lanes, rebias with one packed fma (x * 2^{}).",
            f.name(),
            ty.bias() - f.bias()
        ),
    ))
}

/// f8e5m2 is the high byte of the f16 with the same value (same exponent width and bias; inf and
/// NaN included): one `prmt` per output word, `[0, code]` in each lane.
fn e5m2_to_f16() -> Program {
    let mut bld = Builder::new(1);
    let w = bld.input(0);
    let mut outs = Vec::new();
    for k in 0..2u32 {
        let sel = 4 | ((2 * k) << 4) | (4 << 8) | ((2 * k + 1) << 12);
        outs.push(bld.prmt(
            w,
            Val::Imm(0),
            Val::Imm(sel),
            "lanes [0, code]: the f16 bits",
        ));
    }
    bld.finish(
        outs,
        "f8e5m2 -> F16: each code is the high byte of its f16; one prmt per output word.".into(),
    )
}

/// 4-bit floats (`e + m == 3`): a lookup table in two immediates, read by `prmt`.
///
/// `prmt` with a register selector looks up four bytes at once: each selector nibble indexes
/// the eight bytes of its two operands. With the eight possible magnitudes' 16-bit patterns
/// split into byte tables (f16 needs only the high bytes: these values have at most two
/// mantissa bits, so the low byte is zero), the masked codes `0x7777_7777 & w` (low 16 bits =
/// four selectors, one per code) look up four high bytes per `prmt`. The signs come from
/// `prmt`'s sign-replicate mode: selecting byte `k` of `w` (odd codes' sign is its bit 7) or of
/// `w << 4` (even codes') with the top selector bit set gives 0xFF or 0x00, and one `lop3` ORs
/// bit 7 of that into the looked-up bytes. A last `prmt` per output word interleaves the bytes
/// into lanes (the zero low byte is table entry 0: the magnitude 0).
fn f4_table(f: FloatSrc, ty: Half) -> Option<Program> {
    if f.bits() != 4 || f.special != Special::None {
        return None;
    }
    let pats: Vec<u16> = (0..8).map(|em| ty.bits_exact(f.magnitude(em))).collect();
    let table = |bytes: &dyn Fn(u16) -> u32, half: usize| -> u32 {
        (0..4).map(|i| bytes(pats[4 * half + i]) << (8 * i)).sum()
    };
    let hb = |p: u16| (p >> 8) as u32;
    let lb = |p: u16| (p & 0xFF) as u32;
    if ty == Half::F16 && pats.iter().any(|p| p & 0xFF != 0) {
        return None;
    }
    assert_eq!(pats[0], 0);
    let (tha, thb) = (table(&hb, 0), table(&hb, 1));
    let mut bld = Builder::new(1);
    let w = bld.input(0);
    let q = bld.lop3(
        w,
        Val::Imm(0x7777_7777),
        Val::Imm(0),
        |a, b, _| a & b,
        "exponent|mantissa of each code: table selectors",
    );
    let qh = bld.shr(q, 16, "selectors of codes 4..8");
    let w4 = bld.shl(w, 4, "even codes' signs to bit 7 of each byte");
    let mut his = Vec::new();
    let mut los = Vec::new();
    for (h, sel) in [q, qh].into_iter().enumerate() {
        let d = bld.prmt(
            Val::Imm(tha),
            Val::Imm(thb),
            sel,
            "table lookup: high bytes",
        );
        let sgn_sel = if h == 0 { 0xD9C8 } else { 0xFBEA };
        let s = bld.prmt(w4, w, Val::Imm(sgn_sel), "signs, replicated per byte");
        his.push(bld.lop3(
            d,
            s,
            Val::Imm(0x8080_8080),
            |a, b, c| a | (b & c),
            "signed high bytes",
        ));
        if ty == Half::BF16 {
            let (tla, tlb) = (table(&lb, 0), table(&lb, 1));
            los.push(bld.prmt(Val::Imm(tla), Val::Imm(tlb), sel, "table lookup: low bytes"));
        }
    }
    let mut outs = Vec::new();
    for k in 0..4u32 {
        let h = (k / 2) as usize;
        let j = 2 * (k % 2);
        let o = match ty {
            Half::F16 => {
                let sel = 4 | (j << 4) | (4 << 8) | ((j + 1) << 12);
                bld.prmt(his[h], Val::Imm(tha), Val::Imm(sel), "lanes [0, high byte]")
            }
            Half::BF16 => {
                let sel = j | ((4 + j) << 4) | ((j + 1) << 8) | ((5 + j) << 12);
                bld.prmt(los[h], his[h], Val::Imm(sel), "lanes [low byte, high byte]")
            }
        };
        outs.push(o);
    }
    Some(bld.finish(
        outs,
        format!(
            "{} -> {ty:?}: prmt table lookup of the 8 magnitudes, prmt sign replication, prmt interleave.",
            f.name()
        ),
    ))
}

/// The best vectorized program for `src -> ty` with the codes packed in `order`, or `None`
/// when some value of `src` is not exactly representable in `ty`. The specialised byte and
/// table algorithms assume the natural order; the placement-based ones take any.
pub(crate) fn build(src: SrcKind, ty: Half, order: PackOrder) -> Option<Program> {
    let natural = order == PackOrder::Natural;
    let mut cands: Vec<Program> = Vec::new();
    match src {
        SrcKind::UInt(bits) | SrcKind::Int(bits) => {
            let signed = matches!(src, SrcKind::Int(_));
            if bits == 8 && natural {
                cands.push(int8_prmt(signed, ty));
            }
            if bits <= ty.man_bits() {
                cands.extend(int_magic(bits, signed, ty, order));
            }
            if ty == Half::BF16 {
                cands.extend(int_via_f16(bits, signed, order));
            }
        }
        SrcKind::Float { e, m, special } => {
            let f = FloatSrc { e, m, special };
            // Exact in the target iff the exponent field fits below the target's all-ones
            // exponent (or maps onto it, for e5m2's inf/NaN into f16) and the mantissa fits.
            let fits = m <= ty.man_bits()
                && (e < ty.exp_bits() || (special == Special::E5M2 && e == ty.exp_bits()));
            if !fits {
                return None;
            }
            if natural {
                if special == Special::E5M2 && ty == Half::F16 {
                    cands.push(e5m2_to_f16());
                }
                cands.extend(f4_table(f, ty));
                cands.extend(float8_bytesplit(f, ty));
            }
            if f.special != Special::E5M2 || ty != Half::F16 {
                cands.extend(float_generic(f, ty, order));
            }
        }
    }
    // Fewest ops wins; on a tie the earlier (more specialised) one. Every pair has at least
    // one candidate (the generic placement with views {0, bits} always succeeds; tests check it).
    let mut best: Option<Program> = None;
    for c in cands {
        if best.as_ref().is_none_or(|b| c.op_count() < b.op_count()) {
            best = Some(c);
        }
    }
    best
}

/// Every op of a program, for tests that inspect the instruction mix.
#[cfg(test)]
pub(crate) fn ops_of(p: &Program) -> Vec<super::ops::Op> {
    p.insts.iter().map(|i| i.op).collect()
}
