//! `tilus dtype` end to end: runs the built binary for every type of at most 8 bits and checks
//! every value against a decoder written here from the format definitions (not tilus-core's).

use serde_json::Value;
use std::process::{Command, Output};

fn tilus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilus"))
        .args(args)
        .output()
        .expect("run the tilus binary")
}

/// What a code should decode to, or which special it is.
#[derive(Debug, PartialEq)]
enum Expect {
    Int(i64),
    Float(f64),
    Special(&'static str),
}

/// The types this test knows, spelled out independently of the crate: (name, bits, kind).
fn narrow_types() -> Vec<(String, u32, &'static str)> {
    let mut v = Vec::new();
    for b in 1..=8 {
        v.push((format!("u{b}"), b, "uint"));
    }
    for b in 2..=8 {
        v.push((format!("i{b}"), b, "int"));
    }
    for n in 3..=8u32 {
        for e in 1..n {
            v.push((format!("f{n}e{e}m{}", n - 1 - e), n, "float"));
        }
    }
    v
}

/// Decode `code` of the named type from first principles.
fn expected(name: &str, code: u32) -> Expect {
    let bits = |s: &str| s.parse::<u32>().unwrap();
    if let Some(b) = name.strip_prefix('u') {
        let _ = bits(b);
        return Expect::Int(code as i64);
    }
    if let Some(b) = name.strip_prefix('i') {
        let b = bits(b);
        let half = 1i64 << (b - 1);
        let c = code as i64;
        return Expect::Int(if c >= half { c - 2 * half } else { c });
    }
    // f<N>e<E>m<M>
    let rest = name.strip_prefix('f').unwrap();
    let (_, em) = rest.split_once('e').unwrap();
    let (e, m) = em.split_once('m').unwrap();
    let (e, m) = (bits(e), bits(m));
    let sign = code >> (e + m) & 1 == 1;
    let exp_field = (code >> m) & ((1 << e) - 1);
    let man_field = code & ((1 << m) - 1);
    let exp_max = (1 << e) - 1;
    match (e, m) {
        // OCP E4M3 (e4m3fn): S.1111.111 is NaN, nothing is infinite.
        (4, 3) if exp_field == exp_max && man_field == 7 => return Expect::Special("nan"),
        // OCP E5M2: IEEE specials on the all-ones exponent.
        (5, 2) if exp_field == exp_max => {
            return Expect::Special(match (man_field, sign) {
                (0, false) => "inf",
                (0, true) => "-inf",
                _ => "nan",
            });
        }
        _ => {}
    }
    let bias = (1i32 << (e - 1)) - 1;
    // Significand as an integer over 2^M, scaled by the effective exponent.
    let (significand, exponent) = if exp_field == 0 {
        (man_field, 1 - bias)
    } else {
        (man_field + (1 << m), exp_field as i32 - bias)
    };
    let mag = significand as f64 * 2f64.powi(exponent - m as i32);
    Expect::Float(if sign { -mag } else { mag })
}

/// One element of the `values` array, from its exact text. (serde_json's default number parser
/// is not correctly rounded, so it could be off by an ulp for tiny values such as 2^-30; std's
/// parser is exact.)
fn actual(kind: &str, token: &str) -> Expect {
    if let Some(s) = token.strip_prefix('"') {
        return Expect::Special(match s.strip_suffix('"') {
            Some("nan") => "nan",
            Some("inf") => "inf",
            Some("-inf") => "-inf",
            _ => panic!("unexpected string value {token}"),
        });
    }
    let looks_float = token.contains(['.', 'e', 'E']);
    if kind == "float" {
        assert!(looks_float, "float values print as floats, got {token}");
        Expect::Float(token.parse().unwrap())
    } else {
        assert!(
            !looks_float,
            "integer values print as integers, got {token}"
        );
        Expect::Int(token.parse().unwrap())
    }
}

/// The raw elements of the `values` array (a flat list of numbers and simple strings).
fn value_tokens(text: &str) -> Vec<&str> {
    let start = text.find("\"values\":[").unwrap() + "\"values\":[".len();
    let end = text.rfind("]}").unwrap();
    text[start..end].split(',').collect()
}

fn same(a: &Expect, b: &Expect) -> bool {
    match (a, b) {
        // Bitwise, so -0.0 and 0.0 are told apart.
        (Expect::Float(x), Expect::Float(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

#[test]
fn json_values_match_an_independent_decoder_for_every_narrow_type() {
    let types = narrow_types();
    assert_eq!(types.len(), 8 + 7 + 27);
    for (name, bits, kind) in types {
        let out = tilus(&["dtype", &name, "--json"]);
        assert!(out.status.success(), "{name}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let prefix = format!(r#"{{"name":"{name}","bits":{bits},"kind":"{kind}","values":["#);
        assert!(text.starts_with(&prefix), "{name}: keys in order: {text}");
        let json: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 4);
        assert_eq!(
            json["values"].as_array().unwrap().len(),
            1 << bits,
            "{name}"
        );
        let tokens = value_tokens(&text);
        assert_eq!(tokens.len(), 1 << bits, "{name}");
        for (code, token) in tokens.into_iter().enumerate() {
            let want = expected(&name, code as u32);
            let got = actual(kind, token);
            assert!(
                same(&got, &want),
                "{name} code {code:#x}: {got:?} != {want:?}"
            );
        }
    }
}

#[test]
fn ocp_types_have_their_known_extremes() {
    let max = |name: &str| {
        let json: Value =
            serde_json::from_slice(&tilus(&["dtype", name, "--json"]).stdout).unwrap();
        json["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .fold(f64::MIN, f64::max)
    };
    assert_eq!(max("f4e2m1"), 6.0);
    assert_eq!(max("f6e3m2"), 28.0);
    assert_eq!(max("f6e2m3"), 7.5);
    assert_eq!(max("f8e4m3"), 448.0);
    assert_eq!(max("f8e5m2"), 57344.0);
}

#[test]
fn wide_types_print_null_values() {
    for (name, bits, kind) in [
        ("f16", 16, "float"),
        ("bf16", 16, "float"),
        ("f32", 32, "float"),
        ("u32", 32, "uint"),
        ("i32", 32, "int"),
    ] {
        let out = tilus(&["dtype", name, "--json"]);
        assert!(out.status.success());
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["name"], name);
        assert_eq!(json["bits"], bits);
        assert_eq!(json["kind"], kind);
        assert!(json["values"].is_null());
    }
}

#[test]
fn table_has_one_row_per_code() {
    let out = tilus(&["dtype", "i6"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Description, header, 64 rows.
    assert_eq!(text.lines().count(), 2 + 64);
    assert!(text.contains("\n0x3f  111111  -1\n"), "{text}");
}

#[test]
fn bad_names_exit_2_with_one_line_on_stderr() {
    for name in ["i1", "u9", "f9e4m4", "f3e0m2", "f4e3m1", "foo", "f8", ""] {
        let out = tilus(&["dtype", name, "--json"]);
        assert_eq!(out.status.code(), Some(2), "{name:?}");
        assert!(out.stdout.is_empty(), "{name:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name:?}: {err}");
        assert!(
            err.starts_with("error: unknown data type"),
            "{name:?}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
}
