//! The one description of a vectorized cast: a straight-line list of 32-bit register operations.
//!
//! A [`Program`] is built once per `(src, dst)` pair (see `vector.rs`) and then either rendered to
//! CUDA C ([`Program::render`]) or interpreted on the host ([`Program::run`]). Because both come
//! from the same list, the host twin executes exactly the bit-level algorithm the GPU executes:
//! the same shifts, the same `prmt`/`lop3` semantics (implemented here from the PTX ISA), and the
//! same packed `fma.rn.{f16x2,bf16x2}` arithmetic (implemented here with exact rounding).
//!
//! Every op defines a fresh register (SSA). Registers `0..in_words` are the input words.

use std::collections::HashMap;
use std::fmt::Write;

/// An operand: a register or a 32-bit immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Val {
    Reg(u32),
    Imm(u32),
}

/// The packed 16-bit float format of an [`Op::Fma2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Half {
    F16,
    BF16,
}

impl Half {
    /// Exponent bits.
    pub(crate) fn exp_bits(self) -> u32 {
        match self {
            Half::F16 => 5,
            Half::BF16 => 8,
        }
    }
    /// Explicit mantissa bits.
    pub(crate) fn man_bits(self) -> u32 {
        match self {
            Half::F16 => 10,
            Half::BF16 => 7,
        }
    }
    pub(crate) fn bias(self) -> i32 {
        (1 << (self.exp_bits() - 1)) - 1
    }
    /// Bits of the exactly representable value `v` (panics when `v` is not representable: the
    /// constants of a cast program must be exact).
    pub(crate) fn bits_exact(self, v: f64) -> u16 {
        let bits = round_f64(v, 0.0, self.exp_bits(), self.man_bits());
        assert_eq!(self.value(bits), v, "constant {v} is not exact in {self:?}");
        bits
    }
    /// The value of bit pattern `bits`.
    pub(crate) fn value(self, bits: u16) -> f64 {
        match self {
            Half::F16 => half::f16::from_bits(bits).to_f64(),
            Half::BF16 => half::bf16::from_bits(bits).to_f64(),
        }
    }
    /// Both lanes hold the exact value `v`.
    pub(crate) fn splat(self, v: f64) -> u32 {
        let b = self.bits_exact(v) as u32;
        b | (b << 16)
    }
    /// Lane 0 (low half) holds `lo`, lane 1 holds `hi`.
    pub(crate) fn pair(self, lo: f64, hi: f64) -> u32 {
        self.bits_exact(lo) as u32 | ((self.bits_exact(hi) as u32) << 16)
    }
    fn ptx(self) -> &'static str {
        match self {
            Half::F16 => "f16x2",
            Half::BF16 => "bf16x2",
        }
    }
}

/// One 32-bit operation. Shift amounts are in `1..32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// `a << n`.
    Shl(Val, u32),
    /// `a >> n` (logical).
    Shr(Val, u32),
    /// `__funnelshift_r(lo, hi, n)`: the low 32 bits of `hi:lo >> n`.
    Funnel { lo: Val, hi: Val, n: u32 },
    /// `prmt.b32 d, a, b, sel` (default mode).
    Prmt { a: Val, b: Val, sel: Val },
    /// `lop3.b32 d, a, b, c, lut`.
    Lop3 { a: Val, b: Val, c: Val, lut: u8 },
    /// `a + b` (wrapping).
    Add(Val, Val),
    /// `a * b + c` (wrapping, low 32 bits).
    Mad(Val, Val, Val),
    /// `fma.rn.{f16x2,bf16x2} d, a, b, c`: per 16-bit lane, `a * b + c` rounded once.
    Fma2 { ty: Half, a: Val, b: Val, c: Val },
}

impl Op {
    fn operands(&self) -> Vec<Val> {
        match *self {
            Op::Shl(a, _) | Op::Shr(a, _) => vec![a],
            Op::Funnel { lo, hi, .. } => vec![lo, hi],
            Op::Prmt { a, b, sel } => vec![a, b, sel],
            Op::Lop3 { a, b, c, .. } => vec![a, b, c],
            Op::Add(a, b) => vec![a, b],
            Op::Mad(a, b, c) => vec![a, b, c],
            Op::Fma2 { a, b, c, .. } => vec![a, b, c],
        }
    }

    /// Executes the op on concrete operand values.
    pub(crate) fn eval(&self, get: impl Fn(Val) -> u32) -> u32 {
        match *self {
            Op::Shl(a, n) => get(a).checked_shl(n).unwrap_or(0),
            Op::Shr(a, n) => get(a).checked_shr(n).unwrap_or(0),
            Op::Funnel { lo, hi, n } => funnel_r(get(lo), get(hi), n),
            Op::Prmt { a, b, sel } => prmt(get(a), get(b), get(sel)),
            Op::Lop3 { a, b, c, lut } => lop3(get(a), get(b), get(c), lut),
            Op::Add(a, b) => get(a).wrapping_add(get(b)),
            Op::Mad(a, b, c) => get(a).wrapping_mul(get(b)).wrapping_add(get(c)),
            Op::Fma2 { ty, a, b, c } => fma2(ty, get(a), get(b), get(c)),
        }
    }
}

/// `prmt.b32 d, a, b, c` in the default mode (PTX ISA, "prmt"): the eight bytes `{b, a}` are
/// numbered 0..3 (bytes of `a`, least significant first) and 4..7 (bytes of `b`). Byte `n` of the
/// result is chosen by nibble `n` of `c` (only the low 16 bits of `c` are read): its low three bits
/// index the source byte; when its top bit is set, the result byte is the sign of that source
/// byte (its bit 7) replicated into all eight bits.
pub(crate) fn prmt(a: u32, b: u32, c: u32) -> u32 {
    let src = (a as u64) | ((b as u64) << 32);
    let mut d = 0u32;
    for n in 0..4 {
        let nib = (c >> (4 * n)) & 0xF;
        let byte = ((src >> (8 * (nib & 7))) & 0xFF) as u32;
        let byte = if nib & 8 != 0 {
            if byte & 0x80 != 0 {
                0xFF
            } else {
                0
            }
        } else {
            byte
        };
        d |= byte << (8 * n);
    }
    d
}

/// `lop3.b32 d, a, b, c, lut` (PTX ISA, "lop3"): every result bit is `lut` indexed by the
/// corresponding bits of the operands as `a*4 + b*2 + c`. This is the convention in which the
/// table of a function `F` is `F(0xF0, 0xCC, 0xAA)`.
pub(crate) fn lop3(a: u32, b: u32, c: u32, lut: u8) -> u32 {
    let mut d = 0u32;
    for i in 0..32 {
        let idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1);
        d |= (((lut >> idx) & 1) as u32) << i;
    }
    d
}

/// The `lop3` immediate of a boolean function of three bitwise operands.
pub(crate) fn lut(f: impl Fn(u8, u8, u8) -> u8) -> u8 {
    f(0xF0, 0xCC, 0xAA)
}

/// `__funnelshift_r(lo, hi, n)` / `shf.r.wrap.b32`: the low 32 bits of `(hi:lo) >> (n & 31)`.
pub(crate) fn funnel_r(lo: u32, hi: u32, n: u32) -> u32 {
    ((((hi as u64) << 32) | lo as u64) >> (n & 31)) as u32
}

/// The canonical NaN the packed fma produces.
const CANONICAL_NAN: u16 = 0x7FFF;

/// Packed `fma.rn` on two 16-bit lanes.
pub(crate) fn fma2(ty: Half, a: u32, b: u32, c: u32) -> u32 {
    let lane = |x: u32, k: u32| (x >> (16 * k)) as u16;
    let mut d = 0u32;
    for k in 0..2 {
        d |= (fma_lane(ty, lane(a, k), lane(b, k), lane(c, k)) as u32) << (16 * k);
    }
    d
}

/// `a * b + c` rounded once to nearest even, subnormals kept (no `.ftz`).
///
/// The product of two 16-bit floats is exact in `f64` (at most 11 x 11 significant bits, and the
/// exponent range of bf16 squared fits `f64`'s). The sum is rounded once to `f64`, and its exact
/// error is recovered with Knuth's TwoSum; [`round_f64`] uses that error to break the one case
/// where the `f64` sum sits exactly on a rounding boundary of the 16-bit format, so the result
/// is the correctly rounded exact `a * b + c`.
pub(crate) fn fma_lane(ty: Half, a: u16, b: u16, c: u16) -> u16 {
    let (a, b, c) = (ty.value(a), ty.value(b), ty.value(c));
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return CANONICAL_NAN;
    }
    let p = a * b;
    let s = p + c;
    if s.is_nan() {
        return CANONICAL_NAN;
    }
    let err = if s.is_finite() {
        let bb = s - p;
        (p - (s - bb)) + (c - bb)
    } else {
        0.0
    };
    round_f64(s, err, ty.exp_bits(), ty.man_bits())
}

/// Rounds `s + err` (with `|err|` at most half an `f64` ulp of `s`; `err` is the exact remainder
/// of an `f64` operation, or 0) to nearest even in the IEEE-style format with `e` exponent and
/// `m` mantissa bits, with subnormals and overflow to infinity.
///
/// Rounding boundaries (midpoints) of the small format are `f64` numbers, so rounding `s` alone
/// is right unless `s` is itself a midpoint; then the sign of `err` decides.
pub(crate) fn round_f64(s: f64, err: f64, e: u32, m: u32) -> u16 {
    let r = round_f64_exact(s, e, m);
    if err == 0.0 || !s.is_finite() {
        return r;
    }
    let (down, up) = (s.next_down(), s.next_up());
    if round_f64_exact(down, e, m) != round_f64_exact(up, e, m) {
        // `s` is a midpoint: the exact value lies strictly on the side of `err`.
        return round_f64_exact(if err > 0.0 { up } else { down }, e, m);
    }
    r
}

/// Correctly rounded (nearest even) conversion of an exact `f64` to the small format.
fn round_f64_exact(v: f64, e: u32, m: u32) -> u16 {
    let sign: u32 = if v.is_sign_negative() {
        1 << (e + m)
    } else {
        0
    };
    let emax_field: i32 = (1 << e) - 1;
    if v.is_nan() {
        return ((emax_field as u32) << m | (1 << (m - 1))) as u16;
    }
    let a = v.abs();
    if a.is_infinite() {
        return (sign | (emax_field as u32) << m) as u16;
    }
    if a == 0.0 {
        return sign as u16;
    }
    let bits = a.to_bits();
    let (efield, frac) = ((bits >> 52) as i32, bits & ((1u64 << 52) - 1));
    // a = mant * 2^exp exactly
    let (mant, exp) = if efield == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), efield - 1075)
    };
    let log2 = exp + 63 - mant.leading_zeros() as i32;
    let bias = (1i32 << (e - 1)) - 1;
    let emin = 1 - bias;
    // The spacing of the small format at `a` is 2^q.
    let q = log2.max(emin) - m as i32;
    let sh = exp - q;
    let n: u64 = if sh >= 0 {
        mant << sh
    } else if -sh > 63 {
        0
    } else {
        let s = (-sh) as u32;
        let n0 = mant >> s;
        let rem = mant & ((1u64 << s) - 1);
        let half = 1u64 << (s - 1);
        if rem > half || (rem == half && n0 & 1 == 1) {
            n0 + 1
        } else {
            n0
        }
    };
    if n == 0 {
        return sign as u16;
    }
    let (n, q) = if n == 1u64 << (m + 1) {
        (1u64 << m, q + 1)
    } else {
        (n, q)
    };
    if n < 1u64 << m {
        return (sign | n as u32) as u16; // subnormal
    }
    let ef = q + m as i32 + bias;
    if ef >= emax_field {
        return (sign | (emax_field as u32) << m) as u16;
    }
    (sign | (ef as u32) << m | (n as u32 - (1u32 << m))) as u16
}

/// An op with a short note that is rendered as a comment in the CUDA text.
#[derive(Clone, Debug)]
pub(crate) struct Inst {
    pub op: Op,
    pub note: String,
}

/// A straight-line program over 32-bit registers.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub in_words: usize,
    pub insts: Vec<Inst>,
    pub outs: Vec<Val>,
    /// What the program does, for the comment above the CUDA function.
    pub summary: String,
}

impl Program {
    /// Number of 32-bit operations (each renders to one PTX instruction).
    pub(crate) fn op_count(&self) -> usize {
        self.insts.len()
    }

    /// Interprets the program on one group of input words.
    pub(crate) fn run(&self, input: &[u32]) -> Vec<u32> {
        assert_eq!(input.len(), self.in_words);
        let mut regs: Vec<u32> = input.to_vec();
        for inst in &self.insts {
            let v = inst.op.eval(|x| match x {
                Val::Reg(r) => regs[r as usize],
                Val::Imm(i) => i,
            });
            regs.push(v);
        }
        self.outs
            .iter()
            .map(|&v| match v {
                Val::Reg(r) => regs[r as usize],
                Val::Imm(i) => i,
            })
            .collect()
    }

    fn name(&self, v: Val) -> String {
        match v {
            Val::Reg(r) if (r as usize) < self.in_words => format!("x{r}"),
            Val::Reg(r) => format!("t{}", r as usize - self.in_words),
            Val::Imm(i) => format!("0x{i:08x}u"),
        }
    }

    /// The CUDA C function `fn_name(const uint32_t* in, uint32_t* out)`.
    pub(crate) fn render(&self, fn_name: &str) -> String {
        let mut s = String::new();
        for line in self.summary.lines() {
            let _ = writeln!(s, "// {line}");
        }
        let _ = writeln!(
            s,
            "__device__ __forceinline__ void {fn_name}(const uint32_t* in, uint32_t* out) {{"
        );
        for i in 0..self.in_words {
            let _ = writeln!(s, "    const uint32_t x{i} = in[{i}];");
        }
        for (k, inst) in self.insts.iter().enumerate() {
            let d = format!("t{k}");
            let n = |v: Val| self.name(v);
            let body = match inst.op {
                Op::Shl(a, sh) => format!("const uint32_t {d} = {} << {sh};", n(a)),
                Op::Shr(a, sh) => format!("const uint32_t {d} = {} >> {sh};", n(a)),
                Op::Funnel { lo, hi, n: sh } => format!(
                    "const uint32_t {d} = __funnelshift_r({}, {}, {sh});",
                    n(lo),
                    n(hi)
                ),
                Op::Add(a, b) => format!("const uint32_t {d} = {} + {};", n(a), n(b)),
                Op::Mad(a, b, c) => {
                    format!("const uint32_t {d} = {} * {} + {};", n(a), n(b), n(c))
                }
                Op::Prmt { a, b, sel } => match sel {
                    Val::Imm(sel) => format!(
                        "uint32_t {d}; asm(\"prmt.b32 %0, %1, %2, 0x{sel:04x};\" : \"=r\"({d}) : \"r\"({}), \"r\"({}));",
                        n(a),
                        n(b)
                    ),
                    Val::Reg(_) => format!(
                        "uint32_t {d}; asm(\"prmt.b32 %0, %1, %2, %3;\" : \"=r\"({d}) : \"r\"({}), \"r\"({}), \"r\"({}));",
                        n(a),
                        n(b),
                        n(sel)
                    ),
                },
                Op::Lop3 { a, b, c, lut } => format!(
                    "uint32_t {d}; asm(\"lop3.b32 %0, %1, %2, %3, 0x{lut:02x};\" : \"=r\"({d}) : \"r\"({}), \"r\"({}), \"r\"({}));",
                    n(a),
                    n(b),
                    n(c)
                ),
                Op::Fma2 { ty, a, b, c } => format!(
                    "uint32_t {d}; asm(\"fma.rn.{} %0, %1, %2, %3;\" : \"=r\"({d}) : \"r\"({}), \"r\"({}), \"r\"({}));",
                    ty.ptx(),
                    n(a),
                    n(b),
                    n(c)
                ),
            };
            if inst.note.is_empty() {
                let _ = writeln!(s, "    {body}");
            } else {
                let _ = writeln!(s, "    {body}  // {}", inst.note);
            }
        }
        for (k, &v) in self.outs.iter().enumerate() {
            let _ = writeln!(s, "    out[{k}] = {};", self.name(v));
        }
        s.push_str("}\n");
        s
    }
}

/// Builds a [`Program`]: folds ops on immediates, drops identities and reuses identical ops.
pub(crate) struct Builder {
    in_words: usize,
    insts: Vec<Inst>,
    memo: HashMap<Op, Val>,
}

impl Builder {
    pub(crate) fn new(in_words: usize) -> Builder {
        Builder {
            in_words,
            insts: Vec::new(),
            memo: HashMap::new(),
        }
    }

    /// Input word `i`; words outside the group read as zero.
    pub(crate) fn input(&self, i: i64) -> Val {
        if i >= 0 && (i as usize) < self.in_words {
            Val::Reg(i as u32)
        } else {
            Val::Imm(0)
        }
    }

    pub(crate) fn emit(&mut self, op: Op, note: &str) -> Val {
        // Identities.
        match op {
            Op::Shl(a, 0) | Op::Shr(a, 0) | Op::Funnel { lo: a, n: 0, .. } => return a,
            Op::Funnel {
                lo,
                hi: Val::Imm(0),
                n,
            } => return self.emit(Op::Shr(lo, n), note),
            Op::Funnel {
                lo: Val::Imm(0),
                hi,
                n,
            } => return self.emit(Op::Shl(hi, 32 - n), note),
            Op::Prmt {
                a,
                sel: Val::Imm(0x3210),
                ..
            } => return a,
            Op::Prmt {
                b,
                sel: Val::Imm(0x7654),
                ..
            } => return b,
            _ => {}
        }
        if op.operands().iter().all(|v| matches!(v, Val::Imm(_))) {
            return Val::Imm(op.eval(|v| match v {
                Val::Imm(i) => i,
                Val::Reg(_) => unreachable!(),
            }));
        }
        if let Some(&v) = self.memo.get(&op) {
            return v;
        }
        let v = Val::Reg((self.in_words + self.insts.len()) as u32);
        self.insts.push(Inst {
            op,
            note: note.to_string(),
        });
        self.memo.insert(op, v);
        v
    }

    pub(crate) fn finish(self, outs: Vec<Val>, summary: String) -> Program {
        Program {
            in_words: self.in_words,
            insts: self.insts,
            outs,
            summary,
        }
    }

    // Small helpers, each one op.
    pub(crate) fn shl(&mut self, a: Val, n: u32, note: &str) -> Val {
        self.emit(Op::Shl(a, n), note)
    }
    pub(crate) fn shr(&mut self, a: Val, n: u32, note: &str) -> Val {
        self.emit(Op::Shr(a, n), note)
    }
    pub(crate) fn funnel(&mut self, lo: Val, hi: Val, n: u32, note: &str) -> Val {
        self.emit(Op::Funnel { lo, hi, n }, note)
    }
    pub(crate) fn prmt(&mut self, a: Val, b: Val, sel: Val, note: &str) -> Val {
        self.emit(Op::Prmt { a, b, sel }, note)
    }
    pub(crate) fn lop3(
        &mut self,
        a: Val,
        b: Val,
        c: Val,
        f: impl Fn(u8, u8, u8) -> u8,
        note: &str,
    ) -> Val {
        self.emit(
            Op::Lop3 {
                a,
                b,
                c,
                lut: lut(f),
            },
            note,
        )
    }
    pub(crate) fn add(&mut self, a: Val, b: Val, note: &str) -> Val {
        self.emit(Op::Add(a, b), note)
    }
    pub(crate) fn mad(&mut self, a: Val, b: Val, c: Val, note: &str) -> Val {
        self.emit(Op::Mad(a, b, c), note)
    }
    pub(crate) fn fma2(&mut self, ty: Half, a: Val, b: Val, c: Val, note: &str) -> Val {
        self.emit(Op::Fma2 { ty, a, b, c }, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cast_prmt_semantics() {
        let a = 0x8844_2211u32;
        let b = 0xFF7F_0100u32;
        assert_eq!(prmt(a, b, 0x3210), a);
        assert_eq!(prmt(a, b, 0x7654), b);
        assert_eq!(prmt(a, b, 0x0123), 0x1122_4488);
        assert_eq!(prmt(a, b, 0x4444), 0x0000_0000);
        // Sign replication: byte 3 of a is 0x88 (negative), byte 6 of b is 0x7F (positive).
        assert_eq!(prmt(a, b, 0x0E0B), 0x1100_11FF);
        // Only the low 16 bits of the selector count.
        assert_eq!(prmt(a, b, 0xABCD_3210), a);
    }

    #[test]
    fn cast_lop3_semantics() {
        let (a, b, c) = (0x1234_5678u32, 0x0F0F_F0F0u32, 0xFFFF_0000u32);
        type Case = (fn(u8, u8, u8) -> u8, fn(u32, u32, u32) -> u32);
        let cases: [Case; 4] = [
            (|a, b, c| (a & b) | c, |a, b, c| (a & b) | c),
            (|a, b, c| (a & b) ^ c, |a, b, c| (a & b) ^ c),
            (|a, b, c| a | (b & c), |a, b, c| a | (b & c)),
            (|a, b, c| (a & !c) | (b & c), |a, b, c| (a & !c) | (b & c)),
        ];
        for (f8, f32_) in cases {
            assert_eq!(lop3(a, b, c, lut(f8)), f32_(a, b, c));
        }
        assert_eq!(lut(|a, b, c| (a & b) | c), 0xEA);
        assert_eq!(lut(|a, _, _| a), 0xF0);
    }

    #[test]
    fn cast_funnel_semantics() {
        assert_eq!(funnel_r(0x8000_0001, 0x0000_0003, 1), 0xC000_0000);
        assert_eq!(funnel_r(0xDEAD_BEEF, 0x1234_5678, 32), 0xDEAD_BEEF);
        assert_eq!(funnel_r(0xDEAD_BEEF, 0x1234_5678, 8), 0x78DE_ADBE);
    }

    #[test]
    fn cast_round_f64_matches_half_on_f32_inputs() {
        // `half`'s f32 conversions are exact-input RNE; ours must agree everywhere.
        let mut x = 0x9E37_79B9u32;
        for i in 0..400_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let bits = if i < 65536 {
                (i << 16) | (i & 0xFFFF)
            } else {
                x
            };
            let f = f32::from_bits(bits);
            let ours = round_f64(f as f64, 0.0, 5, 10);
            let theirs = half::f16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(half::f16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "f16 of {f:e}");
            }
            let ours = round_f64(f as f64, 0.0, 8, 7);
            let theirs = half::bf16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(half::bf16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "bf16 of {f:e}");
            }
        }
    }

    #[test]
    fn cast_fma_lane_rounds_the_exact_sum() {
        // 1 + 2^-11 is a tie in f16 (rounds to 1); a tiny extra term must push it up.
        let one = Half::F16.bits_exact(1.0);
        let t = Half::F16.bits_exact(2f64.powi(-11));
        let tiny = Half::F16.bits_exact(2f64.powi(-24));
        assert_eq!(fma_lane(Half::F16, one, one, t), one);
        // (1 + 2^-11 + 2^-24): product 1*1, addend 2^-11 + 2^-24 is not one f16, so build it
        // as a * b: (2^-11)*(1 + 2^-10) = 2^-11 + 2^-21 pushes the tie up.
        let a = Half::F16.bits_exact(1.0 + 2f64.powi(-10));
        let r = fma_lane(Half::F16, a, t, one);
        assert_eq!(Half::F16.value(r), 1.0 + 2f64.powi(-10));
        // -0 handling: (-0)*1 + (-0) = -0; 0*1 + (-0) = +0; x + (-x) = +0.
        let nz = 0x8000u16;
        assert_eq!(fma_lane(Half::F16, nz, one, nz), nz);
        assert_eq!(fma_lane(Half::F16, 0, one, nz), 0);
        assert_eq!(fma_lane(Half::F16, one, one, one | 0x8000), 0);
        // Overflow goes to infinity, subnormal results are kept.
        let max = Half::F16.bits_exact(65504.0);
        assert_eq!(
            fma_lane(Half::F16, max, Half::F16.bits_exact(2.0), nz),
            0x7C00
        );
        let sub = fma_lane(Half::F16, tiny, Half::F16.bits_exact(3.0), nz);
        assert_eq!(Half::F16.value(sub), 3.0 * 2f64.powi(-24));
        // bf16 subnormal inputs are kept.
        let bsub = 0x0001u16; // 2^-133
        let r = fma_lane(
            Half::BF16,
            bsub,
            Half::BF16.bits_exact(2f64.powi(127)),
            0x8000,
        );
        assert_eq!(Half::BF16.value(r), 2f64.powi(-6));
    }
}
