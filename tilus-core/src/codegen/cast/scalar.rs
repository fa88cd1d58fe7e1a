//! Scalar conversions as tiny expression trees, rendered to CUDA C and evaluated on the host.
//!
//! Like the vectorized programs, each scalar conversion is described once (an [`E`] tree) and
//! both rendered ([`E::render`]) and interpreted ([`E::eval`]) with the f32 semantics CUDA
//! gives those operations (IEEE round-to-nearest-even arithmetic, `rintf` ties to even,
//! `fminf`/`fmaxf` ignoring a NaN operand, saturating `__float2{int,uint}_rn`). The only
//! selects are `isnan(x) ? .. : ..` on the value being encoded and the f8e4m3 NaN test, both
//! documented where they are built.

use super::ops::round_f64;

/// A value of the expression language.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum V {
    U(u32),
    I(i32),
    F(f32),
}

impl V {
    pub(crate) fn u(self) -> u32 {
        match self {
            V::U(x) => x,
            other => panic!("expected uint32, got {other:?}"),
        }
    }
    fn i(self) -> i32 {
        match self {
            V::I(x) => x,
            other => panic!("expected int, got {other:?}"),
        }
    }
    pub(crate) fn f(self) -> f32 {
        match self {
            V::F(x) => x,
            other => panic!("expected float, got {other:?}"),
        }
    }
}

/// Expressions over one input (the code, a `uint32_t`, or the value, a `float`).
#[derive(Clone, Debug)]
pub(crate) enum E {
    In,
    U(u32),
    F(f32),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Shl(Box<E>, u32),
    Shr(Box<E>, u32),
    Add(Box<E>, Box<E>),
    Sub(Box<E>, Box<E>),
    MinU(Box<E>, Box<E>),
    MaxU(Box<E>, Box<E>),
    /// Low `bits` bits as a two's-complement `int`.
    SignExt(Box<E>, u32),
    IToF(Box<E>),
    UToF(Box<E>),
    AsFloat(Box<E>),
    AsUint(Box<E>),
    FMul(Box<E>, Box<E>),
    FAdd(Box<E>, Box<E>),
    FSub(Box<E>, Box<E>),
    FMin(Box<E>, Box<E>),
    FMax(Box<E>, Box<E>),
    FAbs(Box<E>),
    Rint(Box<E>),
    /// `(uint32_t)x` for an integral `x` in range.
    FToU(Box<E>),
    /// `(uint32_t)(int)x` for an integral `x` in range.
    FToI(Box<E>),
    /// `__float2uint_rn`: ties to even, saturating, NaN -> 0.
    FToURn(Box<E>),
    /// `__float2int_rn`: ties to even, saturating, NaN -> 0 (as `uint32_t` bits).
    FToIRn(Box<E>),
    /// f16 bits (low 16) to float.
    HalfToF(Box<E>),
    /// float to f16 bits, round to nearest even.
    FToHalfRn(Box<E>),
    /// float to bf16 bits, round to nearest even.
    FToBf16Rn(Box<E>),
    /// `isnan(a) ? b : c`.
    IfNaN(Box<E>, Box<E>, Box<E>),
    /// `a == b ? c : d`.
    IfEq(Box<E>, Box<E>, Box<E>, Box<E>),
}

fn b(e: E) -> Box<E> {
    Box::new(e)
}

// Constructors, so the builders in `super` read like formulas.
pub(crate) fn and(x: E, y: E) -> E {
    E::And(b(x), b(y))
}
pub(crate) fn or(x: E, y: E) -> E {
    E::Or(b(x), b(y))
}
pub(crate) fn shl(x: E, n: u32) -> E {
    if n == 0 {
        x
    } else {
        E::Shl(b(x), n)
    }
}
pub(crate) fn shr(x: E, n: u32) -> E {
    if n == 0 {
        x
    } else {
        E::Shr(b(x), n)
    }
}
pub(crate) fn add(x: E, y: E) -> E {
    E::Add(b(x), b(y))
}
pub(crate) fn sub(x: E, y: E) -> E {
    E::Sub(b(x), b(y))
}
pub(crate) fn minu(x: E, y: E) -> E {
    E::MinU(b(x), b(y))
}
pub(crate) fn maxu(x: E, y: E) -> E {
    E::MaxU(b(x), b(y))
}
pub(crate) fn fmul(x: E, y: E) -> E {
    E::FMul(b(x), b(y))
}
pub(crate) fn fadd(x: E, y: E) -> E {
    E::FAdd(b(x), b(y))
}
pub(crate) fn fsub(x: E, y: E) -> E {
    E::FSub(b(x), b(y))
}
pub(crate) fn fmin(x: E, y: E) -> E {
    E::FMin(b(x), b(y))
}
pub(crate) fn fmax(x: E, y: E) -> E {
    E::FMax(b(x), b(y))
}
pub(crate) fn wrap(f: fn(Box<E>) -> E, x: E) -> E {
    f(b(x))
}
pub(crate) fn if_nan(t: E, yes: E, no: E) -> E {
    E::IfNaN(b(t), b(yes), b(no))
}
pub(crate) fn if_eq(x: E, y: E, yes: E, no: E) -> E {
    E::IfEq(b(x), b(y), b(yes), b(no))
}

fn float_lit(x: f32) -> String {
    if x.is_nan() {
        "__int_as_float(0x7fffffff)".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "__int_as_float(0x7f800000)".into()
        } else {
            "__int_as_float(0xff800000)".into()
        }
    } else {
        // Rust prints the shortest decimal that reads back as the same f32; a C compiler reads
        // it back exactly, too.
        let s = format!("{x:?}");
        let s = if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        };
        format!("({s}f)")
    }
}

impl E {
    /// C text; `input` names the input variable (evaluated several times: pass a variable).
    pub(crate) fn render(&self, input: &str) -> String {
        let r = |e: &E| e.render(input);
        match self {
            E::In => format!("({input})"),
            E::U(x) => format!("0x{x:x}u"),
            E::F(x) => float_lit(*x),
            E::And(x, y) => format!("({} & {})", r(x), r(y)),
            E::Or(x, y) => format!("({} | {})", r(x), r(y)),
            E::Shl(x, n) => format!("({} << {n})", r(x)),
            E::Shr(x, n) => format!("({} >> {n})", r(x)),
            E::Add(x, y) => format!("({} + {})", r(x), r(y)),
            E::Sub(x, y) => format!("({} - {})", r(x), r(y)),
            E::MinU(x, y) => format!("umin({}, {})", r(x), r(y)),
            E::MaxU(x, y) => format!("umax({}, {})", r(x), r(y)),
            E::SignExt(x, 32) => format!("((int){})", r(x)),
            E::SignExt(x, n) => format!("(((int)({} << {})) >> {})", r(x), 32 - n, 32 - n),
            E::IToF(x) | E::UToF(x) => format!("((float){})", r(x)),
            E::AsFloat(x) => format!("__uint_as_float({})", r(x)),
            E::AsUint(x) => format!("__float_as_uint({})", r(x)),
            E::FMul(x, y) => format!("__fmul_rn({}, {})", r(x), r(y)),
            E::FAdd(x, y) => format!("__fadd_rn({}, {})", r(x), r(y)),
            E::FSub(x, y) => format!("__fsub_rn({}, {})", r(x), r(y)),
            E::FMin(x, y) => format!("fminf({}, {})", r(x), r(y)),
            E::FMax(x, y) => format!("fmaxf({}, {})", r(x), r(y)),
            E::FAbs(x) => format!("fabsf({})", r(x)),
            E::Rint(x) => format!("rintf({})", r(x)),
            E::FToU(x) => format!("((uint32_t){})", r(x)),
            E::FToI(x) => format!("((uint32_t)(int){})", r(x)),
            E::FToURn(x) => format!("__float2uint_rn({})", r(x)),
            E::FToIRn(x) => format!("((uint32_t)__float2int_rn({}))", r(x)),
            E::HalfToF(x) => format!("__half2float(__ushort_as_half((unsigned short){}))", r(x)),
            E::FToHalfRn(x) => format!("((uint32_t)__half_as_ushort(__float2half_rn({})))", r(x)),
            E::FToBf16Rn(x) => format!(
                "((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn({})))",
                r(x)
            ),
            E::IfNaN(t, y, n) => format!("(isnan({}) ? {} : {})", r(t), r(y), r(n)),
            E::IfEq(a, c, y, n) => format!("({} == {} ? {} : {})", r(a), r(c), r(y), r(n)),
        }
    }

    /// Host evaluation with CUDA's semantics.
    pub(crate) fn eval(&self, input: V) -> V {
        let ev = |e: &E| e.eval(input);
        match self {
            E::In => input,
            E::U(x) => V::U(*x),
            E::F(x) => V::F(*x),
            E::And(x, y) => V::U(ev(x).u() & ev(y).u()),
            E::Or(x, y) => V::U(ev(x).u() | ev(y).u()),
            E::Shl(x, n) => V::U(ev(x).u() << n),
            E::Shr(x, n) => V::U(ev(x).u() >> n),
            E::Add(x, y) => V::U(ev(x).u().wrapping_add(ev(y).u())),
            E::Sub(x, y) => V::U(ev(x).u().wrapping_sub(ev(y).u())),
            E::MinU(x, y) => V::U(ev(x).u().min(ev(y).u())),
            E::MaxU(x, y) => V::U(ev(x).u().max(ev(y).u())),
            E::SignExt(x, n) => {
                let s = 32 - n;
                V::I(((ev(x).u() << s) as i32) >> s)
            }
            E::IToF(x) => V::F(ev(x).i() as f32),
            E::UToF(x) => V::F(ev(x).u() as f32),
            E::AsFloat(x) => V::F(f32::from_bits(ev(x).u())),
            E::AsUint(x) => V::U(ev(x).f().to_bits()),
            E::FMul(x, y) => V::F(ev(x).f() * ev(y).f()),
            E::FAdd(x, y) => V::F(ev(x).f() + ev(y).f()),
            E::FSub(x, y) => V::F(ev(x).f() - ev(y).f()),
            E::FMin(x, y) => V::F(ev(x).f().min(ev(y).f())),
            E::FMax(x, y) => V::F(ev(x).f().max(ev(y).f())),
            E::FAbs(x) => V::F(ev(x).f().abs()),
            E::Rint(x) => V::F(ev(x).f().round_ties_even()),
            E::FToU(x) => {
                let f = ev(x).f();
                debug_assert!((0.0..4294967296.0).contains(&f) && f.fract() == 0.0);
                V::U(f as u32)
            }
            E::FToI(x) => {
                let f = ev(x).f();
                debug_assert!(f.fract() == 0.0 && f.abs() < 2147483648.0);
                V::U(f as i32 as u32)
            }
            E::FToURn(x) => V::U(ev(x).f().round_ties_even() as u32),
            E::FToIRn(x) => V::U(ev(x).f().round_ties_even() as i32 as u32),
            E::HalfToF(x) => V::F(half::f16::from_bits(ev(x).u() as u16).to_f32()),
            E::FToHalfRn(x) => V::U(round_f64(ev(x).f() as f64, 0.0, 5, 10) as u32),
            E::FToBf16Rn(x) => V::U(round_f64(ev(x).f() as f64, 0.0, 8, 7) as u32),
            E::IfNaN(t, y, n) => {
                if ev(t).f().is_nan() {
                    ev(y)
                } else {
                    ev(n)
                }
            }
            E::IfEq(a, c, y, n) => {
                if ev(a).u() == ev(c).u() {
                    ev(y)
                } else {
                    ev(n)
                }
            }
        }
    }
}
