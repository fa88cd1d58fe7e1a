//! Value ranges: for every integer variable of a program, an interval that holds each of its
//! values (every element of a register tensor, every thread, every execution).
//!
//! The analysis is flow-insensitive: a variable's interval is the union of what each of its
//! definitions can produce, iterated to a fixed point over the whole body (loop-carried values
//! such as `acc = acc + 1` grow for a few rounds and are then widened to their type's range).
//! It is sound for the generated code as well as for the interpreter: wherever the exact result
//! of an operation could leave its type (an `i32` add that wraps on the GPU, a shift that drops
//! bits, a conversion of a float), the result is the type's whole range. Loads, gathers, views
//! and other reinterpretations give their dtype's range, which is what makes a byte of a code
//! word (`cast::<i32>(view::<u8>(w))`) `0..=255`.
//!
//! The code generator uses it to drop the bounds guards of `gather_rows` and its relatives
//! where every index is provably in range (`codegen::emitters::addressing`), so a kernel that
//! indexes a 256-row table by a byte pays no compare and select per look-up. Kernels help it
//! with masks rather than remainders (`x & 15` is `0..=15` whatever `x`; `x % 16` of a possibly
//! negative `x` is `-15..=15`).

use super::{
    ElementOp, Expr, Instruction, Operand, Program, ScalarType, Stmt, StmtKind, UnaryOp, VarId,
    VarType,
};
use crate::DType;

/// A closed interval of integers, `lo <= hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub lo: i64,
    pub hi: i64,
}

impl Range {
    pub const fn new(lo: i64, hi: i64) -> Range {
        Range { lo, hi }
    }
    const fn point(v: i64) -> Range {
        Range { lo: v, hi: v }
    }
    const ALL: Range = Range::new(i64::MIN, i64::MAX);
    const I32: Range = Range::new(i32::MIN as i64, i32::MAX as i64);
    const BOOL: Range = Range::new(0, 1);

    /// Whether every value lies in `0..n`.
    pub fn within(&self, n: i64) -> bool {
        self.lo >= 0 && self.hi < n
    }
    fn contains(&self, other: Range) -> bool {
        self.lo <= other.lo && other.hi <= self.hi
    }
    fn join(self, other: Range) -> Range {
        Range::new(self.lo.min(other.lo), self.hi.max(other.hi))
    }
    fn nonneg(&self) -> bool {
        self.lo >= 0
    }
    /// `self` if it lies in `bound` (the values a type holds), else all of `bound`: a result
    /// that could leave its type wraps or saturates to anything in it.
    fn fit(self, bound: Range) -> Range {
        if bound.contains(self) {
            self
        } else {
            bound
        }
    }
}

/// The values an integer dtype holds; `None` for floats.
pub(crate) fn dtype_range(dtype: DType) -> Option<Range> {
    match dtype {
        DType::UInt(b) => Some(Range::new(0, (1i64 << b) - 1)),
        DType::Int(b) => Some(Range::new(-(1i64 << (b - 1)), (1i64 << (b - 1)) - 1)),
        _ => None,
    }
}

fn scalar_range(t: ScalarType) -> Option<Range> {
    match t {
        ScalarType::I32 => Some(Range::I32),
        ScalarType::I64 => Some(Range::ALL),
        ScalarType::Bool => Some(Range::BOOL),
        ScalarType::F32 => None,
    }
}

/// The type bound of a variable: its scalar type's or its register dtype's range; `None` for
/// anything that holds no integers.
fn var_bound(p: &Program, v: VarId) -> Option<Range> {
    match p.ty(v) {
        VarType::Scalar(t) => scalar_range(*t),
        VarType::Register(r) => dtype_range(r.dtype),
        _ => None,
    }
}

/// The result of [`value_ranges`].
#[derive(Clone, Debug, Default)]
pub struct ValueRanges {
    ranges: Vec<Option<Range>>,
}

impl ValueRanges {
    /// The interval of integer variable `v`; `None` for non-integer variables and for
    /// variables the program never defines.
    pub fn of(&self, v: VarId) -> Option<Range> {
        self.ranges.get(v.0 as usize).copied().flatten()
    }
}

/// Rounds of the fixed point after which a variable that still grows gets its type's range.
const WIDEN_AFTER: usize = 3;

/// The value ranges of every integer variable of `p` (see the module documentation).
pub fn value_ranges(p: &Program) -> ValueRanges {
    let mut a = Analysis {
        p,
        ranges: vec![None; p.vars.len()],
        changed: Vec::new(),
    };
    // Parameters hold anything of their type.
    for param in &p.params {
        a.ranges[param.var.0 as usize] = var_bound(p, param.var);
    }
    let mut round = 0;
    loop {
        a.changed.clear();
        a.block(&p.body);
        if a.changed.is_empty() {
            break;
        }
        round += 1;
        if round >= WIDEN_AFTER {
            for v in std::mem::take(&mut a.changed) {
                a.ranges[v.0 as usize] = var_bound(p, v);
            }
        }
    }
    ValueRanges { ranges: a.ranges }
}

struct Analysis<'a> {
    p: &'a Program,
    /// `None`: not defined yet (in this round's order), or not an integer.
    ranges: Vec<Option<Range>>,
    /// Variables whose interval grew this round.
    changed: Vec<VarId>,
}

/// An operand not defined yet in this round's order (a loop-carried value read before its
/// definition): the result waits for a later round.
struct Pending;

/// What an input says about a result: `Ok(None)` anything of its type, `Ok(Some(r))` within `r`.
type Known = Result<Option<Range>, Pending>;

impl Analysis<'_> {
    /// Join `r` into `v`'s interval (`None`: its type's range; a value outside it wrapped).
    fn define(&mut self, v: VarId, r: Option<Range>) {
        let Some(bound) = var_bound(self.p, v) else {
            return;
        };
        let r = r.map_or(bound, |r| r.fit(bound));
        let slot = &mut self.ranges[v.0 as usize];
        let new = match *slot {
            Some(old) => old.join(r),
            None => r,
        };
        if *slot != Some(new) {
            *slot = Some(new);
            if !self.changed.contains(&v) {
                self.changed.push(v);
            }
        }
    }

    /// Define `v` from `r` unless an input is pending.
    fn define_known(&mut self, v: VarId, r: Known) {
        if let Ok(r) = r {
            self.define(v, r);
        }
    }

    /// The interval of variable `v` as an input: `Ok(None)` when it holds no integers.
    fn input(&self, v: VarId) -> Known {
        if var_bound(self.p, v).is_none() {
            return Ok(None);
        }
        match self.ranges.get(v.0 as usize).copied().flatten() {
            Some(r) => Ok(Some(r)),
            None => Err(Pending),
        }
    }

    fn block(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Let { var, value } | StmtKind::Assign { var, value } => {
                let r = self.expr(value);
                self.define_known(*var, r);
            }
            StmtKind::If {
                then_body,
                else_body,
                ..
            } => {
                self.block(then_body);
                self.block(else_body);
            }
            StmtKind::For {
                var,
                start,
                end,
                body,
                ..
            } => {
                // `start <= var < end` whenever the body runs.
                if let (Ok(s), Ok(e)) = (self.expr(start), self.expr(end)) {
                    let lo = s.map_or(i64::MIN, |s| s.lo);
                    let hi = e.map_or(i64::MAX, |e| e.hi.saturating_sub(1)).max(lo);
                    self.define(*var, Some(Range::new(lo, hi)));
                }
                self.block(body);
            }
            StmtKind::While { body, .. } => self.block(body),
            StmtKind::Specialize { roles } => {
                for r in roles {
                    self.block(&r.body);
                }
            }
            StmtKind::Instr(i) => self.instr(i),
        }
    }

    /// The interval of an integer scalar expression. An intermediate result that leaves `i32`
    /// becomes unknown (`i32` arithmetic wraps on the GPU; `i64` values that large are merely
    /// not tracked).
    fn expr(&self, e: &Expr) -> Known {
        let both = |x: &Expr, y: &Expr| -> Result<Option<(Range, Range)>, Pending> {
            Ok(self.expr(x)?.zip(self.expr(y)?))
        };
        let r = match e {
            Expr::Int(v) => Some(Range::point(*v as i64)),
            Expr::I64(v) => Some(Range::point(*v)),
            Expr::Bool(_) => Some(Range::BOOL),
            Expr::F32(_) => None,
            Expr::Var(v) => self.input(*v)?,
            Expr::Unary(op, x) => {
                let x = self.expr(x)?;
                match op {
                    UnaryOp::Neg => x.and_then(neg),
                    UnaryOp::Not => Some(Range::BOOL),
                    UnaryOp::ToI32 => Some(x.map_or(Range::I32, |r| r.fit(Range::I32))),
                    UnaryOp::ToI64 | UnaryOp::ToF32 => x,
                }
            }
            Expr::Binary(op, _, _) if op.yields_bool() => Some(Range::BOOL),
            // As on i32 elements (shifts by 0..32 tracked); the result is checked below.
            Expr::Binary(op, x, y) => both(x, y)?
                .zip(op.element_op())
                .and_then(|((a, b), eop)| element(eop, a, b, DType::Int(32))),
            Expr::Select(_, x, y) => both(x, y)?.map(|(a, b)| a.join(b)),
        };
        Ok(r.filter(|r| Range::I32.contains(*r)))
    }

    /// The interval of the right operand of an elementwise instruction, as values of `dtype`.
    fn operand(&self, o: &Operand, dtype: DType) -> Known {
        let Some(bound) = dtype_range(dtype) else {
            return Ok(None);
        };
        let r = match o {
            Operand::Tensor(v) => self.input(*v)?,
            Operand::Scalar(e) => self.expr(e)?,
            Operand::Imm(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => {
                Some(Range::point(*x as i64))
            }
            Operand::Imm(_) => None,
        };
        Ok(Some(r.map_or(bound, |r| r.fit(bound))))
    }

    fn instr(&mut self, i: &Instruction) {
        let p = self.p;
        let dtype_of = |v: VarId| p.ty(v).as_register().map(|r| r.dtype);
        match i {
            Instruction::BlockIndices { outs } => {
                for o in outs {
                    self.define(*o, Some(Range::new(0, i32::MAX as i64)));
                }
            }
            Instruction::AllocateRegister { out, init, .. } => {
                let r = init
                    .filter(|v| v.is_finite())
                    .map(|v| Range::new(v.floor() as i64, v.ceil() as i64));
                self.define(*out, r);
            }
            Instruction::Arange {
                out,
                layout,
                dim,
                offset,
            } => {
                let extent = layout.shape().get(*dim).copied().unwrap_or(0) as i64;
                let r = self
                    .expr(offset)
                    .map(|o| o.and_then(|o| add(o, Range::new(0, (extent - 1).max(0)))));
                self.define_known(*out, r);
            }
            Instruction::Binary { out, op, lhs, rhs } => {
                let r = match dtype_of(*lhs) {
                    Some(dt) => (|| {
                        let (a, b) = (self.input(*lhs)?, self.operand(rhs, dt)?);
                        Ok(a.zip(b).and_then(|(a, b)| element(*op, a, b, dt)))
                    })(),
                    None => Ok(None),
                };
                self.define_known(*out, r);
            }
            Instruction::Select { out, a, b, .. } => {
                let r = match dtype_of(*a) {
                    Some(dt) => (|| {
                        let (x, y) = (self.input(*a)?, self.operand(b, dt)?);
                        Ok(x.zip(y).map(|(x, y)| x.join(y)))
                    })(),
                    None => Ok(None),
                };
                self.define_known(*out, r);
            }
            Instruction::Neg { out, x } => {
                let r = self.input(*x).map(|x| x.and_then(neg));
                self.define_known(*out, r);
            }
            Instruction::Cast {
                out,
                x,
                dtype,
                biased: false,
                ..
            } => {
                // Integer to integer saturates, so the operand's interval clamps into the
                // target's; a float operand gives the target's whole range.
                let r = self.input(*x).map(|a| {
                    let t = dtype_range(*dtype)?;
                    let a = a?;
                    Some(Range::new(a.lo.clamp(t.lo, t.hi), a.hi.clamp(t.lo, t.hi)))
                });
                self.define_known(*out, r);
            }
            Instruction::Reduce {
                out,
                x,
                op: super::ReduceOp::Max | super::ReduceOp::Min,
                ..
            }
            | Instruction::Item { out, x } => {
                let r = self.input(*x);
                self.define_known(*out, r);
            }
            // Everything else defines values anywhere in its type (loads, views, gathers,
            // products, sums, biased casts...).
            other => {
                for o in other.outputs() {
                    self.define(o, None);
                }
            }
        }
    }
}

fn checked(lo: Option<i64>, hi: Option<i64>) -> Option<Range> {
    Some(Range::new(lo?, hi?))
}

fn neg(a: Range) -> Option<Range> {
    checked(a.hi.checked_neg(), a.lo.checked_neg())
}

fn add(a: Range, b: Range) -> Option<Range> {
    checked(a.lo.checked_add(b.lo), a.hi.checked_add(b.hi))
}

fn sub(a: Range, b: Range) -> Option<Range> {
    checked(a.lo.checked_sub(b.hi), a.hi.checked_sub(b.lo))
}

/// The smallest and largest of `f` over the corners of `a x b`.
fn corners(a: Range, b: Range, f: impl Fn(i64, i64) -> Option<i64>) -> Option<Range> {
    let c = [
        f(a.lo, b.lo)?,
        f(a.lo, b.hi)?,
        f(a.hi, b.lo)?,
        f(a.hi, b.hi)?,
    ];
    Some(Range::new(*c.iter().min()?, *c.iter().max()?))
}

fn mul(a: Range, b: Range) -> Option<Range> {
    corners(a, b, i64::checked_mul)
}

/// Truncating division by a divisor of one sign: monotone in each operand, so the corners
/// bound it.
fn div(a: Range, b: Range) -> Option<Range> {
    if b.lo <= 0 && b.hi >= 0 {
        return None;
    }
    corners(a, b, i64::checked_div)
}

/// Remainder with the sign of the dividend, bounded by the divisor's magnitude.
fn rem(a: Range, b: Range) -> Option<Range> {
    if b.lo <= 0 && b.hi >= 0 {
        return None;
    }
    let m = b.lo.checked_abs()?.max(b.hi.checked_abs()?) - 1;
    let lo = if a.nonneg() { 0 } else { (-m).max(a.lo) };
    let hi = if a.hi <= 0 { 0 } else { m.min(a.hi) };
    Some(Range::new(lo, hi))
}

/// `op` on elements of `dtype` with operands in `a` and `b`; `None` where not tracked.
fn element(op: ElementOp, a: Range, b: Range, dtype: DType) -> Option<Range> {
    let bits = dtype.bits() as i64;
    match op {
        ElementOp::Add => add(a, b),
        ElementOp::Sub => sub(a, b),
        ElementOp::Mul => mul(a, b),
        ElementOp::Div => div(a, b),
        ElementOp::Mod => rem(a, b),
        ElementOp::Min => Some(Range::new(a.lo.min(b.lo), a.hi.min(b.hi))),
        ElementOp::Max => Some(Range::new(a.lo.max(b.lo), a.hi.max(b.hi))),
        // A non-negative mask bounds the result whatever the other operand's bits.
        ElementOp::And => match (a.nonneg(), b.nonneg()) {
            (true, true) => Some(Range::new(0, a.hi.min(b.hi))),
            (true, false) => Some(Range::new(0, a.hi)),
            (false, true) => Some(Range::new(0, b.hi)),
            (false, false) => None,
        },
        ElementOp::Or | ElementOp::Xor if a.nonneg() && b.nonneg() => {
            // At most the bits of the larger operand, all set.
            let top = a.hi.max(b.hi) as u64;
            let ones = u64::MAX.checked_shr(top.leading_zeros()).unwrap_or(0);
            Some(Range::new(0, ones as i64))
        }
        // Shifts by a known amount in `0..bits`; the caller's fit catches dropped bits.
        ElementOp::Shl if b.lo >= 0 && b.hi < bits.min(62) && a.nonneg() => {
            checked(Some(a.lo << b.lo), a.hi.checked_mul(1i64 << b.hi))
        }
        ElementOp::Shr if b.lo >= 0 && b.hi < bits => {
            // Arithmetic for signed types, logical for unsigned ones (whose values are
            // non-negative): either way `x >> s` is `floor(x / 2^s)`, monotone in `x`.
            let (s_lo, s_hi) = (b.lo as u32, b.hi as u32);
            let lo = (a.lo >> s_lo).min(a.lo >> s_hi);
            let hi = (a.hi >> s_lo).max(a.hi >> s_hi);
            Some(Range::new(lo, hi))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Expr, ProgramBuilder, ScalarType};
    use crate::layout::Layout;

    fn layout(text: &str) -> Layout {
        crate::layout::parse(text).unwrap()
    }

    #[test]
    fn a_byte_times_sixteen_plus_a_mask_stays_in_the_table() {
        let mut b = ProgramBuilder::new("t", 32);
        let ptr = b.param_ptr("w", DType::UInt(32), false);
        let g = b.view_global("g", ptr, DType::UInt(32), vec![Expr::Int(32)]);
        let words = b.load_global("words", g, layout("spatial(32)"), vec![Expr::Int(0)]);
        let bytes = b.view(
            "bytes",
            words,
            DType::UInt(8),
            layout("spatial(32).local(4)"),
        );
        let codes = b.cast("codes", bytes, DType::Int(32));
        let scaled = b.binary("scaled", ElementOp::Shl, codes, Operand::Imm(4.0));
        let lane = b.arange("lane", layout("spatial(32).local(4)"), 0, Expr::Int(0));
        let copy = b.binary("copy", ElementOp::And, lane, Operand::Imm(15.0));
        let at = b.binary("at", ElementOp::Add, scaled, Operand::Tensor(copy));
        let p = b.finish();
        let r = value_ranges(&p);
        assert_eq!(r.of(codes), Some(Range::new(0, 255)));
        assert_eq!(r.of(copy), Some(Range::new(0, 15)));
        assert_eq!(r.of(at), Some(Range::new(0, 255 * 16 + 15)));
        assert!(r.of(at).unwrap().within(4096));
        assert!(!r.of(at).unwrap().within(4095));
        // A view to i32 or a load gives the whole type.
        assert_eq!(r.of(words), dtype_range(DType::UInt(32)));
    }

    #[test]
    fn loop_carried_values_widen_and_remainders_keep_their_sign() {
        let mut b = ProgramBuilder::new("t", 32);
        let k = b.param_i32("k");
        let l = layout("spatial(32)");
        let acc = b.allocate_register("acc", DType::Int(32), l.clone(), Some(0.0));
        let mut rem_of_k = None;
        let mut parity = None;
        let (mut bit, mut half) = (None, None);
        b.for_range("i", Expr::Int(0), Expr::Var(k), |b, i| {
            b.binary(acc, ElementOp::Add, acc, Operand::Imm(1.0));
            rem_of_k = Some(b.let_("r", ScalarType::I32, Expr::Var(i) % 2));
            parity = Some(b.let_("q", ScalarType::I32, Expr::Var(k) % 2));
            // A mask bounds a scalar whatever its sign; a shift divides.
            bit = Some(b.let_("b", ScalarType::I32, Expr::Var(k) & 1));
            half = Some(b.let_("h", ScalarType::I32, Expr::Var(k) >> 2));
        });
        let p = b.finish();
        let r = value_ranges(&p);
        assert_eq!(r.of(acc), dtype_range(DType::Int(32)));
        // The loop variable starts at 0, so `i % 2` is 0 or 1; `k` may be negative.
        assert_eq!(r.of(rem_of_k.unwrap()), Some(Range::new(0, 1)));
        assert_eq!(r.of(parity.unwrap()), Some(Range::new(-1, 1)));
        assert_eq!(r.of(bit.unwrap()), Some(Range::new(0, 1)));
        assert_eq!(
            r.of(half.unwrap()),
            Some(Range::new(-(1 << 29), (1 << 29) - 1))
        );
    }

    #[test]
    fn results_that_could_wrap_take_the_whole_type() {
        let mut b = ProgramBuilder::new("t", 32);
        let l = layout("spatial(32)");
        let x = b.arange("x", l.clone(), 0, Expr::Int(0));
        let big = b.binary("big", ElementOp::Mul, x, Operand::Imm(1.0e9));
        let narrow = b.cast("narrow", x, DType::UInt(4));
        let shifted = b.binary("shifted", ElementOp::Shl, narrow, Operand::Imm(2.0));
        let p = b.finish();
        let r = value_ranges(&p);
        assert_eq!(r.of(x), Some(Range::new(0, 31)));
        // 31e9 leaves i32: on the GPU it wraps.
        assert_eq!(r.of(big), dtype_range(DType::Int(32)));
        // The cast saturates at 15; `15 << 2` drops bits of a u4.
        assert_eq!(r.of(narrow), Some(Range::new(0, 15)));
        assert_eq!(r.of(shifted), Some(Range::new(0, 15)));
    }
}
