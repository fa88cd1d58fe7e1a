//! Vectorized casts of packed low-precision values to f16/bf16 in registers (paper section 6.2,
//! appendix C), and scalar fallbacks.
//!
//! # Register convention
//!
//! A thread's locals of a `b`-bit type are packed with no gaps, LSB first, into 32-bit words:
//! element `j` is bits `[j*b, (j+1)*b)` of the bit stream, word `w` holds stream bits
//! `[32w, 32w+32)`. A cast works on a *group*: the fewest elements (an even number) whose bits
//! fill whole words (`u4`: 8 elements in 1 word; `i6`: 16 in 3; 3/5/7-bit types: 32 in 3/5/7).
//! Its output is `group/2` words; word `k` holds element `2k` in its low 16 bits and `2k+1` in
//! its high 16 bits, as f16 or bf16.
//!
//! # What is vectorized
//!
//! [`cast_plan`] returns a plan for every packed source (`u1..u8`, `i2..i8`, generic `fNeEmM`,
//! `f8e4m3`, `f8e5m2`) to `F16` and `BF16` whose values are all exactly representable there. It
//! returns `None` (the codegen then uses the scalar path, [`decode_to_f32_expr`] and
//! [`encode_from_f32_expr`]) for:
//! - destinations other than `F16`/`BF16`;
//! - sources that are not packed low-precision types (`f16`, `bf16`, `f32`, `u32`, `i32`);
//! - generic floats with `E >= 5` to `F16`: their largest binades exceed f16's range (a generic
//!   `E = 5` type has no inf/NaN, so its exponent field 31 means `2^16 * 1.m`, above f16's max
//!   65504; `E = 6, 7` are far beyond). We refuse rather than saturate, so a vectorized cast is
//!   always exact and always agrees with the scalar path and the interpreter.
//!
//! Every vectorized cast is exact: the f16/bf16 result is the source's decoded value, bit for
//! bit, with -0 kept as -0, f8e5m2 infinities as infinities, and NaN codes as NaN.
//!
//! # How
//!
//! Each `(src, dst)` pair has one program: a straight-line list of 32-bit operations
//! (`ops.rs`): shifts, funnel shifts, `prmt.b32` byte permutes, `lop3.b32` with a table computed
//! in Rust from the boolean function, integer add/mad, and packed `fma.rn.f16x2`/`bf16x2`. The
//! CUDA text ([`cast_source`]) and the host twin ([`host_cast`]) are both produced from that list,
//! so the twin runs exactly the GPU's bit-level algorithm. `vector.rs` builds the programs and
//! explains the tricks: the magic-number trick for integers, exponent/mantissa placement plus a
//! rebias multiply for floats, `prmt` table lookup for 4-bit floats, and where each is exact.
//! There are no branches, no selects (NaN is made with bit operations), and no local memory:
//! inputs and outputs are indexed by constants only.
//!
//! The generated functions use `uint32_t` and PTX `fma.rn.bf16x2` (sm_80+); the scalar
//! expressions use the `cuda_fp16.h`/`cuda_bf16.h` intrinsics. The translation unit's prelude
//! provides both.
//!
//! # Testing
//!
//! The unit tests (`cast/tests.rs`) run every plan's host twin on every code in every position
//! of a group and on random groups, against `DType::decode`, comparing bits (NaN by NaN-ness,
//! -0 by its sign bit); the scalar expressions are checked against `DType::decode` on every code
//! and against `DType::encode` on every value, midpoint and midpoint neighbour plus random
//! floats. `tests/casts.rs::cast_gpu_bundle` writes a self-checking CUDA program that runs all of
//! it on a GPU and compares with the host twin bit for bit; it passed on an H100 built for
//! sm_90a and for sm_80 (this is also what shows that `fma.rn.bf16x2` keeps subnormal inputs,
//! which the bf16 rebias of subnormal codes relies on).

mod ops;
mod scalar;
mod vector;

use crate::DType;
use ops::Half;
use scalar::{
    add, and, fadd, fmax, fmin, fmul, fsub, if_eq, if_nan, maxu, minu, or, shl, shr, sub, wrap, E,
    V,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The order of the packed codes of a group, as seen from the output pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackOrder {
    /// Output pair `k` takes codes `2k` and `2k + 1`.
    Natural,
    /// In blocks of `2h` codes (`Split(h)`), output pair `k` of a block takes codes `k` and
    /// `h + k` of the block: the even elements first, then the odd ones. With `h * bits == 16`
    /// the two codes of a pair sit exactly one 16-bit lane apart, so a mask places both without
    /// moving bytes. The order [`crate::layout::Layout::swap_inner_locals`]`(2, h)` produces.
    Split(usize),
}

impl PackOrder {
    /// Codes per block (the group is a multiple of it).
    pub fn block(self) -> usize {
        match self {
            PackOrder::Natural => 2,
            PackOrder::Split(h) => 2 * h,
        }
    }

    /// The code slots (within the group) of output pair `k`.
    pub fn pair_slots(self, k: usize) -> [usize; 2] {
        match self {
            PackOrder::Natural => [2 * k, 2 * k + 1],
            PackOrder::Split(h) => {
                let base = k / h * 2 * h;
                [base + k % h, base + h + k % h]
            }
        }
    }

    /// The order whose output element `i` is code `sigma[i]` (`sigma` a permutation of a
    /// thread's locals), if it is one of these, repeated block by block.
    pub fn recognize(sigma: &[usize]) -> Option<PackOrder> {
        let order = match sigma {
            [0, 1, ..] => PackOrder::Natural,
            [0, h, ..] if *h >= 2 => PackOrder::Split(*h),
            _ => return None,
        };
        let ok = sigma.len().is_multiple_of(order.block())
            && (0..sigma.len() / 2)
                .all(|k| order.pair_slots(k) == [sigma[2 * k], sigma[2 * k + 1]]);
        ok.then_some(order)
    }
}

/// A vectorized conversion of `group` packed `src` elements (in `in_words` u32 words) to `dst`
/// (F16 or BF16; `out_words` = group/2 u32 words of packed pairs), the codes in `order`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CastPlan {
    pub src: DType,
    pub dst: DType,
    pub order: PackOrder,
    pub group: usize,
    pub in_words: usize,
    pub out_words: usize,
    pub fn_name: String,
    /// A biased cast ([`cast_plan_biased`]): each output is the code's value plus a constant
    /// of its position in the group ([`cast_biases`]).
    pub biased: bool,
}

/// Special codes of the two OCP FP8 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    /// No inf/NaN codes (generic `fNeEmM`).
    None,
    /// S.1111.111 is NaN, no infinities.
    E4M3,
    /// IEEE-style: all-ones exponent is inf (mantissa 0) or NaN.
    E5M2,
}

/// A packed source type, by family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SrcKind {
    UInt(u32),
    Int(u32),
    Float { e: u32, m: u32, special: Special },
}

/// Width in bits.
pub(crate) fn width(d: DType) -> u32 {
    d.bits()
}

/// The packed family of a valid sub-32-bit source; `None` for f16/bf16/f32/u32/i32 and for
/// invalid hand-built types (`DType::is_valid`).
pub(crate) fn src_kind(d: DType) -> Option<SrcKind> {
    if !d.is_valid() {
        return None;
    }
    match d {
        DType::UInt(b) if (1..=8).contains(&b) => Some(SrcKind::UInt(b as u32)),
        DType::Int(b) if (2..=8).contains(&b) => Some(SrcKind::Int(b as u32)),
        DType::Float { exp, man } if exp >= 1 && (3..=8).contains(&(1 + exp + man)) => {
            Some(SrcKind::Float {
                e: exp as u32,
                m: man as u32,
                special: Special::None,
            })
        }
        DType::F8E4M3 => Some(SrcKind::Float {
            e: 4,
            m: 3,
            special: Special::E4M3,
        }),
        DType::F8E5M2 => Some(SrcKind::Float {
            e: 5,
            m: 2,
            special: Special::E5M2,
        }),
        _ => None,
    }
}

/// Type name for generated identifiers: the canonical name (`u4`, `i6`, `f4e2m1`, `f8e4m3`,
/// `bf16`, ...). Valid types have distinct names.
pub(crate) fn type_name(d: DType) -> String {
    d.to_string()
}

fn half_of(d: DType) -> Option<Half> {
    match d {
        DType::F16 => Some(Half::F16),
        DType::BF16 => Some(Half::BF16),
        _ => None,
    }
}

type Cache = Mutex<HashMap<(DType, DType, PackOrder, bool), Option<Arc<ops::Program>>>>;

/// The program for a pair and order (biased or exact), built once per process.
fn program(src: DType, dst: DType, order: PackOrder, biased: bool) -> Option<Arc<ops::Program>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (src, dst, order, biased);
    if let Some(p) = cache.lock().unwrap().get(&key) {
        return p.clone();
    }
    let built = (|| {
        let (kind, half) = (src_kind(src)?, half_of(dst)?);
        Some(Arc::new(if biased {
            vector::build_biased(kind, half, order)?
        } else {
            vector::build(kind, half, order)?
        }))
    })();
    cache.lock().unwrap().insert(key, built.clone());
    built
}

/// Plan for src->dst, None when there is no vectorized path (dst not f16/bf16, or not exact).
pub fn cast_plan(src: DType, dst: DType) -> Option<CastPlan> {
    cast_plan_ordered(src, dst, PackOrder::Natural)
}

/// Plan for src->dst with the codes packed in `order`.
pub fn cast_plan_ordered(src: DType, dst: DType, order: PackOrder) -> Option<CastPlan> {
    plan_of(src, dst, order, false)
}

/// Plan of a *biased* cast of integers (`u1..u6`, `i2..i6`) to f16/bf16 with the codes packed
/// in `order`: one `lop3` per output pair (plus shared shifts) instead of a `lop3` and an `fma`,
/// leaving each output `b` above the code's value, `b` a power of two of at most
/// 2^[`vector::MAX_BIAS_LOG2`] (plus `2^(bits-1)` for signed codes) that depends only on the
/// output's position in its group ([`cast_biases`]). `None` for other types.
pub fn cast_plan_biased(src: DType, dst: DType, order: PackOrder) -> Option<CastPlan> {
    plan_of(src, dst, order, true)
}

/// The bias of each output element of one group of a biased plan (0 for an exact plan), in
/// output order: the value the plan gives for the all-zero codes, since code 0 is the value 0.
pub fn cast_biases(plan: &CastPlan) -> Vec<f64> {
    let zeros = vec![0u32; plan.in_words];
    let words = host_cast(plan, &zeros);
    let lanes = words.iter().flat_map(|w| [w & 0xFFFF, w >> 16]);
    lanes.map(|bits| plan.dst.decode(bits)).collect()
}

/// The biased plan the code generator uses for a cast of `sigma.len()` locals from `src` to
/// `dst` (output local `i` is input local `sigma[i]`): the order must be one the plans know and
/// the locals whole groups of it.
pub fn biased_cast_plan(src: DType, dst: DType, sigma: &[usize]) -> Option<CastPlan> {
    let plan = PackOrder::recognize(sigma).and_then(|o| cast_plan_biased(src, dst, o))?;
    let aligned = plan.group > 0
        && sigma.len().is_multiple_of(plan.group)
        && plan.in_words * 32 == plan.group * width(src) as usize
        && plan.out_words * 32 == plan.group * width(dst) as usize;
    aligned.then_some(plan)
}

/// The bias of each output local of a biased cast (`Instruction::Cast` with `biased`): the
/// [`biased_cast_plan`]'s biases, group after group, or all zeros when there is no such plan
/// (the cast is then exact). The interpreter and the code generator both use this.
pub fn biased_cast_offsets(src: DType, dst: DType, sigma: &[usize]) -> Vec<f64> {
    match biased_cast_plan(src, dst, sigma) {
        Some(plan) => {
            let bias = cast_biases(&plan);
            (0..sigma.len()).map(|i| bias[i % plan.group]).collect()
        }
        None => vec![0.0; sigma.len()],
    }
}

fn plan_of(src: DType, dst: DType, order: PackOrder, biased: bool) -> Option<CastPlan> {
    if let PackOrder::Split(h) = order {
        if !(2..=64).contains(&h) {
            return None;
        }
    }
    let p = program(src, dst, order, biased)?;
    let group = vector::group_size(width(src), order);
    debug_assert_eq!(p.in_words, group * width(src) as usize / 32);
    debug_assert_eq!(p.outs.len(), group / 2);
    let suffix = match order {
        PackOrder::Natural => String::new(),
        PackOrder::Split(h) => format!("_split{h}"),
    };
    Some(CastPlan {
        src,
        dst,
        order,
        group,
        in_words: p.in_words,
        out_words: p.outs.len(),
        fn_name: format!(
            "tilus_cast_{}_to_{}{suffix}{}",
            type_name(src),
            type_name(dst),
            if biased { "_biased" } else { "" }
        ),
        biased,
    })
}

fn plan_program(plan: &CastPlan) -> Arc<ops::Program> {
    program(plan.src, plan.dst, plan.order, plan.biased).expect("a CastPlan comes from cast_plan")
}

/// CUDA text defining `__device__ __forceinline__ void {fn_name}(const uint32_t* in, uint32_t* out)`.
/// It needs no helpers: all its names are local, so several plans can share a translation unit.
pub fn cast_source(plan: &CastPlan) -> String {
    plan_program(plan).render(&plan.fn_name)
}

/// Number of 32-bit instructions of the plan's function (before the CUDA compiler's own
/// scheduling; constants may additionally need moves into registers).
pub fn cast_op_count(plan: &CastPlan) -> usize {
    plan_program(plan).op_count()
}

/// Host twin: runs the plan's op list on the host (same shifts, `prmt`/`lop3` semantics, and
/// exactly rounded packed f16/bf16 fma). `input` holds one or more whole groups (`in_words`
/// each); the result holds `out_words` per group.
pub fn host_cast(plan: &CastPlan, input: &[u32]) -> Vec<u32> {
    let p = plan_program(plan);
    assert!(
        input.len().is_multiple_of(plan.in_words),
        "host_cast: {} words is not a whole number of {}-word groups",
        input.len(),
        plan.in_words
    );
    input.chunks(plan.in_words).flat_map(|g| p.run(g)).collect()
}

/// The scalar decode of `src` as an expression tree over the code.
pub(crate) fn decode_expr(src: DType) -> E {
    let code = || E::In;
    let bits = width(src);
    match src {
        DType::UInt(32) => wrap(E::UToF, code()),
        // Exact: at most 8 bits.
        DType::UInt(b) => wrap(E::UToF, and(code(), E::U((1 << b) - 1))),
        DType::Int(b) => wrap(E::IToF, wrap_signext(code(), b as u32)),
        DType::F16 => wrap(E::HalfToF, and(code(), E::U(0xFFFF))),
        DType::BF16 => wrap(E::AsFloat, shl(code(), 16)),
        DType::F32 => wrap(E::AsFloat, code()),
        // An e5m2 code is the high byte of the f16 with the same value (inf and NaN included).
        DType::F8E5M2 => wrap(E::HalfToF, shl(and(code(), E::U(0xFF)), 8)),
        DType::Float { exp, man } => small_float_decode(exp as u32, man as u32, bits),
        DType::F8E4M3 => {
            // The one select: the NaN code S.1111.111 (documented in `decode_to_f32_expr`).
            if_eq(
                and(code(), E::U(0x7F)),
                E::U(0x7F),
                E::F(f32::NAN),
                small_float_decode(4, 3, 8),
            )
        }
    }
}

fn wrap_signext(x: E, b: u32) -> E {
    E::SignExt(Box::new(x), b)
}

/// `value = mfull * 2^(e - [e != 0] + 1 - bias - m)` with `mfull = m | [e != 0] << M` (the
/// significand with its implicit bit): one formula for normal and subnormal codes. The power of
/// two is built from its exponent bits and is a normal f32 for every code, the significand has at
/// most 8 bits, so the product is exact and never an f32 subnormal (flush-to-zero cannot touch
/// it). The sign is ORed in last, so -0 decodes to -0.0.
fn small_float_decode(e: u32, m: u32, bits: u32) -> E {
    let bias = (1u32 << (e - 1)) - 1;
    let em = and(E::In, E::U((1 << (e + m)) - 1));
    let ef = shr(em, m);
    let nz = minu(ef.clone(), E::U(1));
    let mfull = or(and(E::In, E::U((1 << m) - 1)), shl(nz.clone(), m));
    let exp_bits = shl(sub(add(ef, E::U(128 - bias - m)), nz), 23);
    let mag = fmul(wrap(E::UToF, mfull), wrap(E::AsFloat, exp_bits));
    let sign = shl(and(shr(E::In, bits - 1), E::U(1)), 31);
    wrap(E::AsFloat, or(wrap(E::AsUint, mag), sign))
}

/// Largest finite value of a small float.
fn small_float_max(e: u32, m: u32, special: Special) -> f32 {
    let bias = (1i32 << (e - 1)) - 1;
    let top = match special {
        Special::E4M3 => 2f64.powi((1 << e) - 1 - bias) * (2.0 - 2.0 * 2f64.powi(-(m as i32))),
        Special::E5M2 => 2f64.powi((1 << e) - 2 - bias) * (2.0 - 2f64.powi(-(m as i32))),
        Special::None => 2f64.powi((1 << e) - 1 - bias) * (2.0 - 2f64.powi(-(m as i32))),
    };
    top as f32
}

/// The scalar encode of `dst` as an expression tree over the value.
pub(crate) fn encode_expr(dst: DType) -> E {
    let v = || E::In;
    match dst {
        DType::UInt(32) => wrap(E::FToURn, v()),
        DType::Int(32) => wrap(E::FToIRn, v()),
        // rintf ties to even; fmaxf(NaN, 0) is 0, so NaN encodes as 0.
        DType::UInt(b) => wrap(
            E::FToU,
            fmin(
                fmax(wrap(E::Rint, v()), E::F(0.0)),
                E::F(((1u32 << b) - 1) as f32),
            ),
        ),
        DType::Int(b) => {
            let lo = -(1i32 << (b - 1)) as f32;
            let hi = ((1i32 << (b - 1)) - 1) as f32;
            if_nan(
                v(),
                E::U(0),
                and(
                    wrap(E::FToI, fmin(fmax(wrap(E::Rint, v()), E::F(lo)), E::F(hi))),
                    E::U((1 << b) - 1),
                ),
            )
        }
        DType::F32 => wrap(E::AsUint, v()),
        DType::F16 => if_nan(
            v(),
            E::U(0x7FFF),
            wrap(E::FToHalfRn, fmin(fmax(v(), E::F(-65504.0)), E::F(65504.0))),
        ),
        DType::BF16 => {
            let max = f32::from_bits(0x7F7F_0000);
            if_nan(
                v(),
                E::U(0x7FFF),
                wrap(E::FToBf16Rn, fmin(fmax(v(), E::F(-max)), E::F(max))),
            )
        }
        DType::Float { exp, man } => if_nan(
            v(),
            E::U(0),
            small_float_encode(exp as u32, man as u32, Special::None),
        ),
        DType::F8E4M3 => if_nan(v(), E::U(0x7F), small_float_encode(4, 3, Special::E4M3)),
        DType::F8E5M2 => if_nan(v(), E::U(0x7F), small_float_encode(5, 2, Special::E5M2)),
    }
}

/// Round to nearest, ties to the even code, and saturate, branch-free (the rule of
/// `DType::encode`).
///
/// `a = min(|v|, max)`. The spacing of the format at `a` is `2^q` with `q = max(ea, K) - m - 127`
/// in f32 exponent terms (`ea` the f32 exponent field of `a`, `K = 128 - bias` the field of the
/// format's smallest normal, which also fixes the spacing of the subnormals). `x = a * 2^-q` is
/// exact (a power of two, no overflow or underflow) and `rintf` rounds it to the nearest integer
/// `n`. The code's exponent|mantissa bits are then `((max(ea, K) - K) << m) + n`: in the
/// subnormal range `n` is the mantissa; in a normal binade `n = 2^m + mantissa` and the `+ 2^m`
/// bumps the exponent field by the one that `max(ea, K) - K` is short of; an `n` that rounded up
/// to `2^(m+1)` carries into the next binade by itself. Clamping first means `n` never passes the
/// largest finite code.
///
/// Ties: with `m >= 1` the first term is even, so `rintf`'s even `n` is the even code. With
/// `m == 0` the code is `ee - K + n`, so a tie must go to the `n` of parity `p = (ee - K) & 1`:
/// `rintf(x - p) + p` does that (subtracting 1 flips which neighbour is even). It is exact:
/// `p == 1` only above the subnormal range, where `x` is in `[1, 2)` and `x - 1` is exact
/// (`x + 1` would not be: it can cross into the next binade and drop `x`'s last bit).
///
/// The sign bit is the f32 sign, so -0 and negative values that round to zero give the sign-bit
/// code, as `DType::encode` does.
fn small_float_encode(e: u32, m: u32, special: Special) -> E {
    let bias = (1u32 << (e - 1)) - 1;
    let bits = 1 + e + m;
    let k = 128 - bias;
    let a = fmin(wrap(E::FAbs, E::In), E::F(small_float_max(e, m, special)));
    let ee = maxu(shr(wrap(E::AsUint, a.clone()), 23), E::U(k));
    let qinv = wrap(E::AsFloat, shl(sub(E::U(254 + m), ee.clone()), 23));
    let x = fmul(a, qinv);
    let rounded = if m == 0 {
        let p = wrap(E::UToF, and(sub(ee.clone(), E::U(k)), E::U(1)));
        fadd(wrap(E::Rint, fsub(x, p.clone())), p)
    } else {
        wrap(E::Rint, x)
    };
    let n = wrap(E::FToU, rounded);
    let em = add(shl(sub(ee, E::U(k)), m), n);
    let sign = shl(shr(wrap(E::AsUint, E::In), 31), bits - 1);
    or(em, sign)
}

/// Float value of a code, any `src` type incl. f16/bf16/f32/i32/u32: a branch-free C expression
/// over the `uint32_t` variable named `code` (pass a variable: it is read several times). Bits
/// above the type's width are ignored.
///
/// Exact for every type except `u32`/`i32` above 2^24 in magnitude, which round to nearest even
/// as C's conversion does. f8e4m3's NaN code is the only select (`(code & 0x7f) == 0x7f ?
/// NaN : value`); f8e5m2 infinities and NaNs decode to infinities and NaN.
pub fn decode_to_f32_expr(src: DType, code: &str) -> String {
    decode_expr(src).render(code)
}

/// `uint32_t` code of the `float` variable named `value` (read several times): round to nearest
/// even, saturate to the largest finite value (infinities too).
///
/// - Integers: round half to even, then clamp to the range. NaN encodes as 0 (`u32`/`i32`:
///   `__float2{uint,int}_rn`, which also saturate and map NaN to 0).
/// - f16/bf16: `__float2{half,bfloat16}_rn` of the value clamped to +-max finite; NaN encodes as
///   the canonical NaN 0x7fff.
/// - f8e4m3: NaN encodes as 0x7f (its NaN). f8e5m2: NaN encodes as 0x7f (a NaN); infinities
///   saturate to +-57344 like every other out-of-range value.
/// - Generic `fNeEmM` (no NaN code): NaN encodes as +0.
/// - Ties go to the even code (for types without mantissa bits, the even exponent field), and
///   -0 or a negative value that rounds to zero gives the sign-bit code.
///
/// For every non-NaN input the code equals `DType::encode`'s (tested exhaustively over the
/// values, midpoints and neighbours of every type). `DType::encode` reports NaN as an error; the
/// GPU has nowhere to report it, hence the fixed codes above. The only selects are the `isnan`
/// tests.
pub fn encode_from_f32_expr(dst: DType, value: &str) -> String {
    encode_expr(dst).render(value)
}

/// The code of an arithmetic result `value` (a C `float` expression) in `dst`, as
/// [`DType::round`] gives it: f16 and bf16 round with `__float2half_rn` / `__float2bfloat16_rn`,
/// whose overflow is an infinity, where a conversion ([`encode_from_f32_expr`]) saturates.
pub fn round_from_f32_expr(dst: DType, value: &str) -> String {
    round_expr(dst).render(value)
}

/// Host evaluation of [`round_from_f32_expr`] (same expression tree).
pub fn host_round_from_f32(dst: DType, value: f32) -> u32 {
    round_expr(dst).eval(V::F(value)).u()
}

fn round_expr(dst: DType) -> E {
    match dst {
        DType::F16 => if_nan(E::In, E::U(0x7FFF), wrap(E::FToHalfRn, E::In)),
        DType::BF16 => if_nan(E::In, E::U(0x7FFF), wrap(E::FToBf16Rn, E::In)),
        _ => encode_expr(dst),
    }
}

/// Host evaluation of [`decode_to_f32_expr`] (same expression tree).
pub fn host_decode_to_f32(src: DType, code: u32) -> f32 {
    decode_expr(src).eval(V::U(code)).f()
}

/// Host evaluation of [`encode_from_f32_expr`] (same expression tree).
pub fn host_encode_from_f32(dst: DType, value: f32) -> u32 {
    encode_expr(dst).eval(V::F(value)).u()
}

#[cfg(test)]
mod tests;
