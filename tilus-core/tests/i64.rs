//! `i64` scalars: the interpreter against an exact reference for offsets past the `i32` range,
//! the verifier's rules (global offsets may be `i64`; extents, shared offsets, loop bounds and
//! tensor operands may not), the printer, the generated C, and the launch checks.

use rand::Rng;
use tilus_core::codegen::{emit, ArgValue, ParamKind};
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{BinaryOp, Expr, Operand, Program, ProgramBuilder, ScalarType, UnaryOp};
use tilus_core::layout::parse;
use tilus_core::verify::{verify, Target};
use tilus_core::DType;

fn l(s: &str) -> tilus_core::Layout {
    parse(s).unwrap()
}

/// Copies 64 f32 from flat element `base + delta` of `x[rows, 256]` to `y[64]`, where `base`
/// is an i64 parameter and `delta` an i32 one; the flat offset is split into a row and a column
/// in i64 arithmetic (`min` with `i64::MAX`-ish bounds and a select exercise promotion), and the
/// generated code gets a 4-element vector access whose divisibility depends on `base`.
fn offset_program() -> Program {
    let mut b = ProgramBuilder::new("wide", 32);
    let rows = b.param_i32("rows");
    let base = b.param_i64("base");
    let delta = b.param_i32("delta");
    let x = b.param_ptr("x", DType::F32, false);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F32, vec![rows.into(), 256.into()]);
    let gy = b.view_global("gy", y, DType::F32, vec![1.into(), 64.into()]);
    // at = min(base + delta, 2^40): i64 + i32 promotes.
    let at = b.let_(
        "at",
        ScalarType::I64,
        Expr::binary(
            BinaryOp::Min,
            Expr::binary(BinaryOp::Add, base, delta),
            Expr::i64(1 << 40),
        ),
    );
    // A select between an i32 and an i64 branch (promoted).
    let col = b.let_(
        "col",
        ScalarType::I64,
        Expr::Select(
            Box::new(Expr::binary(BinaryOp::Lt, at, 0)),
            Box::new(Expr::Int(-1)),
            Box::new(Expr::var(at) % 256),
        ),
    );
    let r = b.load_global(
        "r",
        gx,
        l("spatial(1, 32).local(1, 2)"),
        vec![Expr::var(at) / 256, col.into()],
    );
    b.store_global(r, gy, vec![0.into(), 0.into()]);
    b.finish()
}

#[test]
fn i64_offsets_read_the_element_they_name() {
    let mut rng = rand::rng();
    let p = offset_program();
    for _ in 0..30 {
        let rows = rng.random_range(1..5usize);
        let total = rows * 256;
        let x: Vec<f32> = (0..total).map(|_| rng.random_range(-8.0..8.0)).collect();
        // Some in the view (tiles aligned to their row), some far past 2^31 or negative.
        let (base, delta): (i64, i32) = match rng.random_range(0..3) {
            0 => (
                64 * rng.random_range(0..(total / 64) as i64) - 64,
                64 * rng.random_range(0..2),
            ),
            1 => (
                (1i64 << 33) + 64 * rng.random_range(0..100),
                rng.random_range(-64..64) * 64,
            ),
            _ => (-(1i64 << 34), rng.random_range(0..1000)),
        };
        let mut args = vec![
            Arg::I32(rows as i32),
            Arg::I64(base),
            Arg::I32(delta),
            Arg::Buffer(x.iter().flat_map(|v| v.to_le_bytes()).collect()),
            Arg::Buffer(f32::NAN.to_le_bytes().repeat(64)),
        ];
        run(&p, &mut args).unwrap();
        let Arg::Buffer(out) = &args[4] else {
            unreachable!()
        };
        let at = (base + delta as i64).min(1 << 40);
        for j in 0..64 {
            let got = f32::from_le_bytes(out[4 * j..4 * j + 4].try_into().unwrap()) as f64;
            // Masked per dim: a negative `at` is column -1 (and a negative row).
            let (row, c) = if at < 0 {
                (at / 256, -1)
            } else {
                (at / 256, at % 256)
            };
            let c = c + j as i64;
            let want = if (0..rows as i64).contains(&row) && (0..256).contains(&c) {
                x[(row * 256 + c) as usize] as f64
            } else {
                0.0
            };
            assert_eq!(got, want, "base={base} delta={delta} at {j}");
        }
    }
}

#[test]
fn i64_arguments_are_typed_and_checked_at_launch() {
    let p = offset_program();
    let mut args = vec![
        Arg::I32(1),
        Arg::I32(0),
        Arg::I32(0),
        Arg::Buffer(vec![0; 1024]),
        Arg::Buffer(vec![0; 256]),
    ];
    let e = run(&p, &mut args).unwrap_err();
    assert!(
        e.message.contains("argument 1 (`base`) must be an i64"),
        "{e}"
    );
    let k = emit(&p, &Target::default()).unwrap();
    assert!(matches!(k.launch.params[1].kind, ParamKind::I64 { .. }));
    let src = &k.source;
    assert!(src.contains("long long base"), "{src}");
    // Promotions are explicit casts (C's `min(long long, int)` would be ambiguous), the i64
    // offsets stay 64-bit and their masks compare 64 bits.
    assert!(
        src.contains("min(base + (long long)delta, 1099511627776LL)"),
        "{src}"
    );
    assert!(src.contains("? (-1LL) : at % 256LL"), "{src}");
    assert!(src.contains("const long long"), "{src}");
    assert!(src.contains("(unsigned long long)"), "{src}");
    // The vector access needs (at % 256) % 2 == 0: a condition on an i64 expression, checked
    // with the i64 argument and naming it.
    let args = |base: i64| {
        vec![
            ArgValue::I32(1),
            ArgValue::I64(base),
            ArgValue::I32(0),
            ArgValue::Pointer(0x1000),
            ArgValue::Pointer(0x2000),
        ]
    };
    assert!(!k.launch.assumptions.is_empty(), "{src}");
    {
        k.check_args(&args(1 << 33)).unwrap();
        let e = k.check_args(&args((1 << 33) + 1)).unwrap_err();
        assert!(e.contains("base = 8589934593"), "{e}");
    }
}

#[test]
fn i64_is_rejected_where_i32_stays() {
    let mut b = ProgramBuilder::new("bad", 32);
    let m = b.param_i64("m");
    let x = b.param_ptr("x", DType::F32, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F32, vec![m.into()]);
    let s = b.allocate_shared(
        "s",
        DType::F32,
        tilus_core::layout::SharedLayout::row_major(&[64]),
    );
    let r = b.load_shared("r", s, l("spatial(32)"), vec![m.into()]);
    b.binary(
        "t",
        tilus_core::ir::ElementOp::Add,
        r,
        Operand::Scalar(m.into()),
    );
    b.for_range("i", 0.into(), m.into(), |_, _| {});
    let _ = gx;
    let diags = verify(&b.finish(), &Target::default()).unwrap_err();
    let all: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
    let has = |s: &str| all.iter().any(|m| m.contains(s));
    assert!(
        has("view extents are i32; extent 0 of view_global `gx` is i64"),
        "{all:?}"
    );
    assert!(
        has("an offset of load_shared must be i32, found i64"),
        "{all:?}"
    );
    assert!(
        has("a scalar operand must be i32 or f32, found i64"),
        "{all:?}"
    );
    assert!(
        has("the end of a for loop (loop bounds are i32) must be i32, found i64"),
        "{all:?}"
    );
}

#[test]
fn printer_and_conversions() {
    let x = Expr::Unary(UnaryOp::ToI64, Box::new(Expr::Int(7)));
    let name = |_| "v".to_string();
    assert_eq!(x.render(&name), "(long long)7");
    assert_eq!(Expr::i64(-3).render(&name), "(-3LL)");
    assert_eq!(
        Expr::i64(i64::MIN).render(&name),
        "(-9223372036854775807LL - 1)"
    );
    assert_eq!(ScalarType::I64.name(), "i64");
    let narrow = Expr::Unary(UnaryOp::ToI32, Box::new(Expr::i64(1 << 31)));
    assert!(narrow.const_i32().is_none());
    assert_eq!(
        Expr::binary(BinaryOp::Add, Expr::i64(1 << 40), 1).eval_index(&mut |_| unreachable!()),
        Ok((1 << 40) + 1)
    );
}
