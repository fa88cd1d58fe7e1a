//! Scalar element conversions for the generated code, standing in for `cast.rs` (branch
//! `casts`) until it lands; the names and signatures are that module's.
//!
//! Both directions are branch-free C expressions over a *variable* (the argument is repeated):
//! - [`decode_to_f32_expr`]: the exact value of a code (every VM value is exact in `float`, except
//!   `i32`/`u32` beyond 2^24, which round to nearest even like the interpreter's `as f32`);
//! - [`encode_from_f32_expr`]: `DType::encode` on device: round to nearest even, saturate to the
//!   largest finite value (infinities too), negative zero kept for floats; integers round half to
//!   even and clamp.

use crate::DType;

/// A vectorized conversion of `group` elements through a device function (none here: the
/// fallback has only scalar conversions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CastPlan {
    pub(crate) src: DType,
    pub(crate) dst: DType,
    pub(crate) group: usize,
    pub(crate) in_words: usize,
    pub(crate) out_words: usize,
    pub(crate) fn_name: String,
}

pub(crate) fn cast_plan(src: DType, dst: DType) -> Option<CastPlan> {
    let _ = (src, dst);
    None
}

pub(crate) fn cast_source(plan: &CastPlan) -> String {
    let _ = plan;
    String::new()
}

/// `(sign, exp bits, man bits, bias, largest finite value)` of a small or fp8 float.
fn small_float(d: DType) -> Option<(u32, u32, i32, f32)> {
    let (e, m) = match d {
        DType::Float { exp, man } => (exp as u32, man as u32),
        DType::F8E4M3 => (4, 3),
        DType::F8E5M2 => (5, 2),
        _ => return None,
    };
    let bias = (1i32 << (e - 1)) - 1;
    let max = match d {
        DType::F8E4M3 => 448.0,
        DType::F8E5M2 => 57344.0,
        // All-ones exponent, all-ones mantissa.
        _ => {
            let emax = (1i32 << e) - 1 - bias;
            (2.0 - 2f32.powi(-(m as i32))) * 2f32.powi(emax)
        }
    };
    Some((e, m, bias, max))
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

/// The value of code `c` (a `uint32_t` variable holding `src.bits()` bits) as a `float`.
pub(crate) fn decode_to_f32_expr(src: DType, c: &str) -> String {
    match src {
        DType::F32 => format!("__uint_as_float({c})"),
        DType::F16 => format!("__half2float(__ushort_as_half((unsigned short)({c})))"),
        DType::BF16 => format!("__bfloat162float(__ushort_as_bfloat16((unsigned short)({c})))"),
        // e5m2 is the top byte of an f16, infinities and NaNs included.
        DType::F8E5M2 => {
            format!("__half2float(__ushort_as_half((unsigned short)(({c}) << 8)))")
        }
        DType::UInt(_) => format!("(float)({c})"),
        DType::Int(32) => format!("(float)(int)({c})"),
        DType::Int(b) => {
            let s = 32 - b as u32;
            format!("(float)((int)(({c}) << {s}) >> {s})")
        }
        _ => {
            let (e, m, bias, _) = small_float(src).expect("small float");
            let emask = (1u32 << e) - 1;
            let mmask = (1u32 << m) - 1;
            let sign_bit = e + m;
            // Normal: f32 bits with the exponent rebased; subnormal: m * 2^(1 - bias - M).
            let sub_scale = 2f32.powi(1 - bias - m as i32);
            let rebias = (127 - bias) as u32;
            let exp = format!("((({c}) >> {m}) & {emask}u)");
            let man = format!("(({c}) & {mmask}u)");
            let normal = format!(
                "__uint_as_float((({exp} + {rebias}u) << 23) | ({man} << {}))",
                23 - m
            );
            let sub = format!("(float){man} * {}", f32_lit(sub_scale));
            let mag = format!("({exp} == 0u ? {sub} : {normal})");
            let val = format!("((({c}) >> {sign_bit}) & 1u ? -{mag} : {mag})");
            if src == DType::F8E4M3 {
                format!("((({c}) & 0x7fu) == 0x7fu ? __int_as_float(0x7fffffff) : {val})")
            } else {
                val
            }
        }
    }
}

/// The code of `v` (a `float` variable) in `dst`, as a `uint32_t` with only the low
/// `dst.bits()` bits set.
pub(crate) fn encode_from_f32_expr(dst: DType, v: &str) -> String {
    match dst {
        DType::F32 => format!("__float_as_uint({v})"),
        DType::F16 => format!(
            "(uint32_t)__half_as_ushort(__float2half_rn(fminf(fmaxf({v}, -65504.0f), 65504.0f)))"
        ),
        DType::BF16 => {
            let max = f32_lit(half::bf16::MAX.to_f32());
            format!(
                "(uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(fminf(fmaxf({v}, -{max}), {max})))"
            )
        }
        DType::Int(32) => format!("(uint32_t)__float2int_rn({v})"),
        DType::UInt(32) => format!("__float2uint_rn({v})"),
        DType::Int(b) => {
            let (lo, hi) = (-(1i32 << (b - 1)), (1i32 << (b - 1)) - 1);
            let mask = (1u32 << b) - 1;
            format!("((uint32_t)min(max(__float2int_rn({v}), {lo}), {hi}) & {mask}u)")
        }
        DType::UInt(b) => {
            let hi = (1i32 << b) - 1;
            format!("(uint32_t)min(max(__float2int_rn({v}), 0), {hi})")
        }
        _ => {
            let (e, m, bias, max) = small_float(dst).expect("small float");
            let min_normal = 2f32.powi(1 - bias);
            let sub_scale = 2f32.powi(bias - 1 + m as i32);
            let drop = 23 - m;
            let round_bias = (1u32 << (drop - 1)) - 1;
            let rebias = ((127 - bias) as u32) << m;
            // a = min(|v|, max); subnormals: rint(a * 2^(bias-1+M)) (may carry into the first
            // normal code); normals: round the f32 mantissa to M bits, ties to even.
            let a = format!("fminf(fabsf({v}), {})", f32_lit(max));
            let bits = format!("__float_as_uint({a})");
            let normal = format!(
                "((({bits} + {round_bias}u + (({bits} >> {drop}) & 1u)) >> {drop}) - {rebias}u)"
            );
            let sub = format!("(uint32_t)rintf({a} * {})", f32_lit(sub_scale));
            format!(
                "(({a} < {} ? {sub} : {normal}) | ((__float_as_uint({v}) >> 31) << {}))",
                f32_lit(min_normal),
                e + m
            )
        }
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
        assert_eq!(f32_lit(f32::INFINITY), "__int_as_float(0x7f800000)");
    }

    /// Emulate the generic small-float encoder in Rust and compare with `DType::encode`.
    #[test]
    fn small_float_encoder_matches_dtype() {
        let types = [
            DType::Float { exp: 2, man: 1 },
            DType::Float { exp: 3, man: 2 },
            DType::Float { exp: 2, man: 3 },
            DType::Float { exp: 1, man: 2 },
            DType::Float { exp: 3, man: 0 },
            DType::F8E4M3,
            DType::F8E5M2,
        ];
        for dst in types {
            let (e, m, bias, max) = small_float(dst).unwrap();
            let enc = |v: f32| -> u32 {
                let a = v.abs().min(max);
                let drop = 23 - m;
                let code = if a < 2f32.powi(1 - bias) {
                    (a * 2f32.powi(bias - 1 + m as i32)).round_ties_even() as u32
                } else {
                    let bits = a.to_bits();
                    ((bits + ((1u32 << (drop - 1)) - 1) + ((bits >> drop) & 1)) >> drop)
                        - (((127 - bias) as u32) << m)
                };
                code | ((v.to_bits() >> 31) << (e + m))
            };
            let mut v = -1000.0f32;
            while v < 1000.0 {
                assert_eq!(enc(v), dst.encode(v).unwrap(), "{dst} {v}");
                v += 0.0078125 * 3.0;
            }
            for code in 0..(1u32 << dst.bits()) {
                let x = dst.decode(code);
                if x.is_finite() {
                    assert_eq!(enc(x as f32), dst.encode(x as f32).unwrap(), "{dst} {x}");
                    // Midpoints between neighbours exercise ties.
                    let y = dst.decode(code + 1);
                    if (code + 1) < (1 << dst.bits()) && y.is_finite() {
                        let mid = ((x + y) / 2.0) as f32;
                        assert_eq!(enc(mid), dst.encode(mid).unwrap(), "{dst} mid {mid}");
                    }
                }
            }
            for v in [f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e-30, -1e-30] {
                assert_eq!(enc(v), dst.encode(v).unwrap(), "{dst} {v}");
            }
        }
    }
}
