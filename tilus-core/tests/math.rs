//! Elementwise math, bit operations, comparisons, `select`, `arange` and loads with a fill
//! value: the interpreter against f64 references written here, on fresh random inputs, and the
//! verifier's rejections (each naming the operand).

use rand::Rng;
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{
    CmpOp, ElementOp, Expr, MathOp, Operand, Program, ProgramBuilder, SpanId, VarId,
};
use tilus_core::layout::{parse, Layout};
use tilus_core::verify::{verify, Target};
use tilus_core::{storage, DType};

const N: usize = 256;

fn l(text: &str) -> Layout {
    parse(text).unwrap()
}

fn tile() -> Layout {
    l("spatial(4,8).local(2,4)")
}

/// `out = f(x, y)` over `[8, 32]` tiles of `dtype` (output dtype `out_dtype`).
fn program(
    dtype: DType,
    out_dtype: DType,
    f: impl FnOnce(&mut ProgramBuilder, VarId, VarId) -> VarId,
) -> Program {
    let mut b = ProgramBuilder::new("math", 32);
    let px = b.param_ptr("px", dtype, false);
    let py = b.param_ptr("py", dtype, false);
    let po = b.param_ptr("po", out_dtype, true);
    b.grid(vec![Expr::Int(1)]);
    let shape = vec![Expr::Int(8), Expr::Int(32)];
    let gx = b.view_global("gx", px, dtype, shape.clone());
    let gy = b.view_global("gy", py, dtype, shape.clone());
    let go = b.view_global("go", po, out_dtype, shape);
    let zero = vec![Expr::Int(0), Expr::Int(0)];
    let x = b.load_global("x", gx, tile(), zero.clone());
    let y = b.load_global("y", gy, tile(), zero.clone());
    let out = f(&mut b, x, y);
    b.store_global(out, go, zero);
    b.finish()
}

/// Random codes of `dtype` with values in `[lo, hi)`; never all zero.
fn random(dtype: DType, lo: f64, hi: f64) -> Vec<u32> {
    let mut rng = rand::rng();
    loop {
        let codes: Vec<u32> = (0..N)
            .map(|_| dtype.encode(rng.random_range(lo..hi) as f32).unwrap())
            .collect();
        if codes.iter().any(|&c| dtype.decode(c) != 0.0) {
            return codes;
        }
    }
}

fn exec(p: &Program, dtype: DType, out: DType, x: &[u32], y: &[u32]) -> Result<Vec<u32>, String> {
    let mut args = [
        Arg::Buffer(storage::pack(dtype, x)),
        Arg::Buffer(storage::pack(dtype, y)),
        Arg::Buffer(vec![0xff; storage::packed_len(out, N)]),
    ];
    run(p, &mut args).map_err(|e| e.to_string())?;
    match &args[2] {
        Arg::Buffer(b) => Ok(storage::unpack(out, b, N)),
        _ => unreachable!(),
    }
}

/// The reference, written from the definitions (gelu in its tanh form: the inputs stay where
/// `1 + tanh` loses nothing in f64).
fn reference(op: MathOp, x: f64) -> f64 {
    match op {
        MathOp::Exp => x.exp(),
        MathOp::Exp2 => 2f64.powf(x),
        MathOp::Log => x.ln(),
        MathOp::Log2 => x.ln() / std::f64::consts::LN_2,
        MathOp::Sqrt => x.sqrt(),
        MathOp::Rsqrt => x.sqrt().recip(),
        MathOp::Abs => x.abs(),
        MathOp::Tanh => x.tanh(),
        MathOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        MathOp::Silu => x / (1.0 + (-x).exp()),
        MathOp::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        MathOp::Sin => x.sin(),
        MathOp::Cos => x.cos(),
        MathOp::Floor => x.floor(),
        MathOp::Round => x.round_ties_even(),
        MathOp::Not | MathOp::Popc => unreachable!(),
    }
}

#[test]
fn float_math_matches_f64_reference() {
    for op in MathOp::ALL.into_iter().filter(|o| !o.is_integer()) {
        let (lo, hi) = match op {
            MathOp::Log | MathOp::Log2 | MathOp::Sqrt | MathOp::Rsqrt => (0.001, 50.0),
            MathOp::Gelu => (-2.5, 2.5),
            _ => (-6.0, 6.0),
        };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let p = program(dtype, dtype, |b, x, _| b.unary("z", op, x));
            let x = random(dtype, lo, hi);
            let out = exec(&p, dtype, dtype, &x, &x).unwrap_or_else(|e| panic!("{op:?}: {e}"));
            for (i, (&c, &o)) in x.iter().zip(&out).enumerate() {
                let v = dtype.decode(c);
                // Exact in f64, rounded to f32, then to the dtype.
                let want = dtype.encode(reference(op, v) as f32).unwrap();
                assert_eq!(
                    o,
                    want,
                    "{} {dtype} at {i}: x = {v}: got {}, want {}",
                    op.name(),
                    dtype.decode(o),
                    dtype.decode(want)
                );
            }
        }
    }
}

#[test]
fn nan_results_are_errors_naming_the_instruction() {
    for (op, v) in [
        (MathOp::Log, -1.0),
        (MathOp::Sqrt, -4.0),
        (MathOp::Rsqrt, -0.5),
    ] {
        let p = program(DType::F32, DType::F32, |b, x, _| b.unary("z", op, x));
        let x = vec![DType::F32.encode(v).unwrap(); N];
        let e = exec(&p, DType::F32, DType::F32, &x, &x).unwrap_err();
        assert!(e.contains(op.name()) && e.contains("NaN"), "{e}");
    }
    // Infinities are results like any other in f32, f16 and bf16 (IEEE arithmetic).
    let p = program(DType::F32, DType::F32, |b, x, _| {
        b.unary("z", MathOp::Exp, x)
    });
    let x = vec![DType::F32.encode(200.0).unwrap(); N];
    let out = exec(&p, DType::F32, DType::F32, &x, &x).unwrap();
    assert!(out.iter().all(|&c| DType::F32.decode(c) == f64::INFINITY));
    let p = program(DType::F16, DType::F16, |b, x, _| {
        b.unary("z", MathOp::Log, x)
    });
    let x = vec![0u32; N];
    let out = exec(&p, DType::F16, DType::F16, &x, &x).unwrap();
    assert!(out
        .iter()
        .all(|&c| DType::F16.decode(c) == f64::NEG_INFINITY));
    let p = program(DType::BF16, DType::BF16, |b, x, _| {
        b.unary("z", MathOp::Exp, x)
    });
    let x = vec![DType::BF16.encode(100.0).unwrap(); N];
    let out = exec(&p, DType::BF16, DType::BF16, &x, &x).unwrap();
    assert!(out.iter().all(|&c| DType::BF16.decode(c) == f64::INFINITY));
}

/// The two's-complement value of a code of an integer dtype.
fn int_value(dtype: DType, code: u32) -> i64 {
    dtype.decode(code) as i64
}

#[test]
fn not_popc_and_bit_operations_match_the_reference() {
    let mut rng = rand::rng();
    for dtype in [
        DType::Int(8),
        DType::UInt(8),
        DType::Int(4),
        DType::UInt(4),
        DType::UInt(32),
        DType::Int(32),
    ] {
        let bits = dtype.bits();
        let mask = dtype.code_mask() as i64;
        let x: Vec<u32> = (0..N)
            .map(|_| rng.random::<u32>() & dtype.code_mask())
            .collect();
        let y: Vec<u32> = (0..N)
            .map(|_| rng.random::<u32>() & dtype.code_mask())
            .collect();
        let amount: Vec<u32> = (0..N).map(|_| rng.random_range(0..bits)).collect();
        type Ref = fn(i64, i64, u32) -> i64;
        let cases: Vec<(&str, ElementOp, Ref)> = vec![
            ("and", ElementOp::And, |a, b, _| a & b),
            ("or", ElementOp::Or, |a, b, _| a | b),
            ("xor", ElementOp::Xor, |a, b, _| a ^ b),
        ];
        for (name, op, f) in cases {
            let p = program(dtype, dtype, |b, x, y| {
                b.binary("z", op, x, Operand::Tensor(y))
            });
            let out = exec(&p, dtype, dtype, &x, &y).unwrap();
            for i in 0..N {
                let want = f(int_value(dtype, x[i]), int_value(dtype, y[i]), bits) & mask;
                assert_eq!(out[i] as i64, want, "{name} {dtype} {} {}", x[i], y[i]);
            }
        }
        // Shifts by a tensor of amounts in 0..bits.
        let p = program(dtype, dtype, |b, x, y| {
            b.binary("z", ElementOp::Shl, x, Operand::Tensor(y))
        });
        let out = exec(&p, dtype, dtype, &x, &amount).unwrap();
        for i in 0..N {
            let want = ((x[i] as u64) << amount[i]) as i64 & mask;
            assert_eq!(out[i] as i64, want, "shl {dtype} {} {}", x[i], amount[i]);
        }
        let p = program(dtype, dtype, |b, x, y| {
            b.binary("z", ElementOp::Shr, x, Operand::Tensor(y))
        });
        let out = exec(&p, dtype, dtype, &x, &amount).unwrap();
        for i in 0..N {
            // Arithmetic for signed (on the value), logical for unsigned (on the code).
            let v = int_value(dtype, x[i]);
            let want = (v >> amount[i]) & mask;
            assert_eq!(out[i] as i64, want, "shr {dtype} {} {}", x[i], amount[i]);
        }
        let p = program(dtype, dtype, |b, x, _| b.unary("z", MathOp::Not, x));
        let out = exec(&p, dtype, dtype, &x, &x).unwrap();
        for i in 0..N {
            assert_eq!(out[i], !x[i] & dtype.code_mask(), "not {dtype}");
            if dtype.is_signed() {
                assert_eq!(int_value(dtype, out[i]), -int_value(dtype, x[i]) - 1);
            }
        }
        let p = program(dtype, dtype, |b, x, _| b.unary("z", MathOp::Popc, x));
        let out = exec(&p, dtype, dtype, &x, &x).unwrap();
        for i in 0..N {
            assert_eq!(out[i], x[i].count_ones(), "popc {dtype} {}", x[i]);
        }
        // An amount of `bits` is an error naming the instruction.
        let p = program(dtype, dtype, |b, x, _| {
            b.binary(
                "z",
                ElementOp::Shr,
                x,
                Operand::Scalar(Expr::Int(bits as i32)),
            )
        });
        let e = exec(&p, dtype, dtype, &x, &x).unwrap_err();
        assert!(e.contains("shr") && e.contains("shift amount"), "{e}");
    }
}

#[test]
fn comparisons_give_u1_masks_and_select_chooses() {
    for dtype in [DType::F32, DType::F16, DType::Int(8), DType::UInt(4)] {
        let (lo, hi) = if dtype == DType::UInt(4) {
            (0.0, 15.0)
        } else {
            (-5.0, 5.0)
        };
        let x = random(dtype, lo, hi);
        let mut y = random(dtype, lo, hi);
        // Some ties, so `le`/`eq` see equal elements.
        for i in (0..N).step_by(5) {
            y[i] = x[i];
        }
        for op in CmpOp::ALL {
            let p = program(dtype, DType::UInt(1), |b, x, y| {
                b.compare("m", op, x, Operand::Tensor(y))
            });
            let out = exec(&p, dtype, DType::UInt(1), &x, &y).unwrap();
            for i in 0..N {
                let (a, c) = (dtype.decode(x[i]), dtype.decode(y[i]));
                let want = match op {
                    CmpOp::Lt => a < c,
                    CmpOp::Le => a <= c,
                    CmpOp::Gt => a > c,
                    CmpOp::Ge => a >= c,
                    CmpOp::Eq => a == c,
                    CmpOp::Ne => a != c,
                };
                assert_eq!(out[i], want as u32, "{} {dtype} {a} {c}", op.name());
            }
        }
        // select(x > y, x, y) is the maximum; select(x < 2, x, 7) with an i32 scalar.
        let p = program(dtype, dtype, |b, x, y| {
            let m = b.compare("m", CmpOp::Gt, x, Operand::Tensor(y));
            b.select("s", m, x, Operand::Tensor(y))
        });
        let out = exec(&p, dtype, dtype, &x, &y).unwrap();
        for i in 0..N {
            let want = dtype.decode(x[i]).max(dtype.decode(y[i]));
            assert_eq!(dtype.decode(out[i]), want, "select max {dtype}");
        }
        let p = program(dtype, dtype, |b, x, _| {
            let m = b.compare("m", CmpOp::Lt, x, Operand::Scalar(Expr::Int(2)));
            b.select("s", m, x, Operand::Scalar(Expr::Int(7)))
        });
        let out = exec(&p, dtype, dtype, &x, &x).unwrap();
        for i in 0..N {
            let v = dtype.decode(x[i]);
            let want = if v < 2.0 { v } else { 7.0 };
            assert_eq!(dtype.decode(out[i]), want, "select scalar {dtype}");
        }
    }
}

/// A ragged row: `arange` along the columns, `lt(idx, n)`, a broadcast mask row chosen by
/// `select`, and a `load_global` whose out-of-view elements read as the fill value.
#[test]
fn arange_masks_and_fill_loads() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..32);
    let fill = -rng.random_range(1.0f64..100.0).round();
    let mut b = ProgramBuilder::new("ragged", 32);
    // The width is a run-time value: a constant one narrower than the tile is rejected.
    let pn = b.param_i32("n");
    let px = b.param_ptr("px", DType::F32, false);
    let po = b.param_ptr("po", DType::F32, true);
    let pi = b.param_ptr("pi", DType::Int(32), true);
    b.grid(vec![Expr::Int(1)]);
    let gx = b.view_global("gx", px, DType::F32, vec![Expr::Int(8), pn.into()]);
    let go = b.view_global("go", po, DType::F32, vec![Expr::Int(8), Expr::Int(32)]);
    let gi = b.view_global("gi", pi, DType::Int(32), vec![Expr::Int(8), Expr::Int(32)]);
    let zero = vec![Expr::Int(0), Expr::Int(0)];
    let x = b.load_global_fill("x", gx, tile(), zero.clone(), fill);
    let idx = b.arange("idx", tile(), 1, Expr::Int(100));
    b.store_global(idx, gi, zero.clone());
    let row = l("reduce(spatial(4,8),[0]).local(1,4)");
    let cols = b.arange("cols", row, 1, Expr::Int(0));
    let keep = b.compare("keep", CmpOp::Lt, cols, Operand::Scalar(Expr::Int(n / 2)));
    let e = b.unary("e", MathOp::Exp, x);
    let y = b.select("y", keep, e, Operand::Tensor(x));
    b.store_global(y, go, zero);
    let p = b.finish();
    verify(&p, &Target::default()).unwrap();
    let xs: Vec<f32> = (0..8 * n).map(|_| rng.random_range(-3.0..3.0)).collect();
    let mut args = [
        Arg::I32(n),
        Arg::Buffer(xs.iter().flat_map(|v| v.to_le_bytes()).collect()),
        Arg::Buffer(vec![0xff; 8 * 32 * 4]),
        Arg::Buffer(vec![0xff; 8 * 32 * 4]),
    ];
    run(&p, &mut args).unwrap();
    let words = |a: &Arg| match a {
        Arg::Buffer(b) => b
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<u32>>(),
        _ => unreachable!(),
    };
    let (out, ids) = (words(&args[2]), words(&args[3]));
    for r in 0..8 {
        for c in 0..32 {
            assert_eq!(ids[r * 32 + c] as i32, c as i32 + 100);
            let x = if c < n as usize {
                xs[r * n as usize + c] as f64
            } else {
                fill
            };
            let want = if (c as i32) < n / 2 {
                (x.exp() as f32).to_bits()
            } else {
                (x as f32).to_bits()
            };
            assert_eq!(
                out[r * 32 + c],
                want,
                "row {r} col {c} (n = {n}, fill {fill})"
            );
        }
    }
}

// ---- verifier ------------------------------------------------------------------------------

fn reg(b: &mut ProgramBuilder, name: &str, dtype: DType) -> VarId {
    b.allocate_register(name, dtype, tile(), Some(1.0))
}

fn rejected(build: impl FnOnce(&mut ProgramBuilder), needles: &[&str]) {
    let mut b = ProgramBuilder::new("k", 32);
    b.grid(vec![Expr::Int(1)]);
    b.set_span(SpanId(7));
    build(&mut b);
    let p = b.finish();
    let d = verify(&p, &Target::default()).expect_err("should be rejected");
    assert!(
        d.iter()
            .any(|d| d.span == SpanId(7) && needles.iter().all(|n| d.message.contains(n))),
        "{needles:?} not in {d:#?}"
    );
}

#[test]
fn verifier_rejects_wrong_dtypes_masks_and_dimensions() {
    rejected(
        |b| {
            let x = reg(b, "ints", DType::Int(8));
            b.unary("z", MathOp::Exp, x);
        },
        &[
            "exp is defined for f16, bf16 and f32 tensors",
            "`ints` holds i8",
        ],
    );
    rejected(
        |b| {
            let x = reg(b, "f8s", DType::F8E4M3);
            b.unary("z", MathOp::Sqrt, x);
        },
        &["sqrt", "`f8s`"],
    );
    rejected(
        |b| {
            let x = reg(b, "floats", DType::F32);
            b.unary("z", MathOp::Popc, x);
        },
        &["popc is defined for integer tensors", "`floats` holds f32"],
    );
    for op in [ElementOp::And, ElementOp::Shl, ElementOp::Xor] {
        rejected(
            |b| {
                let x = reg(b, "halves", DType::F16);
                b.binary("z", op, x, Operand::Imm(1.0));
            },
            &[op.name(), "integer tensors", "`halves` holds f16"],
        );
    }
    rejected(
        |b| {
            let x = reg(b, "x", DType::F32);
            let c = reg(b, "notmask", DType::Int(8));
            b.select("z", c, x, Operand::Imm(0.0));
        },
        &["select", "condition `notmask` must be a u1 mask"],
    );
    rejected(
        |b| {
            let x = reg(b, "x", DType::F32);
            let y = reg(b, "y16", DType::F16);
            b.compare("z", CmpOp::Lt, x, Operand::Tensor(y));
        },
        &["lt", "`x` holds f32 but `y16` holds f16"],
    );
    rejected(
        |b| {
            let x = reg(b, "x", DType::F32);
            // A mask spread over other threads than `x`'s elements.
            let c =
                b.allocate_register("wide", DType::UInt(1), l("spatial(32).local(8)"), Some(1.0));
            b.select("z", c, x, Operand::Imm(0.0));
        },
        &["select", "`wide` cannot be broadcast to `x`"],
    );
    rejected(
        |b| {
            b.arange("idx", tile(), 2, Expr::Int(0));
        },
        &["arange `idx`", "dimension 2 is outside the layout's rank 2"],
    );
    rejected(
        |b| {
            let p = b.param_ptr("p", DType::F32, false);
            let g = b.view_global("g", p, DType::F32, vec![Expr::Int(8), Expr::Int(32)]);
            b.load_global_fill("t", g, tile(), vec![Expr::Int(0), Expr::Int(0)], f64::NAN);
        },
        &["load_global into `t`", "NaN is not a valid fill value"],
    );
}

#[test]
fn printer_shows_the_new_instructions() {
    let mut b = ProgramBuilder::new("k", 32);
    let p = b.param_ptr("p", DType::F32, false);
    b.grid(vec![Expr::Int(1)]);
    let g = b.view_global("g", p, DType::F32, vec![Expr::Int(8), Expr::Int(32)]);
    let x = b.load_global_fill(
        "x",
        g,
        tile(),
        vec![Expr::Int(0), Expr::Int(0)],
        f64::NEG_INFINITY,
    );
    let e = b.unary("e", MathOp::Gelu, x);
    let idx = b.arange("idx", tile(), 1, Expr::Int(3));
    let m = b.compare("m", CmpOp::Le, idx, Operand::Scalar(Expr::Int(9)));
    b.select("s", m, e, Operand::Imm(0.0));
    let text = b.finish().to_string();
    for line in [
        "x = load_global(g, spatial(4,8).local(2,4), [0, 0], -inf)",
        "e = gelu(x)",
        "idx = arange(spatial(4,8).local(2,4), 1, 3)",
        "m = le(idx, 9)",
        "s = select(m, e, 0.0)",
    ] {
        assert!(text.contains(line), "`{line}` not in\n{text}");
    }
}
