//! `tilus dtype <name> [--json]`.
//!
//! JSON output is one object with keys in this order:
//! `{"name":"f4e2m1","bits":4,"kind":"float","values":[0.0,0.5,...]}`.
//! - `kind` is `"int"`, `"uint"` or `"float"`.
//! - `values[c]` is the decoded value of bit pattern `c` for every `c < 2^bits`, for all types
//!   of at most 8 bits (sub-byte types, `u8`, `i8`, and every 8-bit float). For the 16- and
//!   32-bit types it is `null` rather than 65536 or 2^32 entries.
//! - Integer types print integers (`-2`); float types print JSON numbers (`0.5`, `1.0`, `-0.0`).
//!   JSON has no NaN or infinity, so those codes print as the strings `"nan"`, `"inf"`, `"-inf"`.
//!
//! Without `--json` the output is a readable table: one line per code with its hex value, its
//! bits (split into sign, exponent and mantissa for floats), and its value.

use serde::Serialize;
use serde_json::Value;
use tilus_core::dtype::{DType, DTypeError, Kind};

pub fn run(name: &str, json: bool) -> Result<String, String> {
    let dtype: DType = name.parse().map_err(|e: DTypeError| e.to_string())?;
    Ok(if json { to_json(dtype) } else { table(dtype) })
}

/// The `--json` object; fields serialize in declaration order, which is the documented order.
#[derive(Serialize)]
struct DTypeJson {
    name: String,
    bits: u32,
    kind: String,
    values: Option<Vec<Value>>,
}

fn to_json(d: DType) -> String {
    let json = DTypeJson {
        name: d.to_string(),
        bits: d.bits(),
        kind: d.kind().to_string(),
        values: d
            .values()
            .map(|vs| vs.into_iter().map(|v| json_value(d, v)).collect()),
    };
    serde_json::to_string(&json).expect("plain data serializes")
}

fn json_value(d: DType, v: f64) -> Value {
    if d.kind() != Kind::Float {
        // Every integer code is exactly an i64.
        return Value::from(v as i64);
    }
    match v {
        v if v.is_nan() => Value::from("nan"),
        f64::INFINITY => Value::from("inf"),
        f64::NEG_INFINITY => Value::from("-inf"),
        v => Value::from(v),
    }
}

/// The float layout (exponent, mantissa bits) of a float type.
fn float_split(d: DType) -> Option<(u32, u32)> {
    match d {
        DType::Float { exp, man } => Some((exp as u32, man as u32)),
        DType::F8E4M3 => Some((4, 3)),
        DType::F8E5M2 => Some((5, 2)),
        DType::F16 => Some((5, 10)),
        DType::BF16 => Some((8, 7)),
        DType::F32 => Some((8, 23)),
        _ => None,
    }
}

fn describe(d: DType) -> String {
    let b = d.bits();
    let range = format!(
        "range {} .. {}",
        number(d, d.min_value()),
        number(d, d.max_value())
    );
    match (d, float_split(d)) {
        (DType::UInt(_), _) => format!("{d}: {b}-bit unsigned integer; {range}"),
        (DType::Int(_), _) => {
            format!("{d}: {b}-bit signed integer (two's complement); {range}")
        }
        (_, Some((e, m))) => {
            let family = match d {
                DType::Float { .. } => "generic float (no inf/nan codes)",
                DType::F8E4M3 => "OCP FP8 E4M3 float (e4m3fn: no inf, S.1111.111 is NaN)",
                DType::F8E5M2 => "OCP FP8 E5M2 float (IEEE-style inf/nan)",
                DType::F16 => "IEEE 754 binary16 float",
                DType::BF16 => "bfloat16 float",
                _ => "IEEE 754 binary32 float",
            };
            let bias = d.exponent_bias().unwrap_or(0);
            format!(
                "{d}: {b}-bit {family}; 1 sign + {e} exponent + {m} mantissa bits, bias {bias}; \
                 finite {range}"
            )
        }
        _ => format!("{d}: {b}-bit type; {range}"),
    }
}

fn table(d: DType) -> String {
    let mut out = describe(d);
    let Some(values) = d.values() else {
        out.push_str(&format!(
            "\n(2^{} codes: not enumerated; only types of at most 8 bits are)",
            d.bits()
        ));
        return out;
    };
    let hex_width = (d.bits() as usize).div_ceil(4);
    let rows: Vec<(String, String, String)> = values
        .iter()
        .enumerate()
        .map(|(c, &v)| {
            let c = c as u32;
            (
                format!("0x{c:0hex_width$x}"),
                bit_string(d, c),
                number(d, v),
            )
        })
        .collect();
    let w0 = rows[0].0.len().max(4);
    let w1 = rows[0].1.len().max(4);
    out.push_str(&format!("\n{:w0$}  {:w1$}  value", "code", "bits"));
    for (hex, bits, value) in rows {
        out.push_str(&format!("\n{hex:w0$}  {bits:w1$}  {value}"));
    }
    out
}

/// Bits of `code`, most significant first; floats split as `sign exponent mantissa`.
fn bit_string(d: DType, code: u32) -> String {
    let b = d.bits() as usize;
    let s = format!("{code:0b$b}");
    match float_split(d) {
        Some((e, m)) if m > 0 => {
            let e = e as usize;
            format!("{} {} {}", &s[..1], &s[1..1 + e], &s[1 + e..])
        }
        Some(_) => format!("{} {}", &s[..1], &s[1..]),
        None => s,
    }
}

/// A value for people: integers plainly, floats in the shortest exact form, with an exponent
/// when plain digits would be long.
fn number(d: DType, v: f64) -> String {
    if d.kind() != Kind::Float {
        return format!("{}", v as i64);
    }
    if v.is_nan() {
        return "nan".into();
    }
    let a = v.abs();
    if a.is_infinite() || a == 0.0 || (1e-4..1e7).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_exactly_the_documented_object() {
        assert_eq!(
            run("f4e2m1", true).unwrap(),
            "{\"name\":\"f4e2m1\",\"bits\":4,\"kind\":\"float\",\"values\":\
             [0.0,0.5,1.0,1.5,2.0,3.0,4.0,6.0,-0.0,-0.5,-1.0,-1.5,-2.0,-3.0,-4.0,-6.0]}"
        );
        assert_eq!(
            run("i2", true).unwrap(),
            r#"{"name":"i2","bits":2,"kind":"int","values":[0,1,-2,-1]}"#
        );
        assert_eq!(
            run("u1", true).unwrap(),
            r#"{"name":"u1","bits":1,"kind":"uint","values":[0,1]}"#
        );
    }

    #[test]
    fn wide_types_are_not_enumerated() {
        for (name, bits, kind) in [
            ("f16", 16, "float"),
            ("bf16", 16, "float"),
            ("f32", 32, "float"),
            ("u32", 32, "uint"),
            ("i32", 32, "int"),
        ] {
            assert_eq!(
                run(name, true).unwrap(),
                format!(r#"{{"name":"{name}","bits":{bits},"kind":"{kind}","values":null}}"#)
            );
            assert!(run(name, false).unwrap().contains("not enumerated"));
        }
    }

    #[test]
    fn special_values_are_strings_in_json() {
        let v: Value = serde_json::from_str(&run("f8e5m2", true).unwrap()).unwrap();
        let values = v["values"].as_array().unwrap();
        assert_eq!(values.len(), 256);
        assert_eq!(values[0x7c], "inf");
        assert_eq!(values[0xfc], "-inf");
        assert_eq!(values[0x7f], "nan");
        assert_eq!(values[0x7b], 57344.0);
        let v: Value = serde_json::from_str(&run("f8e4m3", true).unwrap()).unwrap();
        assert_eq!(v["values"][0x7e], 448.0);
        assert_eq!(v["values"][0xff], "nan");
    }

    #[test]
    fn table_shows_bits_and_values() {
        let t = run("f4e2m1", false).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 16);
        assert!(
            lines[0].starts_with("f4e2m1: 4-bit generic float"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("bias 1") && lines[0].contains("-6 .. 6"));
        assert_eq!(lines[1], "code  bits    value");
        assert_eq!(lines[3], "0x1   0 00 1  0.5");
        assert_eq!(lines[17], "0xf   1 11 1  -6");
        let t = run("i3", false).unwrap();
        assert!(t.contains("0x5   101   -3"), "{t}");
        let t = run("f8e4m3", false).unwrap();
        assert!(t.contains("0x7e  0 1111 110  448"), "{t}");
        assert!(t.contains("0x01  0 0000 001  0.001953125"), "{t}");
        let t = run("f3e2m0", false).unwrap();
        assert!(t.contains("0x3   0 11  4"), "{t}");
    }

    #[test]
    fn bad_names_are_one_line_errors() {
        for name in ["i1", "u9", "f4e3m1", "foo", ""] {
            let e = run(name, true).unwrap_err();
            assert!(e.starts_with("unknown data type"), "{e}");
            assert!(!e.contains('\n'));
        }
    }
}
