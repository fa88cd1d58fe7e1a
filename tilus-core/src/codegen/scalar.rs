//! Element values in generated code: decoding a code to its computation type, encoding back,
//! constants, and the elementwise operators.
//!
//! Semantics (the interpreter's, `crate::interp`): floats compute in `float` with IEEE
//! round-to-nearest (`__fadd_rn` etc., never contracted into FMAs) and the result is rounded to
//! nearest even ([`round`]: an infinity past the largest finite f16, bf16 or f32; the narrower
//! floats saturate), where a conversion ([`encode`]) saturates every type. The interpreter computes exactly in `f64` and rounds
//! through `f32`; both give the same bits, because for `+ - * /` of `f32`-representable operands
//! rounding the exact result to `f64` first is innocuous (53 >= 2 * 24 + 2) and `fmod` is exact.
//! Integers compute exactly in 64 bits (division truncates, remainder takes the dividend's sign)
//! and the result is clamped to the type's range; the interpreter reports an overflow or a
//! division by zero as an error instead, so a program that runs there gives the same bits here.
//! For the same reason `i32` arithmetic skips both (32-bit operations, `elementwise::binary`).

use super::cast;
use crate::ir::ElementOp;
use crate::DType;

/// The C type elementwise arithmetic uses for a dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CType {
    Float,
    Int64,
}

impl CType {
    pub(crate) fn of(d: DType) -> CType {
        if d.is_float() {
            CType::Float
        } else {
            CType::Int64
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            CType::Float => "float",
            CType::Int64 => "long long",
        }
    }
}

/// The value of code variable `c` of type `d`, in `CType::of(d)`.
pub(crate) fn decode(d: DType, c: &str) -> String {
    match (CType::of(d), d) {
        (CType::Float, _) => cast::decode_to_f32_expr(d, c),
        (CType::Int64, DType::Int(_)) => format!("(long long){}", sign_extend(d, c)),
        (CType::Int64, _) => format!("(long long)({c})"),
    }
}

/// The value of code variable `c` of the signed integer type `d` as an `int`.
pub(crate) fn sign_extend(d: DType, c: &str) -> String {
    match d.bits() {
        32 => format!("(int)({c})"),
        b => {
            let s = 32 - b;
            format!("((int)(({c}) << {s}) >> {s})")
        }
    }
}

/// The code of value variable `v` (in `CType::of(d)`) in `d`.
pub(crate) fn encode(d: DType, v: &str) -> String {
    match (CType::of(d), d) {
        (CType::Float, _) => cast::encode_from_f32_expr(d, v),
        (CType::Int64, _) => {
            let (lo, hi) = int_range(d);
            let clamped = format!("min(max({v}, {lo}LL), {hi}LL)");
            if d.bits() == 32 {
                format!("(uint32_t){clamped}")
            } else {
                format!(
                    "((uint32_t){clamped} & {})",
                    super::regs::hex(d.code_mask())
                )
            }
        }
    }
}

/// The code of arithmetic result `v` (in `CType::of(d)`) in `d`: as [`encode`], except that
/// f16 and bf16 overflow to an infinity (`DType::round`).
pub(crate) fn round(d: DType, v: &str) -> String {
    match CType::of(d) {
        CType::Float => cast::round_from_f32_expr(d, v),
        CType::Int64 => encode(d, v),
    }
}

fn int_range(d: DType) -> (i64, i64) {
    let b = d.bits();
    if d.is_signed() {
        (-(1i64 << (b - 1)), (1i64 << (b - 1)) - 1)
    } else {
        (0, (1i64 << b) - 1)
    }
}

/// A constant converted to `d` as the interpreter does (integers: round half to even and clamp
/// in `f64`; floats: `encode(v as f32)`): its code and its value as a literal of
/// `CType::of(d)`.
pub(crate) fn constant(d: DType, v: f64) -> (u32, String) {
    let code = if d.is_float() {
        d.encode(v as f32).unwrap_or(0)
    } else {
        let (lo, hi) = int_range(d);
        let x = if v.is_nan() {
            0
        } else {
            v.round_ties_even().clamp(lo as f64, hi as f64) as i64
        };
        x as u32 & d.code_mask()
    };
    let value = d.decode(code);
    let lit = match CType::of(d) {
        CType::Float => f32_lit(value as f32),
        CType::Int64 => format!("{}LL", value as i64),
    };
    (code, lit)
}

/// A `float` literal that reads back exactly.
pub(crate) fn f32_lit(v: f32) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "__int_as_float(0x7f800000)".to_string()
        } else {
            "__int_as_float(0xff800000)".to_string()
        }
    } else if v.is_nan() {
        "__int_as_float(0x7fffffff)".to_string()
    } else {
        let s = format!("{v:?}");
        let s = if s.contains('e') && !s.contains('.') {
            s.replacen('e', ".0e", 1)
        } else {
            s
        };
        format!("{s}f")
    }
}

/// `a op b` in computation type `t` (operands are variables or literals).
pub(crate) fn binop(t: CType, op: ElementOp, a: &str, b: &str) -> String {
    match (t, op) {
        (CType::Float, ElementOp::Add) => format!("__fadd_rn({a}, {b})"),
        (CType::Float, ElementOp::Sub) => format!("__fsub_rn({a}, {b})"),
        (CType::Float, ElementOp::Mul) => format!("__fmul_rn({a}, {b})"),
        (CType::Float, ElementOp::Div) => format!("__fdiv_rn({a}, {b})"),
        (CType::Float, ElementOp::Mod) => format!("fmodf({a}, {b})"),
        (CType::Float, ElementOp::Min) => format!("fminf({a}, {b})"),
        (CType::Float, ElementOp::Max) => format!("fmaxf({a}, {b})"),
        (CType::Int64, ElementOp::Add) => format!("{a} + {b}"),
        (CType::Int64, ElementOp::Sub) => format!("{a} - {b}"),
        (CType::Int64, ElementOp::Mul) => format!("{a} * {b}"),
        (CType::Int64, ElementOp::Div) => format!("({b} == 0 ? 0LL : {a} / {b})"),
        (CType::Int64, ElementOp::Mod) => format!("({b} == 0 ? 0LL : {a} % {b})"),
        (CType::Int64, ElementOp::Min) => format!("min({a}, {b})"),
        (CType::Int64, ElementOp::Max) => format!("max({a}, {b})"),
        (CType::Int64, ElementOp::And) => format!("{a} & {b}"),
        (CType::Int64, ElementOp::Or) => format!("{a} | {b}"),
        (CType::Int64, ElementOp::Xor) => format!("{a} ^ {b}"),
        // The bit emitter (`emitters::math::bitwise`) handles shifts with the dtype's width;
        // these 64-bit forms mask the amount so they are never undefined.
        (CType::Int64, ElementOp::Shl) => {
            format!("(long long)((unsigned long long){a} << ({b} & 63))")
        }
        (CType::Int64, ElementOp::Shr) => format!("{a} >> ({b} & 63)"),
        // The verifier rejects bit operations on floats.
        (
            CType::Float,
            ElementOp::And | ElementOp::Or | ElementOp::Xor | ElementOp::Shl | ElementOp::Shr,
        ) => "0.0f".to_string(),
    }
}

/// `printf` conversion for a value of computation type `t`.
pub(crate) fn printf_conv(t: CType) -> &'static str {
    match t {
        CType::Float => "%g",
        CType::Int64 => "%lld",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_back() {
        assert_eq!(f32_lit(1.0), "1.0f");
        assert_eq!(f32_lit(0.0625), "0.0625f");
        assert_eq!(f32_lit(1e-20), "1.0e-20f");
        assert_eq!(f32_lit(-3.5), "-3.5f");
        assert_eq!(f32_lit(f32::INFINITY), "__int_as_float(0x7f800000)");
    }

    #[test]
    fn constants_convert_like_the_interpreter() {
        // Integers: round half to even in f64 and clamp; floats: through f32.
        assert_eq!(constant(DType::Int(4), 2.5), (2, "2LL".to_string()));
        assert_eq!(constant(DType::Int(4), -100.0), (8, "-8LL".to_string()));
        assert_eq!(constant(DType::UInt(32), 4294967295.0).0, u32::MAX);
        assert_eq!(constant(DType::F16, 1e6).1, "65504.0f");
    }
}
