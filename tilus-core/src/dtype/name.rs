//! Type names: the grammar `u<N>`, `i<N>`, `f<N>e<E>m<M>`, `f16`, `bf16`, `f32`.
//!
//! Only canonical spellings parse (lowercase, no leading zeros), so that every name maps to one
//! type and `Display` output parses back to the same type. A wrong name gets a reason saying
//! what is wrong with it, and a suggestion where a common alias was used.

use super::DType;

/// Parse a name, or say why it is not one.
pub(super) fn parse(s: &str) -> Result<DType, String> {
    if s.is_empty() {
        return Err("the name is empty".into());
    }
    if let Some(alias) = alias(s) {
        return Err(format!("not a type name here; did you mean `{alias}`?"));
    }
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        let lower = s.to_ascii_lowercase();
        return Err(match parse(&lower) {
            Ok(t) => format!("names are lowercase; did you mean `{t}`?"),
            Err(_) => "names are lowercase".into(),
        });
    }
    match s {
        "f16" => return Ok(DType::F16),
        "bf16" => return Ok(DType::BF16),
        "f32" => return Ok(DType::F32),
        "f8e4m3" => return Ok(DType::F8E4M3),
        "f8e5m2" => return Ok(DType::F8E5M2),
        _ => {}
    }
    if let Some(rest) = s.strip_prefix('u') {
        let n = number(rest).ok_or("expected `u` followed by a width in bits, e.g. `u4`")?;
        return match n {
            1..=8 | 32 => Ok(DType::UInt(n as u8)),
            0 => Err("an integer needs at least one bit".into()),
            _ => Err(format!("unsigned integers have 1..=8 or 32 bits, not {n}")),
        };
    }
    if let Some(rest) = s.strip_prefix('i') {
        let n = number(rest).ok_or("expected `i` followed by a width in bits, e.g. `i4`")?;
        return match n {
            2..=8 | 32 => Ok(DType::Int(n as u8)),
            0 | 1 => Err(format!(
                "a signed integer needs at least 2 bits (a sign bit and a value bit), not {n}; \
                 use `u1` for a single bit"
            )),
            _ => Err(format!("signed integers have 2..=8 or 32 bits, not {n}")),
        };
    }
    if let Some(rest) = s
        .strip_prefix('f')
        .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    {
        return parse_float(s, rest);
    }
    Err("not a type name; a name starts with `u`, `i` or `f` and a width, or is `bf16`".into())
}

/// `rest` is what follows the leading `f`: `<N>e<E>m<M>`, or a bare width.
fn parse_float(s: &str, rest: &str) -> Result<DType, String> {
    let split_hint = "a float is named `fNeEmM` with N = 1+E+M (e.g. `f4e2m1`, `f6e3m2`), \
                      or is one of `f8e4m3`, `f8e5m2`, `f16`, `bf16`, `f32`";
    let Some((n, em)) = rest.split_once('e') else {
        return Err(match number(rest) {
            Some(8) => "an 8-bit float needs its exponent/mantissa split: `f8e4m3`, `f8e5m2`, or \
                 `f8eXmY` for a generic one"
                .into(),
            Some(n @ 3..=7) => format!(
                "a {n}-bit float needs its exponent/mantissa split, e.g. `f{n}e{}m{}`",
                (n - 1) / 2,
                n - 1 - (n - 1) / 2
            ),
            Some(64) => "f64 is not a VM type; the wide floats are f16, bf16 and f32".into(),
            _ => split_hint.into(),
        });
    };
    let parts = em
        .split_once('m')
        .and_then(|(e, m)| Some((number(n)?, number(e)?, number(m)?)));
    let Some((n, e, m)) = parts else {
        return Err(format!("`{s}` does not match `fNeEmM`; {split_hint}"));
    };
    if 1 + e as u64 + m as u64 != n as u64 {
        return Err(format!(
            "the widths do not add up: 1 sign + {e} exponent + {m} mantissa bits = {} bits, but \
             the name says {n}",
            1 + e as u64 + m as u64
        ));
    }
    if !(3..=8).contains(&n) {
        return Err(format!(
            "generic floats have 3..=8 bits, not {n}; the wide floats are f16, bf16 and f32"
        ));
    }
    if e == 0 {
        return Err(
            "a float needs at least one exponent bit (E >= 1); with E = 0 it is an integer type"
                .into(),
        );
    }
    // f8e4m3 and f8e5m2 were matched above as the OCP types, so this is a generic format.
    Ok(DType::Float {
        exp: e as u8,
        man: m as u8,
    })
}

/// A decimal number in canonical form: digits only, no sign, no leading zero (except "0").
/// Saturates rather than overflowing so absurd widths get a range error, not a parse error.
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    Some(s.bytes().fold(0u32, |acc, b| {
        acc.saturating_mul(10).saturating_add((b - b'0') as u32)
    }))
}

/// Spellings used by other libraries, mapped to ours.
fn alias(s: &str) -> Option<&'static str> {
    Some(match s.to_ascii_lowercase().as_str() {
        "half" | "float16" | "fp16" => "f16",
        "bfloat16" | "bfloat" => "bf16",
        "float" | "float32" | "fp32" => "f32",
        "e4m3" | "fp8" | "e4m3fn" | "f8e4m3fn" | "float8_e4m3fn" | "fp8e4m3" => "f8e4m3",
        "e5m2" | "float8_e5m2" | "fp8e5m2" => "f8e5m2",
        "fp4" | "e2m1" | "mxfp4" | "nvfp4" | "float4_e2m1fn" | "f4e2m1fn" => "f4e2m1",
        "e3m2" | "float6_e3m2fn" | "f6e3m2fn" => "f6e3m2",
        "e2m3" | "float6_e2m3fn" | "f6e2m3fn" => "f6e2m3",
        "int8" => "i8",
        "uint8" => "u8",
        "int4" => "i4",
        "uint4" => "u4",
        "int32" | "int" => "i32",
        "uint32" => "u32",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_numbers_only() {
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("32"), Some(32));
        assert_eq!(number("04"), None);
        assert_eq!(number("+4"), None);
        assert_eq!(number(""), None);
        assert_eq!(number("99999999999999999999"), Some(u32::MAX));
    }

    #[test]
    fn aliases_suggest_canonical_names() {
        let reason = parse("fp4").unwrap_err();
        assert!(reason.contains("`f4e2m1`"), "{reason}");
        let reason = parse("F16").unwrap_err();
        assert!(
            reason.contains("lowercase") && reason.contains("`f16`"),
            "{reason}"
        );
    }
}
