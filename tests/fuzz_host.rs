//! Property-based fuzzing of the public host APIs (issue 13, item 4): data types, storage,
//! layouts (parser and algebra), quantization, the weight re-layout, the CPU forward pass and
//! the import of GPTQ / AWQ checkpoints.
//!
//! Every property feeds arbitrary input (invalid enum values, huge and zero sizes, NaN,
//! infinities, subnormals, garbage strings) and asserts that the call returns `Ok` with a result
//! that holds together, or an error whose message names the argument at fault, and never
//! panics: proptest catches a panic and reports it, shrunk, with the input. Each case must also
//! finish within [`CASE_LIMIT`].
//!
//! Runs are deterministic: proptest's RNG is seeded from `TILUS_FUZZ_SEED` (default
//! [`BASE_SEED`]; printed with each property's count and time, so a failure reproduces).
//! `TILUS_FUZZ_CASES=<n>` runs every property `n` times instead of its default count.

mod common;

use common::env_number;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::fmt::Debug;
use std::io::Write;
use std::time::{Duration, Instant};
use tilus::core::layout::{parse, Digit, Mode, Primitive};
use tilus::core::storage;
use tilus::kernels::linear::QuantizedLinear;
use tilus::kernels::qmatmul::{
    self, relayout, relayout_inverse, weight_types, QMatmulConfig, QMatmulMethod,
};
use tilus::prelude::{bf16, f16};
use tilus::quant::{Group, QuantizedWeight};
use tilus::{DType, Layout};

const BASE_SEED: u64 = 0x7115_f022_2024_0013;
/// The longest one case may take (debug build, loaded 2-core machine): a hang or a runaway
/// allocation fails the property instead of stalling CI.
const CASE_LIMIT: Duration = Duration::from_secs(10);

/// Run `test` on `cases` values of `strategy` (or `TILUS_FUZZ_CASES`), from the seeded RNG.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: Debug,
{
    let seed = env_number("TILUS_FUZZ_SEED").unwrap_or(BASE_SEED);
    let cases = env_number("TILUS_FUZZ_CASES").map_or(cases, |n| n as u32);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(name.len() as u64).to_le_bytes());
    for (i, b) in name.bytes().enumerate() {
        key[16 + i % 16] ^= b;
    }
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let start = Instant::now();
    ACCEPTED.with(|a| a.set(0));
    let result = runner.run(&strategy, |value| {
        let t = Instant::now();
        test(value)?;
        let took = t.elapsed();
        prop_assert!(took < CASE_LIMIT, "one case took {took:?}");
        Ok(())
    });
    let accepted = ACCEPTED.with(|a| a.get());
    // Straight to stderr, past libtest's capture, so the counts show in every run.
    let _ = writeln!(
        std::io::stderr(),
        "fuzz_host {name}: {cases} cases ({accepted} accepted) in {:.1} s (seed {seed})",
        start.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{name} (seed {seed}; rerun with TILUS_FUZZ_SEED={seed}): {e}");
    }
    assert!(
        cases < 20 || (accepted > 0 && accepted < cases as usize),
        "{name}: {accepted} of {cases} cases accepted; the generator is degenerate"
    );
}

thread_local! {
    /// Cases of the running property in which the API accepted its input (see [`accept`]).
    static ACCEPTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Count the current case as accepted: the API returned `Ok`. Each property must see both
/// outcomes, so that neither its generator nor its assertions are vacuous.
fn accept() {
    ACCEPTED.with(|a| a.set(a.get() + 1));
}

/// `message` is non-empty and names one of `names` (as `` `name` ``).
fn names_one_of(message: &str, names: &[&str]) -> Result<(), TestCaseError> {
    prop_assert!(!message.trim().is_empty(), "empty error message");
    prop_assert!(
        names.iter().any(|n| message.contains(&format!("`{n}`"))),
        "the error names none of {names:?}: {message}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Strategies.

/// Any `DType` value, valid or hand-built invalid.
fn any_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        2 => prop::sample::select(DType::all().collect::<Vec<_>>()),
        1 => any::<u8>().prop_map(DType::UInt),
        1 => any::<u8>().prop_map(DType::Int),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(exp, man)| DType::Float { exp, man }),
        1 => (0u8..=8, 0u8..=8).prop_map(|(exp, man)| DType::Float { exp, man }),
    ]
}

/// A size: mostly small, sometimes zero, a power-of-two boundary, or anything.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 1usize..=8,
        1 => Just(0usize),
        1 => prop::sample::select(vec![
            16usize,
            65536,
            i32::MAX as usize,
            1 << 32,
            usize::MAX / 2 + 1,
            usize::MAX,
        ]),
        1 => any::<usize>(),
    ]
}

/// An `f32` from every class: ordinary, zero, tiny, huge, subnormal, NaN, infinite.
fn weight_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -4.0f32..4.0,
        1 => prop::sample::select(vec![
            0.0f32,
            -0.0,
            1e-10,
            -1e-10,
            1e6,
            -1e6,
            65504.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]),
        1 => any::<f32>(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Data types and storage.

#[test]
fn dtype_values_and_storage() {
    let strategy = (
        any_dtype(),
        any::<u32>(),
        weight_value(),
        prop::collection::vec(any::<u32>(), 0..40),
        prop::collection::vec(any::<u8>(), 0..40),
        size(),
    );
    fuzz(
        "dtype",
        20000,
        strategy,
        |(d, code, value, codes, bytes, len)| {
            // The infallible accessors never panic, whatever the value.
            let _ = (
                d.bits(),
                d.kind(),
                d.is_sub_byte(),
                d.code_mask(),
                d.is_signed(),
            );
            let _ = (d.max_value(), d.min_value(), d.exponent_bias(), d.has_nan());
            let _ = (d.decode(code), d.to_string(), format!("{d:?}"));
            prop_assert_eq!(d.validate().is_ok(), d.is_valid());
            let json = serde_json::to_string(&d).expect("every DType serializes");
            let back = serde_json::from_str::<DType>(&json);
            let need = storage::try_packed_len(d, len);
            let pack = storage::try_pack(d, &codes);
            let unpack = storage::try_unpack(d, &bytes, len.min(1000));
            match d.validate() {
                Err(e) => {
                    prop_assert!(e.to_string().contains("is not a valid data type"), "{e}");
                    prop_assert!(d.try_decode(code).is_err());
                    prop_assert!(d.encode(value).is_err());
                    prop_assert!(d.values().is_none());
                    prop_assert!(back.is_err(), "deserialized the invalid {d:?}");
                    for e in [need.map(drop), pack.map(drop), unpack.map(drop)] {
                        let e = e.expect_err("storage accepted an invalid type");
                        prop_assert!(e.to_string().starts_with("argument `dtype`"), "{e}");
                    }
                }
                Ok(()) => {
                    accept();
                    prop_assert_eq!(d.to_string().parse::<DType>(), Ok(d));
                    prop_assert_eq!(back.ok(), Some(d));
                    let v = d.try_decode(code).expect("a valid type decodes");
                    prop_assert_eq!(v.to_bits(), d.decode(code).to_bits());
                    match d.encode(value) {
                        Err(e) => {
                            prop_assert!(value.is_nan(), "encode({value}) failed: {e}");
                            prop_assert!(e.to_string().contains("NaN"), "{e}");
                        }
                        Ok(c) => {
                            prop_assert!(!value.is_nan(), "NaN encoded as {c}");
                            prop_assert_eq!(
                                c & !d.code_mask(),
                                0,
                                "code {:#x} wider than {}",
                                c,
                                d
                            );
                            let back = d.decode(c);
                            // Saturation: only f32 (the identity) gives back an infinity.
                            prop_assert!(
                                back.is_finite() || (d == DType::F32 && value.is_infinite()),
                                "{d}: encode({value}) = {c:#x} decodes to {back}"
                            );
                        }
                    }
                    match d.values() {
                        Some(vs) => prop_assert_eq!(vs.len() as u64, 1u64 << d.bits()),
                        None => prop_assert!(d.bits() > 8),
                    }
                    match need {
                        Ok(n) => prop_assert_eq!(
                            Some(n),
                            len.checked_mul(d.bits() as usize).map(|b| b.div_ceil(8))
                        ),
                        Err(e) => {
                            prop_assert!(len.checked_mul(d.bits() as usize).is_none());
                            names_one_of(&e.to_string(), &["len"])?;
                        }
                    }
                    let packed = pack.expect("a valid type packs");
                    prop_assert_eq!(packed.len(), storage::packed_len(d, codes.len()));
                    let masked: Vec<u32> = codes.iter().map(|c| c & d.code_mask()).collect();
                    prop_assert_eq!(storage::try_unpack(d, &packed, codes.len()), Ok(masked));
                    let need = storage::packed_len(d, len.min(1000));
                    match unpack {
                        Ok(v) => {
                            prop_assert!(bytes.len() >= need);
                            prop_assert_eq!(v.len(), len.min(1000));
                        }
                        Err(e) => {
                            prop_assert!(bytes.len() < need);
                            names_one_of(&e.to_string(), &["bytes"])?;
                        }
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn dtype_names() {
    let number = || {
        prop_oneof![
            "[0-9]{1,3}",
            Just("4294967296".to_string()),
            Just("18446744073709551617".to_string()),
            "[0-9]{20,40}",
            Just(String::new()),
        ]
    };
    let names = prop_oneof![
        2 => any::<String>(),
        2 => "[uifbe0-9m+\\-_ ]{0,12}",
        2 => (prop::sample::select(vec!["u", "i", "f", "bf", "U", "F", "ｕ"]), number())
            .prop_map(|(p, n)| format!("{p}{n}")),
        3 => (number(), number(), number()).prop_map(|(n, e, m)| format!("f{n}e{e}m{m}")),
        1 => prop::sample::select(DType::all().map(|t| t.to_string()).collect::<Vec<_>>()),
    ];
    fuzz("dtype names", 30000, names, |name| {
        match name.parse::<DType>() {
            // Only canonical spellings parse, so the name is exactly the type's Display.
            Ok(t) => {
                accept();
                prop_assert!(t.is_valid(), "{name} parsed to invalid {t:?}");
                prop_assert_eq!(t.to_string(), name);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("unknown data type `"), "{msg}");
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Layouts.

/// A layout expression from the grammar, with small and huge extents.
fn layout_expr() -> impl Strategy<Value = String> {
    let extent = prop_oneof![
        24 => (1usize..=8).prop_map(|n| n.to_string()),
        1 => Just("0".to_string()),
        1 => prop::sample::select(vec![
            "65536",
            "2147483647",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999999",
            "-1",
            "",
        ])
        .prop_map(String::from),
    ];
    let name = prop_oneof![
        12 => prop::sample::select(vec!["local", "spatial", "column_local", "column_spatial"]),
        1 => prop::sample::select(vec!["reduce", "lοcal", "Local", ""]),
    ];
    let prim = (name, prop::collection::vec(extent, 1..4))
        .prop_map(|(n, e)| format!("{n}({})", e.join(",")));
    prim.prop_recursive(6, 48, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.{b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} ∘ {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) / ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}/{b}")),
            inner.clone().prop_map(|a| format!("({a})")),
            (inner, prop::collection::vec(0usize..4, 0..3)).prop_map(|(a, d)| {
                let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                format!("reduce({a}, [{}])", d.join(","))
            }),
        ]
    })
}

#[test]
fn layout_parser() {
    let text = prop_oneof![
        1 => any::<String>(),
        2 => "[a-z_()\\[\\],.∘/ 0-9]{0,48}",
        4 => layout_expr(),
        // A grammar expression with one character dropped or inserted.
        2 => (layout_expr(), any::<prop::sample::Index>(), "[(),.∘/0-9é]")
            .prop_map(|(s, at, c)| {
                let mut chars: Vec<char> = s.chars().collect();
                let i = at.index(chars.len() + 1);
                if i < chars.len() && c == "é" {
                    chars.remove(i);
                } else {
                    chars.splice(i..i, c.chars());
                }
                chars.into_iter().collect()
            }),
    ];
    fuzz("layout parse", 20000, text, |text| {
        match parse(&text) {
            Ok(l) => {
                accept();
                prop_assert!(l.num_threads() >= 1 && l.num_locals() >= 1);
                prop_assert!(l.shape().iter().all(|&n| n >= 1), "{:?}", l.shape());
                let cells = l.num_threads().checked_mul(l.num_locals());
                prop_assert!(cells.is_some(), "{text}: thread x local count overflows");
                // The printed form parses back to the same function (== is semantic).
                let expr = l.to_expr();
                let again = parse(&expr);
                prop_assert_eq!(again.as_ref(), Ok(&l), "to_expr gave {}", expr);
            }
            Err(e) => {
                prop_assert!(!e.message.trim().is_empty());
                let s = &e.span;
                prop_assert!(
                    s.start <= s.end
                        && s.end <= text.len()
                        && text.is_char_boundary(s.start)
                        && text.is_char_boundary(s.end),
                    "span {s:?} of {text:?}"
                );
            }
        }
        Ok(())
    });
}

fn primitive() -> impl Strategy<Value = Primitive> {
    prop::sample::select(vec![
        Primitive::Local,
        Primitive::Spatial,
        Primitive::ColumnLocal,
        Primitive::ColumnSpatial,
    ])
}

/// A layout built by the fallible constructors, or the error they gave.
fn built_layout() -> impl Strategy<Value = (Primitive, Vec<usize>, Primitive, Vec<usize>)> {
    (
        primitive(),
        prop::collection::vec(size(), 0..4),
        primitive(),
        prop::collection::vec(size(), 0..4),
    )
}

#[test]
fn layout_algebra() {
    let strategy = (
        built_layout(),
        prop::collection::vec(prop_oneof![0usize..4, any::<usize>()], 0..4),
        prop_oneof![0usize..8, any::<usize>()],
        (size(), size()),
    );
    fuzz(
        "layout algebra",
        20000,
        strategy,
        |((fk, fs, gk, gs), dims, rank, (inner, outer))| {
            let f = Layout::primitive(fk, &fs);
            let g = Layout::primitive(gk, &gs);
            for (shape, l) in [(&fs, &f), (&gs, &g)] {
                match l {
                    Ok(l) => prop_assert_eq!(l.shape(), &shape[..]),
                    Err(e) => prop_assert!(
                        shape.contains(&0)
                            || shape
                                .iter()
                                .try_fold(1usize, |a, &b| a.checked_mul(b))
                                .is_none(),
                        "{shape:?} rejected: {e}"
                    ),
                }
            }
            let (Ok(f), Ok(g)) = (f, g) else {
                return Ok(());
            };
            let small = |l: &Layout| l.num_threads().saturating_mul(l.num_locals()) <= 4096;
            match f.compose(&g) {
                Ok(h) => {
                    accept();
                    prop_assert_eq!(h.num_threads(), f.num_threads() * g.num_threads());
                    prop_assert_eq!(h.num_locals(), f.num_locals() * g.num_locals());
                    // Division undoes composition: (f ∘ g) / g == f (at the common rank).
                    let q = h
                        .divide(&g)
                        .map_err(|e| TestCaseError::fail(format!("({f} . {g}) / {g}: {e}")))?;
                    let back = q
                        .compose(&g)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(
                        back == h,
                        "({f} . {g}) / {g} = {q}, which composes to {back}"
                    );
                    if small(&h) {
                        prop_assert!(back.same_function(&h));
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            let _ = f.divide(&g);
            for result in [
                f.reduce(&dims),
                f.unsqueeze(&dims),
                f.broadcast_to_rank(rank),
                f.swap_inner_locals(inner, outer),
            ] {
                match result {
                    Ok(l) => prop_assert_eq!(l.num_threads(), f.num_threads()),
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
            }
            if small(&f) {
                let _ = (f.to_map(), f.to_expr(), f.to_string());
            }
            Ok(())
        },
    );
}

#[test]
fn layout_from_parts() {
    let mode = (0usize..4, size()).prop_map(|(dim, size)| Mode {
        dim,
        size,
        stride: 0,
    });
    let digit = prop_oneof![
        (0usize..6).prop_map(Digit::Mode),
        size().prop_map(Digit::Replicated),
    ];
    let strategy = (
        prop::collection::vec(size(), 0..4),
        prop::collection::vec(mode, 0..6),
        prop::collection::vec(digit, 0..4),
        prop::collection::vec(0usize..6, 0..4),
    );
    fuzz(
        "layout from_parts",
        10000,
        strategy,
        |(shape, modes, spatial, local)| {
            match Layout::from_parts(&shape, &modes, &spatial, &local) {
                Ok(l) => {
                    accept();
                    prop_assert_eq!(l.shape(), &shape[..]);
                    let again = Layout::from_parts(
                        l.shape(),
                        l.modes(),
                        l.spatial_digits(),
                        l.local_digits(),
                    );
                    prop_assert_eq!(again.as_ref(), Ok(&l));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Quantization, re-layout, the CPU forward pass.

/// The arguments of `QuantizedWeight::quantize`.
#[derive(Debug, Clone)]
struct QuantInput {
    weight: Vec<f32>,
    k: usize,
    n: usize,
    dtype: DType,
    group: Group,
    scale_dtype: DType,
    asymmetric: bool,
}

fn quant_input() -> impl Strategy<Value = QuantInput> {
    let dim = prop_oneof![8 => 1usize..=12, 1 => Just(0usize), 1 => size()];
    let group = prop_oneof![
        2 => Just(Group::PerChannel),
        1 => Just(Group::Rows(0)),
        1 => Just(Group::Rows(1)),
        3 => (1usize..=13).prop_map(Group::Rows),
        1 => any::<usize>().prop_map(Group::Rows),
    ];
    let dtype = prop_oneof![
        4 => prop::sample::select(weight_types()),
        1 => any_dtype(),
    ];
    let scale = prop_oneof![
        3 => Just(DType::F16),
        2 => Just(DType::BF16),
        1 => any_dtype(),
    ];
    (
        dim.clone(),
        dim,
        group,
        dtype,
        scale,
        prop::bool::weighted(0.2),
        0u8..10,
    )
        .prop_flat_map(|(k, n, group, dtype, scale_dtype, asymmetric, len)| {
            // Mostly the right length; sometimes one off, or none at all for huge shapes.
            let exact = k.checked_mul(n).filter(|&l| l <= 256);
            let len = match (exact, len) {
                (Some(l), 0) => l + 1,
                (Some(l), 1) => l.saturating_sub(1),
                (Some(l), _) => l,
                (None, l) => l as usize,
            };
            // Mostly ordinary values; sometimes any class (NaN, infinities, huge, tiny) anywhere.
            let weight = prop_oneof![
                3 => prop::collection::vec(-4.0f32..4.0, len),
                1 => prop::collection::vec(weight_value(), len),
            ];
            weight.prop_map(move |weight| QuantInput {
                weight,
                k,
                n,
                dtype,
                group,
                scale_dtype,
                asymmetric,
            })
        })
}

const QUANT_ARGS: &[&str] = &[
    "weight",
    "k",
    "n",
    "dtype",
    "group",
    "scale_dtype",
    "asymmetric",
];

fn quantize(q: &QuantInput) -> Result<QuantizedWeight, tilus::quant::QuantError> {
    QuantizedWeight::quantize(
        &q.weight,
        q.k,
        q.n,
        q.dtype,
        q.group,
        q.scale_dtype,
        q.asymmetric,
    )
}

#[test]
fn quantize_any_input() {
    fuzz("quantize", 10000, quant_input(), |q| {
        match quantize(&q) {
            Ok(w) => {
                accept();
                prop_assert!(w.check().is_ok(), "{:?}", w.check());
                prop_assert_eq!(w.codes.len(), storage::packed_len(q.dtype, q.k * q.n));
                let groups = q.k / w.group_rows();
                prop_assert_eq!(w.scales.len(), groups * q.n);
                prop_assert!(w.scales.iter().all(|s| s.is_finite() && *s >= 0.0));
                let deq = w.dequantize();
                prop_assert_eq!(deq.len(), q.k * q.n);
                prop_assert!(
                    deq.iter().all(|v| v.is_finite()),
                    "non-finite dequantized value"
                );
            }
            Err(e) => names_one_of(&e.to_string(), QUANT_ARGS)?,
        }
        Ok(())
    });
}

/// The hostile inputs that issue 13 lists, one by one.
#[test]
fn quantize_known_hostile_inputs() {
    let q = |w: &[f32], k, n, d: &str, g, s| {
        QuantizedWeight::quantize(w, k, n, d.parse().unwrap(), g, s, false)
    };
    let e = q(&[], 1 << 32, 1 << 32, "i4", Group::Rows(128), DType::F16).unwrap_err();
    assert!(e.to_string().contains("`k`, `n`"), "{e}");
    let e = q(&[], 1 << 32, 1 << 31, "i4", Group::PerChannel, DType::F16).unwrap_err();
    assert!(e.to_string().contains("`weight`"), "{e}");
    // A group of zeros and one tiny value: a subnormal scale, never 0 with a non-zero weight.
    let mut w = vec![0.0f32; 64];
    w[5] = 1e-10;
    for d in ["i4", "u4", "f4e2m1", "f8e4m3"] {
        for s in [DType::F16, DType::BF16] {
            let qw = q(&w, 8, 8, d, Group::Rows(8), s).unwrap();
            assert!(qw.dequantize().iter().all(|v| v.is_finite()), "{d} {s}");
            assert!(qw.scales.iter().all(|s| s.is_finite()));
        }
    }
    // Values near 1e6 overflow an f16 scale for narrow types: a named error; bf16 holds them.
    let w = vec![1e6f32; 64];
    let e = q(&w, 8, 8, "i2", Group::Rows(8), DType::F16).unwrap_err();
    assert!(e.to_string().contains("overflows f16"), "{e}");
    assert!(q(&w, 8, 8, "i2", Group::Rows(8), DType::BF16).is_ok());
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut w = vec![1.0f32; 64];
        w[9] = bad;
        let e = q(&w, 8, 8, "i4", Group::PerChannel, DType::F16).unwrap_err();
        assert!(e.to_string().contains("row 1, column 1"), "{e}");
    }
    // A group whose scale fits f16 but whose codes dequantize past it (8 * 60000 / 7): the
    // kernels' f16 arithmetic would give infinities. An error naming the group; bf16 is fine.
    let mut w = vec![1.0f32; 64];
    w[8 * 3 + 5] = -60000.0;
    let e = q(&w, 8, 8, "i4", Group::Rows(4), DType::F16).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("rows 0..4, column 5") && msg.contains("overflow to infinity"),
        "{msg}"
    );
    assert!(q(&w, 8, 8, "i4", Group::Rows(4), DType::BF16).is_ok());
    assert!(q(&w, 8, 8, "i4", Group::Rows(4), DType::F16)
        .is_err_and(|e| e.to_string().contains("argument `weight`")));
    // Hand-built weights: a non-finite scale or zero point, or a scale whose codes dequantize
    // past f16, is an error naming the field.
    let good = q(&weight_from(7, 64), 8, 8, "u4", Group::Rows(4), DType::F16).unwrap();
    let mut w = good.clone();
    w.scales[3] = f32::INFINITY;
    assert!(w
        .check()
        .unwrap_err()
        .to_string()
        .contains("field `scales`"));
    let mut w = good.clone();
    w.zeros.as_mut().unwrap()[5] = f32::NAN;
    assert!(w.check().unwrap_err().to_string().contains("field `zeros`"));
    let mut w = good.clone();
    w.scales[0] = 10000.0; // u4 codes 0..=15 minus the midpoint 7.5: 7.5 * 10000 > 65504
    let e = w.check().unwrap_err().to_string();
    assert!(e.contains("field `scales`") && e.contains("group 0"), "{e}");
    assert!(good.check().is_ok());
}

/// A weight of `k x n` pseudo-random values in [-1, 1) from `seed`.
fn weight_from(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// What to break in a hand-built `QuantizedWeight` (its fields are public).
#[derive(Debug, Clone, Copy)]
enum Breakage {
    None,
    CodesShort,
    CodesLong,
    K(usize),
    N(usize),
    DType(DType),
    ScalesShort,
    ZerosFlip,
}

fn config_strategy() -> impl Strategy<Value = QMatmulConfig> {
    let pick = |v: Vec<usize>| prop::sample::select(v);
    (
        (
            prop_oneof![4 => prop::sample::select(weight_types()), 1 => any_dtype()],
            prop_oneof![3 => Just(DType::F16), 2 => Just(DType::BF16), 1 => any_dtype()],
            prop_oneof![
                Just(None),
                Just(Some(0)),
                Just(Some(32)),
                Just(Some(64)),
                Just(Some(128)),
                any::<usize>().prop_map(Some)
            ],
            any::<bool>(),
        ),
        (
            pick(vec![0, 1, 16, 32, 64, usize::MAX]),
            pick(vec![0, 8, 32, 64, 96, 128, 256, 1 << 40]),
            pick(vec![0, 16, 32, 64, 128, 256, usize::MAX]),
            pick(vec![0, 1, 2, 3, 4, 8, 1 << 33]),
            pick(vec![0, 1, 2, 3, 4, 1 << 40]),
            pick(vec![0, 1, 2, 4, usize::MAX]),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (wdtype, adtype, group_rows, has_zeros),
                (bm, bn, bk, warps, stages, split_k, gemm),
            )| {
                QMatmulConfig {
                    wdtype,
                    adtype,
                    group_rows,
                    has_zeros,
                    bm,
                    bn,
                    bk,
                    warps,
                    stages,
                    split_k,
                    method: if gemm {
                        QMatmulMethod::DequantizeThenGemm
                    } else {
                        QMatmulMethod::Fused
                    },
                    stream_k: 0,
                    blocks_per_sm: 1,
                    specialize: false,
                    stage_tiles: 1,
                }
            },
        )
}

/// The library's default configuration for a weight type with one or two fields changed:
/// mostly valid, so the builders get past the first check.
fn near_default_config() -> impl Strategy<Value = QMatmulConfig> {
    let field = (
        0usize..9,
        prop::sample::select(vec![1usize, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512]),
    );
    (
        prop::sample::select(weight_types()),
        prop::sample::select(vec![DType::F16, DType::BF16]),
        prop::sample::select(vec![None, Some(32usize), Some(64), Some(128)]),
        prop::collection::vec(field, 0..3),
    )
        .prop_map(|(wdtype, adtype, group, changes)| {
            let mut c =
                QMatmulConfig::default_for(wdtype, adtype, group, matches!(wdtype, DType::UInt(_)));
            for (f, v) in changes {
                match f {
                    0 => c.bm = v,
                    1 => c.bn = v,
                    2 => c.bk = v,
                    3 => c.warps = v,
                    4 => c.stages = v,
                    5 => c.split_k = v,
                    6 => c.blocks_per_sm = v,
                    7 => c.method = QMatmulMethod::Lut,
                    _ => c.method = QMatmulMethod::DequantizeThenGemm,
                }
            }
            c
        })
}

const CONFIG_ARGS: &[&str] = &[
    "wdtype",
    "adtype",
    "group_rows",
    "has_zeros",
    "bm",
    "bn",
    "bk",
    "warps",
    "stages",
    "split_k",
    "method",
    "stream_k",
    "blocks_per_sm",
    "weight",
    "bytes",
    "k",
    "n",
    "m",
];

#[test]
fn relayout_any_config() {
    let strategy = (
        prop::sample::select(weight_types()),
        prop::sample::select(vec![16usize, 32, 64, 128, 256]),
        prop::sample::select(vec![32usize, 64, 96, 128, 256]),
        any::<u64>(),
        prop_oneof![
            3 => Just(None::<QMatmulConfig>),
            1 => config_strategy().prop_map(Some),
            2 => near_default_config().prop_map(Some),
        ],
        prop_oneof![
            6 => Just(Breakage::None),
            1 => Just(Breakage::CodesShort),
            1 => Just(Breakage::CodesLong),
            1 => size().prop_map(Breakage::K),
            1 => size().prop_map(Breakage::N),
            1 => any_dtype().prop_map(Breakage::DType),
            1 => Just(Breakage::ScalesShort),
            1 => Just(Breakage::ZerosFlip),
        ],
    );
    fuzz(
        "relayout",
        640,
        strategy,
        |(dtype, k, n, seed, config, breakage)| {
            let unsigned = matches!(dtype, DType::UInt(_));
            let mut w = QuantizedWeight::quantize(
                &weight_from(seed, k * n),
                k,
                n,
                dtype,
                Group::PerChannel,
                DType::F16,
                unsigned,
            )
            .expect("an ordinary weight quantizes");
            // Either a configuration made for the shape, or an arbitrary one.
            let config = match config {
                Some(c) => c,
                None => match QMatmulConfig::for_shape(dtype, DType::F16, None, unsigned, n, k) {
                    Ok(c) => c,
                    Err(e) => return names_one_of(&e.to_string(), &["n", "k"]),
                },
            };
            match breakage {
                Breakage::None => {}
                Breakage::CodesShort => {
                    w.codes.pop();
                }
                Breakage::CodesLong => w.codes.push(0),
                Breakage::K(k) => w.k = k,
                Breakage::N(n) => w.n = n,
                Breakage::DType(d) => w.dtype = d,
                Breakage::ScalesShort => {
                    w.scales.pop();
                }
                Breakage::ZerosFlip => {
                    w.zeros = match w.zeros {
                        Some(_) => None,
                        None => Some(vec![0.0; w.scales.len()]),
                    }
                }
            }
            match relayout(&w, &config) {
                Ok(bytes) => {
                    accept();
                    prop_assert_eq!(bytes.len(), w.codes.len());
                    let back = relayout_inverse(&bytes, &config, w.k, w.n)
                        .map_err(|e| TestCaseError::fail(format!("inverse: {e}")))?;
                    // The kernels read f3e1m1 as i3, by value: its negative zero comes back
                    // as `+0`, every other code as itself.
                    let same = back == w.codes
                        || (w.dtype == "f3e1m1".parse().unwrap()
                            && storage::unpack(w.dtype, &w.codes, w.k * w.n)
                                .iter()
                                .zip(storage::unpack(w.dtype, &back, w.k * w.n))
                                .all(|(&a, b)| b == a || (a == 0b100 && b == 0)));
                    prop_assert!(same, "relayout_inverse(relayout(w)) != w.codes");
                }
                Err(e) => names_one_of(&e.to_string(), CONFIG_ARGS)?,
            }
            // The inverse with a buffer of any length and any shape.
            let junk = vec![0u8; (seed % 300) as usize];
            if let Err(e) = relayout_inverse(&junk, &config, w.k, w.n) {
                names_one_of(&e.to_string(), CONFIG_ARGS)?;
            }
            Ok(())
        },
    );
}

#[test]
fn qmatmul_config_checks() {
    let config = prop_oneof![1 => config_strategy(), 1 => near_default_config()];
    let strategy = (config, size(), size(), size());
    fuzz("qmatmul config", 5000, strategy, |(config, m, n, k)| {
        match config.tiling() {
            Ok(_) => accept(),
            Err(e) => names_one_of(&e.to_string(), CONFIG_ARGS)?,
        }
        if let Err(e) = config.check_shape(m, n, k) {
            names_one_of(&e.to_string(), CONFIG_ARGS)?;
        }
        Ok(())
    });
    // Building the programs (what `tilus emit qmatmul` does) costs more: fewer cases.
    let strategy = prop_oneof![1 => config_strategy(), 3 => near_default_config()];
    fuzz("qmatmul build", 200, strategy, |config| {
        match qmatmul::build(&config) {
            Ok(kernel) => {
                prop_assert!(config.tiling().is_ok() && !kernel.main.name.is_empty());
                accept();
            }
            Err(e) => names_one_of(&e.to_string(), CONFIG_ARGS)?,
        }
        Ok(())
    });
}

#[test]
fn forward_cpu_tiny_layers() {
    let strategy = (
        prop::sample::select(weight_types()),
        prop_oneof![4 => prop::sample::select(vec![16usize, 32, 64]), 1 => prop::sample::select(vec![0usize, 8, 48])],
        prop_oneof![4 => Just(32usize), 1 => prop::sample::select(vec![0usize, 40, 64])],
        prop_oneof![
            3 => Just(Group::PerChannel),
            2 => Just(Group::Rows(16)),
            1 => (0usize..40).prop_map(Group::Rows),
        ],
        any::<bool>(),
        prop_oneof![6 => 0usize..3, 1 => Just(1usize << 31), 1 => Just(usize::MAX)],
        prop_oneof![6 => Just(0isize), 1 => Just(-1isize), 1 => Just(1isize)],
        any::<u64>(),
    );
    fuzz(
        "forward_cpu",
        96,
        strategy,
        |(wdtype, k, n, group, bf, m, off, seed)| {
            let adtype = if bf { DType::BF16 } else { DType::F16 };
            let layer = match QuantizedLinear::new(
                &weight_from(seed, k * n),
                k,
                n,
                wdtype,
                group,
                adtype,
            ) {
                Ok(layer) => layer,
                Err(e) => {
                    return names_one_of(
                        &e.to_string(),
                        CONFIG_ARGS
                            .iter()
                            .chain(QUANT_ARGS)
                            .copied()
                            .collect::<Vec<_>>()
                            .as_slice(),
                    )
                }
            };
            // x has m * k values, or one more or fewer; huge m gets an empty x.
            let len = m
                .checked_mul(k)
                .filter(|&l| l <= 1 << 16)
                .map_or(0, |l| l.saturating_add_signed(off));
            let x = weight_from(seed ^ 0x55, len);
            let y = if bf {
                let x: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
                layer.forward_cpu(&x, m).map(|y| y.len())
            } else {
                let x: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
                layer.forward_cpu(&x, m).map(|y| y.len())
            };
            match y {
                Ok(len) => {
                    accept();
                    prop_assert_eq!(len, m * n);
                }
                Err(e) => names_one_of(&e.to_string(), &["x", "m", "n", "k"])?,
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Checkpoint import (GPTQ / AWQ from safetensors).

use safetensors::tensor::TensorView;
use safetensors::Dtype as StDtype;
use tilus::checkpoint::{Checkpoint, GptqZeros, ImportOptions};

/// One tensor of a generated checkpoint: `None` leaves it out.
#[derive(Debug, Clone)]
struct CkptTensor {
    suffix: &'static str,
    dtype: StDtype,
    shape: Vec<usize>,
    seed: u64,
    /// g_idx only: `i / g`, a shuffled valid one, or random entries.
    g_idx_kind: u8,
}

#[derive(Debug, Clone)]
struct CkptInput {
    group: usize,
    tensors: Vec<CkptTensor>,
    bits_option: Option<usize>,
    zeros: Option<GptqZeros>,
    /// Garbage instead of a safetensors file.
    garbage: Option<Vec<u8>>,
}

const CKPT_DTYPES: &[StDtype] = &[
    StDtype::I32,
    StDtype::U32,
    StDtype::F16,
    StDtype::BF16,
    StDtype::F32,
    StDtype::I64,
    StDtype::U8,
];

fn ckpt_input() -> impl Strategy<Value = CkptInput> {
    (
        any::<bool>(),
        prop::sample::select(vec![2usize, 3, 4, 5, 8]),
        1usize..=3,                                    // k in units of 32
        1usize..=3,                                    // n in units of 32
        prop::sample::select(vec![8usize, 16, 32, 0]), // group (0: per channel)
        prop::collection::vec((0u8..8, 0u8..8, any::<u64>()), 4),
        prop::option::of(prop::sample::select(vec![2usize, 3, 4, 5, 8, 0, 33])),
        prop::option::of(prop::sample::select(vec![GptqZeros::V1, GptqZeros::V2])),
        prop::option::weighted(0.05, prop::collection::vec(any::<u8>(), 0..64)),
        0u8..3,
    )
        .prop_map(
            |(awq, bits, ku, nu, g, muts, bits_option, zeros, garbage, g_idx_kind)| {
                let (k, n) = (32 * ku, 32 * nu);
                let group = if g == 0 { k } else { g };
                let groups = k / group;
                let shapes: [(&'static str, StDtype, Vec<usize>); 4] = if awq {
                    [
                        ("qweight", StDtype::I32, vec![k, n * bits / 32]),
                        ("qzeros", StDtype::I32, vec![groups, n * bits / 32]),
                        ("scales", StDtype::F16, vec![groups, n]),
                        ("g_idx", StDtype::I32, vec![k]),
                    ]
                } else {
                    [
                        ("qweight", StDtype::I32, vec![k * bits / 32, n]),
                        ("qzeros", StDtype::I32, vec![groups, n * bits / 32]),
                        ("scales", StDtype::F16, vec![groups, n]),
                        ("g_idx", StDtype::I32, vec![k]),
                    ]
                };
                let tensors = shapes
                    .into_iter()
                    .zip(muts)
                    .filter_map(|((suffix, dtype, mut shape), (what, arg, seed))| {
                        // Mostly as the format says; now and then broken one way.
                        let dtype = match what {
                            0 => CKPT_DTYPES[arg as usize % CKPT_DTYPES.len()],
                            _ => dtype,
                        };
                        match what {
                            1 => {
                                let d = arg as usize % shape.len();
                                shape[d] = (shape[d] + arg as usize % 3).saturating_sub(1);
                            }
                            2 => shape.push(1 + arg as usize % 2),
                            3 if suffix != "qweight" || arg == 0 => return None,
                            _ => {}
                        }
                        if suffix == "g_idx" && (awq || arg % 2 == 0) && what != 1 {
                            return None;
                        }
                        Some(CkptTensor {
                            suffix,
                            dtype,
                            shape,
                            seed,
                            g_idx_kind,
                        })
                    })
                    .collect();
                CkptInput {
                    group,
                    tensors,
                    bits_option,
                    zeros,
                    garbage,
                }
            },
        )
}

fn ckpt_bytes(c: &CkptInput, prefix: &str) -> Vec<u8> {
    if let Some(g) = &c.garbage {
        return g.clone();
    }
    let data: Vec<Vec<u8>> = c
        .tensors
        .iter()
        .map(|t| {
            let len = t.shape.iter().product::<usize>() * t.dtype.bitsize() / 8;
            if t.suffix == "g_idx" && t.dtype == StDtype::I32 && t.shape.len() == 1 {
                let k = t.shape[0];
                let g = c.group.max(1);
                let mut v: Vec<i32> = (0..k).map(|i| (i / g) as i32).collect();
                match t.g_idx_kind {
                    0 => {}
                    1 => {
                        // A valid act-order g_idx: a seeded shuffle.
                        let mut s = t.seed | 1;
                        for i in (1..k).rev() {
                            s ^= s << 13;
                            s ^= s >> 7;
                            s ^= s << 17;
                            v.swap(i, (s % (i as u64 + 1)) as usize);
                        }
                    }
                    _ => {
                        let w = weight_from(t.seed, k);
                        for (x, r) in v.iter_mut().zip(w) {
                            *x = (r * 4.0) as i32 + (k / g) as i32 / 2;
                        }
                    }
                }
                return v.iter().flat_map(|x| x.to_le_bytes()).collect();
            }
            if t.suffix == "scales" && matches!(t.dtype, StDtype::F16) && t.seed % 4 != 0 {
                // Mostly finite scales, so that some layers import.
                let w = weight_from(t.seed, len / 2);
                return w
                    .iter()
                    .flat_map(|x| f16::from_f32(x.abs() / 8.0).to_bits().to_le_bytes())
                    .collect();
            }
            let mut s = t.seed | 1;
            (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 32) as u8
                })
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = c
        .tensors
        .iter()
        .zip(&data)
        .map(|(t, d)| {
            (
                format!("{prefix}.{}", t.suffix),
                TensorView::new(t.dtype, t.shape.clone(), d).expect("sizes match"),
            )
        })
        .collect();
    safetensors::serialize(views, None).expect("serializes")
}

#[test]
fn checkpoint_import_any_input() {
    let prefix = "model.layers.0.mlp.down_proj";
    let names: Vec<String> = ["qweight", "qzeros", "scales", "g_idx"]
        .iter()
        .map(|s| format!("{prefix}.{s}"))
        .chain([prefix.to_string()])
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    fuzz("checkpoint_import", 3000, ckpt_input(), |c| {
        let bytes = ckpt_bytes(&c, prefix);
        let ckpt = match Checkpoint::from_bytes(bytes) {
            Ok(ckpt) => ckpt,
            Err(e) => {
                prop_assert!(c.garbage.is_some(), "a serialized file did not parse: {e}");
                prop_assert!(e.to_string().contains("safetensors"), "{e}");
                return Ok(());
            }
        };
        let options = ImportOptions {
            gptq_zeros: c.zeros,
            bits: c.bits_option,
        };
        // The listing and every loader: Ok, or an error naming a tensor of the layer.
        if let Err(e) = ckpt.layers() {
            names_one_of(&e.to_string(), &names)?;
        }
        for result in [
            ckpt.load(prefix, &options),
            ckpt.load_gptq(prefix, &options),
            ckpt.load_awq(prefix, &options),
        ] {
            match result {
                Ok(layer) => {
                    accept();
                    let w = &layer.weight;
                    prop_assert!(w.check().is_ok(), "{:?}", w.check());
                    if let Some(p) = &layer.input_perm {
                        let mut seen = vec![false; w.k];
                        for &i in p {
                            prop_assert!(!seen[i as usize], "perm repeats {i}");
                            seen[i as usize] = true;
                        }
                    }
                    let deq = layer.dequantize_original_order();
                    prop_assert!(deq.iter().all(|v| v.is_finite()), "non-finite weight");
                }
                Err(e) => names_one_of(&e.to_string(), &names)?,
            }
        }
        Ok(())
    });
}
