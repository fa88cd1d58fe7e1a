//! The interpreter, instruction by instruction, on fresh random data with poisoned outputs.

use rand::Rng;
use tilus_core::interp::{run, Arg, InterpError};
use tilus_core::ir::{
    BinaryOp, ElementOp, Expr, Operand, Program, ProgramBuilder, ScalarType, SpanId, VarId,
};
use tilus_core::layout::{parse, Layout, SharedLayout, Swizzle};
use tilus_core::{storage, DType};

// The paper programs are example material of the facade (`tilus::programs`), included by
// path: the core crate must not depend on the facade.
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

const POISON: u8 = 0xFF;

fn l(text: &str) -> Layout {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn bytes(arg: &Arg) -> &[u8] {
    match arg {
        Arg::Buffer(b) => b,
        _ => panic!("not a buffer"),
    }
}

/// Random values exactly representable in `dtype`, with their packed bytes. Never all zero.
fn random(dtype: DType, len: usize, lo: f64, hi: f64) -> (Vec<f64>, Vec<u8>) {
    let mut rng = rand::rng();
    loop {
        let codes: Vec<u32> = (0..len)
            .map(|_| {
                let v = rng.random_range(lo..hi);
                dtype.encode(v as f32).unwrap()
            })
            .collect();
        let values: Vec<f64> = codes.iter().map(|&c| dtype.decode(c)).collect();
        if values.iter().any(|&v| v != 0.0) {
            return (values, storage::pack(dtype, &codes));
        }
    }
}

fn decode(dtype: DType, bytes: &[u8], len: usize) -> Vec<f64> {
    storage::unpack(dtype, bytes, len)
        .into_iter()
        .map(|c| dtype.decode(c))
        .collect()
}

fn poisoned(dtype: DType, len: usize) -> Vec<u8> {
    vec![POISON; storage::packed_len(dtype, len)]
}

fn run_err(p: &Program, args: &mut [Arg]) -> InterpError {
    run(p, args).expect_err("the run should fail")
}

fn contains_all(msg: &str, needles: &[&str]) {
    for n in needles {
        assert!(msg.contains(n), "`{n}` not in: {msg}");
    }
}

// ---- global memory -------------------------------------------------------------------------

/// Copy `src[m, n]` to `dst[m, n]` tile by tile with a register tile of `layout`.
fn copy_kernel(dtype: DType, layout: &Layout, threads: u32) -> Program {
    let (tm, tn) = (layout.shape()[0] as i32, layout.shape()[1] as i32);
    let mut b = ProgramBuilder::new("copy", threads);
    let m = b.param_i32("m");
    let n = b.param_i32("n");
    let src = b.param_ptr("src", dtype, false);
    let dst = b.param_ptr("dst", dtype, true);
    b.grid(vec![Expr::cdiv(m, tm), Expr::cdiv(n, tn)]);
    let ix = b.block_indices(&["bi", "bj"]);
    let off = vec![Expr::from(ix[0]) * tm, Expr::from(ix[1]) * tn];
    let gs = b.view_global("gs", src, dtype, vec![m.into(), n.into()]);
    let gd = b.view_global("gd", dst, dtype, vec![m.into(), n.into()]);
    let x = b.load_global("x", gs, layout.clone(), off.clone());
    b.store_global(x, gd, off);
    b.finish()
}

#[test]
fn load_store_global_roundtrip_with_masking() {
    let cases = [
        (DType::F16, "spatial(16,8).local(1,8)", 128),
        (DType::F32, "local(2,1).spatial(8,4).local(1,2)", 32),
        // Replicated over the block: a 32-thread layout in a 128-thread block.
        (
            DType::BF16,
            "column_local(2,2).spatial(8,4).local(1,2)",
            128,
        ),
        (
            DType::Int(6),
            "local(2,1).column_spatial(4,8).local(2,1)",
            64,
        ),
        (DType::UInt(4), "spatial(4,8).local(4,4)", 32),
        (DType::Int(3), "spatial(32,4).local(1,3)", 128),
        ("f4e2m1".parse().unwrap(), "spatial(8,4).local(2,8)", 32),
        // Replicas inside the layout (4 threads hold each element).
        (DType::Int(32), "reduce(spatial(4,8), [0]).local(2,4)", 64),
    ];
    for (dtype, layout, threads) in cases {
        let layout = l(layout);
        let p = copy_kernel(dtype, &layout, threads);
        for (m, n) in [(13, 29), (layout.shape()[0] * 2 + 1, layout.shape()[1] + 3)] {
            let (values, src) = random(dtype, m * n, -3.0, 3.0);
            let mut args = [
                Arg::I32(m as i32),
                Arg::I32(n as i32),
                Arg::Buffer(src),
                Arg::Buffer(poisoned(dtype, m * n)),
            ];
            run(&p, &mut args).unwrap_or_else(|e| panic!("{dtype} {layout:?}: {e}"));
            assert_eq!(decode(dtype, bytes(&args[3]), m * n), values, "{dtype}");
        }
    }
}

#[test]
fn masked_store_leaves_bytes_outside_the_view() {
    // The view covers 10 of the buffer's 40 elements; the tile covers 32.
    let mut b = ProgramBuilder::new("masked", 32);
    let n = b.param_i32("n");
    let src = b.param_ptr("src", DType::F16, false);
    let dst = b.param_ptr("dst", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    let gs = b.view_global("gs", src, DType::F16, vec![n.into()]);
    let gd = b.view_global("gd", dst, DType::F16, vec![n.into()]);
    let x = b.load_global("x", gs, l("spatial(32)"), vec![0.into()]);
    b.store_global(x, gd, vec![0.into()]);
    let p = b.finish();
    let (values, src) = random(DType::F16, 40, -1.0, 1.0);
    let mut args = [
        Arg::I32(10),
        Arg::Buffer(src),
        Arg::Buffer(poisoned(DType::F16, 40)),
    ];
    run(&p, &mut args).unwrap();
    let out = bytes(&args[2]);
    assert_eq!(decode(DType::F16, &out[..20], 10), values[..10]);
    assert!(out[20..].iter().all(|&x| x == POISON));
}

#[test]
fn masked_load_reads_zeros() {
    let mut b = ProgramBuilder::new("zeros", 32);
    let n = b.param_i32("n");
    let src = b.param_ptr("src", DType::Int(8), false);
    let dst = b.param_ptr("dst", DType::Int(8), true);
    b.grid(vec![Expr::Int(1)]);
    let gs = b.view_global("gs", src, DType::Int(8), vec![n.into()]);
    let gd = b.view_global("gd", dst, DType::Int(8), vec![Expr::Int(32)]);
    let x = b.load_global("x", gs, l("spatial(32)"), vec![Expr::Int(-4)]);
    b.store_global(x, gd, vec![0.into()]);
    let p = b.finish();
    let (values, src) = random(DType::Int(8), 8, -100.0, 100.0);
    let mut args = [
        Arg::I32(8),
        Arg::Buffer(src),
        Arg::Buffer(poisoned(DType::Int(8), 32)),
    ];
    run(&p, &mut args).unwrap();
    let out = decode(DType::Int(8), bytes(&args[2]), 32);
    let mut want = vec![0.0; 32];
    want[4..12].copy_from_slice(&values);
    assert_eq!(out, want);
}

#[test]
fn out_of_buffer_access_is_an_error() {
    // The views claim 64 elements; the buffers hold 40.
    let p = {
        let mut b = ProgramBuilder::new("oob", 32);
        let src = b.param_ptr("src", DType::F16, false);
        let dst = b.param_ptr("dst", DType::F16, true);
        b.grid(vec![Expr::Int(1)]);
        b.set_span(SpanId(7));
        let gs = b.view_global("gs", src, DType::F16, vec![Expr::Int(64)]);
        let gd = b.view_global("gd", dst, DType::F16, vec![Expr::Int(64)]);
        let x = b.load_global("x", gs, l("spatial(32).local(2)"), vec![0.into()]);
        b.set_span(SpanId(8));
        b.store_global(x, gd, vec![0.into()]);
        b.finish()
    };
    let mut args = [Arg::Buffer(vec![0; 80]), Arg::Buffer(vec![POISON; 128])];
    let e = run_err(&p, &mut args);
    assert_eq!(e.span, SpanId(7));
    contains_all(
        &e.message,
        &[
            "load_global",
            "`gs`[40]",
            "buffer `src`, which has only 80 bytes",
        ],
    );
    let mut args = [Arg::Buffer(vec![1; 128]), Arg::Buffer(vec![POISON; 80])];
    let e = run_err(&p, &mut args);
    assert_eq!(e.span, SpanId(8));
    contains_all(
        &e.message,
        &["store_global", "`gd`[40] cannot be written", "buffer `dst`"],
    );
}

#[test]
fn arguments_are_checked() {
    let p = copy_kernel(DType::F16, &l("spatial(4,8)"), 32);
    let e = run_err(&p, &mut [Arg::I32(1)]);
    assert!(
        e.message.contains("takes 4 arguments, got 1"),
        "{}",
        e.message
    );
    let mut args = [
        Arg::I32(1),
        Arg::Buffer(vec![]),
        Arg::Buffer(vec![]),
        Arg::Buffer(vec![]),
    ];
    let e = run_err(&p, &mut args);
    assert!(
        e.message.contains("argument 1 (`n`) must be an i32"),
        "{}",
        e.message
    );
}

#[test]
fn unverified_programs_are_refused() {
    let p = copy_kernel(DType::F16, &l("spatial(8,8)"), 32);
    let mut args = [
        Arg::I32(1),
        Arg::I32(1),
        Arg::Buffer(vec![0; 2]),
        Arg::Buffer(vec![0; 2]),
    ];
    let e = run_err(&p, &mut args);
    contains_all(&e.message, &["does not verify", "spans 64 threads"]);
}

// ---- register arithmetic -------------------------------------------------------------------

/// `out = f(x, y)` elementwise on one block: x and y loaded from buffers with `lx`, `ly`.
fn elementwise(
    dtype: DType,
    lx: &Layout,
    ly: Option<&Layout>,
    build: impl FnOnce(&mut ProgramBuilder, VarId, Option<VarId>) -> VarId,
) -> Program {
    let mut b = ProgramBuilder::new("elementwise", 32);
    let px = b.param_ptr("px", dtype, false);
    let py = b.param_ptr("py", dtype, false);
    let pout = b.param_ptr("pout", dtype, true);
    b.grid(vec![Expr::Int(1)]);
    let shape = |l: &Layout| {
        l.shape()
            .iter()
            .map(|&d| Expr::Int(d as i32))
            .collect::<Vec<_>>()
    };
    let zeros = |l: &Layout| vec![Expr::Int(0); l.rank()];
    let gx = b.view_global("gx", px, dtype, shape(lx));
    let x = b.load_global("x", gx, lx.clone(), zeros(lx));
    let y = ly.map(|ly| {
        let gy = b.view_global("gy", py, dtype, shape(ly));
        b.load_global("y", gy, ly.clone(), zeros(ly))
    });
    let out = build(&mut b, x, y);
    let go = b.view_global("go", pout, dtype, shape(lx));
    b.store_global(out, go, zeros(lx));
    b.finish()
}

fn host_op(op: ElementOp, int: bool, x: f64, y: f64) -> f64 {
    match op {
        ElementOp::Add => x + y,
        ElementOp::Sub => x - y,
        ElementOp::Mul => x * y,
        ElementOp::Div if int => (x / y).trunc(),
        ElementOp::Div => x / y,
        ElementOp::Mod => x % y,
        ElementOp::Min => x.min(y),
        ElementOp::Max => x.max(y),
        // Bit operations are tested in tests/math.rs.
        _ => unreachable!("not used here"),
    }
}

#[test]
fn binary_ops_with_tensor_operands() {
    let lx = l("spatial(4,8).local(2,2)");
    let ops = [
        ElementOp::Add,
        ElementOp::Sub,
        ElementOp::Mul,
        ElementOp::Div,
        ElementOp::Mod,
        ElementOp::Min,
        ElementOp::Max,
    ];
    for dtype in [DType::F32, DType::Int(32), DType::Int(8), DType::F16] {
        let int = dtype.kind() != tilus_core::dtype::Kind::Float;
        for op in ops {
            if op == ElementOp::Mod && !int {
                continue;
            }
            let p = elementwise(dtype, &lx, Some(&lx), |b, x, y| {
                b.binary("z", op, x, Operand::Tensor(y.unwrap()))
            });
            let (xs, bx) = random(dtype, 128, -11.0, 11.0);
            // Non-zero divisors.
            let (ys, by) = random(dtype, 128, 1.0, 11.0);
            let mut args = [
                Arg::Buffer(bx),
                Arg::Buffer(by),
                Arg::Buffer(poisoned(dtype, 128)),
            ];
            run(&p, &mut args).unwrap_or_else(|e| panic!("{dtype} {op:?}: {e}"));
            let out = decode(dtype, bytes(&args[2]), 128);
            for i in 0..128 {
                let want = host_op(op, int, xs[i], ys[i]);
                let want = dtype.decode(dtype.encode(want as f32).unwrap());
                assert_eq!(out[i], want, "{dtype} {op:?} {} {}", xs[i], ys[i]);
            }
        }
    }
}

#[test]
fn binary_broadcast_scalar_and_immediate() {
    let lx = l("spatial(4,8).local(2,2)");
    let ly = l("reduce(spatial(4,8), [0]).local(1,2)");
    let p = elementwise(DType::F32, &lx, Some(&ly), |b, x, y| {
        let z = b.binary("z", ElementOp::Add, x, Operand::Tensor(y.unwrap()));
        let z = b.binary("z2", ElementOp::Mul, z, Operand::Imm(0.5));
        b.binary("z3", ElementOp::Sub, z, Operand::Scalar(Expr::Int(3)))
    });
    let (xs, bx) = random(DType::F32, 8 * 16, -4.0, 4.0);
    let (ys, by) = random(DType::F32, 16, -4.0, 4.0);
    let mut args = [
        Arg::Buffer(bx),
        Arg::Buffer(by),
        Arg::Buffer(poisoned(DType::F32, 128)),
    ];
    run(&p, &mut args).unwrap();
    let out = decode(DType::F32, bytes(&args[2]), 128);
    for r in 0..8 {
        for c in 0..16 {
            let want = ((xs[r * 16 + c] + ys[c]) as f32 * 0.5) as f64 - 3.0;
            assert_eq!(out[r * 16 + c] as f32, want as f32);
        }
    }
}

#[test]
fn integer_tensor_overflow_and_division_by_zero_are_errors() {
    let lx = l("spatial(32)");
    let p = elementwise(DType::Int(8), &lx, None, |b, x, _| {
        b.binary("z", ElementOp::Add, x, Operand::Imm(100.0))
    });
    let mut x = vec![0u8; 32];
    x[5] = 100;
    let mut args = [
        Arg::Buffer(x),
        Arg::Buffer(vec![]),
        Arg::Buffer(poisoned(DType::Int(8), 32)),
    ];
    contains_all(
        &run_err(&p, &mut args).message,
        &["add", "the result 200 overflows i8"],
    );
    let p = elementwise(DType::Int(32), &lx, None, |b, x, _| {
        b.binary("z", ElementOp::Div, x, Operand::Scalar(Expr::Int(0)))
    });
    let mut args = [
        Arg::Buffer(vec![1; 128]),
        Arg::Buffer(vec![]),
        Arg::Buffer(vec![0; 128]),
    ];
    contains_all(
        &run_err(&p, &mut args).message,
        &["div", "division by zero"],
    );
}

#[test]
fn neg() {
    let lx = l("local(4).spatial(32)");
    for dtype in [DType::F16, DType::Int(6)] {
        let p = elementwise(dtype, &lx, None, |b, x, _| b.neg("y", x));
        let (xs, bx) = random(dtype, 128, -31.0, 31.0);
        let mut args = [
            Arg::Buffer(bx),
            Arg::Buffer(vec![]),
            Arg::Buffer(poisoned(dtype, 128)),
        ];
        run(&p, &mut args).unwrap();
        let want: Vec<f64> = xs.iter().map(|x| -x).collect();
        assert_eq!(decode(dtype, bytes(&args[2]), 128), want);
    }
}

#[test]
fn allocate_register_initial_values() {
    for (dtype, init, want) in [
        (DType::F16, 0.1, half::f16::from_f64(0.1).to_f64()),
        (DType::Int(4), 100.0, 7.0),
        (DType::Int(32), -2.5, -2.0),
    ] {
        let mut b = ProgramBuilder::new("init", 64);
        let out = b.param_ptr("out", dtype, true);
        b.grid(vec![Expr::Int(1)]);
        let r = b.allocate_register("r", dtype, l("spatial(8,8).local(2,1)"), Some(init));
        let g = b.view_global("g", out, dtype, vec![Expr::Int(16), Expr::Int(8)]);
        b.store_global(r, g, vec![0.into(), 0.into()]);
        let mut args = [Arg::Buffer(poisoned(dtype, 128))];
        run(&b.finish(), &mut args).unwrap();
        assert!(
            decode(dtype, bytes(&args[0]), 128)
                .iter()
                .all(|&v| v == want),
            "{dtype}"
        );
    }
}

/// Load `from`, cast to `to`, store.
fn cast_kernel(from: DType, to: DType, n: usize) -> Program {
    let mut b = ProgramBuilder::new("cast", 32);
    let src = b.param_ptr("src", from, false);
    let dst = b.param_ptr("dst", to, true);
    b.grid(vec![Expr::Int(1)]);
    let layout = l(&format!("local({}).spatial(32)", n / 32));
    let gs = b.view_global("gs", src, from, vec![Expr::Int(n as i32)]);
    let x = b.load_global("x", gs, layout, vec![0.into()]);
    let y = b.cast("y", x, to);
    let gd = b.view_global("gd", dst, to, vec![Expr::Int(n as i32)]);
    b.store_global(y, gd, vec![0.into()]);
    b.finish()
}

#[test]
fn cast_rounds_to_nearest_even_and_saturates() {
    let n = 256;
    // f32 -> f16 / bf16 / f4e2m1 / f8e4m3, checked against the encoders.
    for to in [
        DType::F16,
        DType::BF16,
        "f4e2m1".parse().unwrap(),
        DType::F8E4M3,
    ] {
        let (xs, src) = random(DType::F32, n, -1000.0, 1000.0);
        let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(to, n))];
        run(&cast_kernel(DType::F32, to, n), &mut args).unwrap();
        let want: Vec<f64> = xs
            .iter()
            .map(|&x| to.decode(to.encode(x as f32).unwrap()))
            .collect();
        assert_eq!(decode(to, bytes(&args[1]), n), want, "{to}");
    }
    // f32 -> i8: ties to even, clamp.
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 128.0) * 2.5).collect();
    let src: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(DType::Int(8), n))];
    run(&cast_kernel(DType::F32, DType::Int(8), n), &mut args).unwrap();
    let out = decode(DType::Int(8), bytes(&args[1]), n);
    for (x, o) in xs.iter().zip(&out) {
        assert_eq!(*o, (x.round_ties_even() as f64).clamp(-128.0, 127.0), "{x}");
    }
    // i6 -> f16 is exact.
    let (xs, src) = random(DType::Int(6), n, -32.0, 32.0);
    let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(DType::F16, n))];
    run(&cast_kernel(DType::Int(6), DType::F16, n), &mut args).unwrap();
    assert_eq!(decode(DType::F16, bytes(&args[1]), n), xs);
}

/// `x op y` (or `x * y + y` for `None`) of two `n`-element tensors, one per thread.
fn half_op_kernel(dtype: DType, op: Option<ElementOp>, n: usize) -> Program {
    let mut b = ProgramBuilder::new("half_op", 32);
    let (px, py) = (
        b.param_ptr("x", dtype, false),
        b.param_ptr("y", dtype, false),
    );
    let pz = b.param_ptr("z", dtype, true);
    b.grid(vec![Expr::Int(1)]);
    let layout = l(&format!("local({}).spatial(32)", n / 32));
    let shape = vec![Expr::Int(n as i32)];
    let gx = b.view_global("gx", px, dtype, shape.clone());
    let gy = b.view_global("gy", py, dtype, shape.clone());
    let x = b.load_global("rx", gx, layout.clone(), vec![0.into()]);
    let y = b.load_global("ry", gy, layout, vec![0.into()]);
    let z = match op {
        Some(op) => b.binary("rz", op, x, Operand::Tensor(y)),
        None => b.mul_add("rz", x, Operand::Tensor(y), y),
    };
    let gz = b.view_global("gz", pz, dtype, shape);
    b.store_global(z, gz, vec![0.into()]);
    b.finish()
}

/// f16 and bf16 arithmetic rounds like the GPU's IEEE arithmetic: past the largest finite
/// value the result is an infinity (`DType::round`), where a conversion saturates; infinite
/// operands propagate; a NaN result is an error naming it.
#[test]
fn half_arithmetic_overflows_to_infinity() {
    let n = 64;
    let mut rng = rand::rng();
    for dtype in [DType::F16, DType::BF16] {
        let max = dtype.max_value();
        // Operands of both signs, at least 1 in magnitude, so that about half the sums and
        // products overflow.
        let large = |rng: &mut rand::rngs::ThreadRng| {
            let v: f64 = rng.random_range(1.0..max);
            dtype.decode(
                dtype
                    .encode((if rng.random() { v } else { -v }) as f32)
                    .unwrap(),
            )
        };
        let xs: Vec<f64> = (0..n).map(|_| large(&mut rng)).collect();
        let ys: Vec<f64> = (0..n).map(|_| large(&mut rng)).collect();
        // mul_add's `x * y + y` with `y = +-m * 2^k` (m < 8): `y * (x + 1)` has at most 24
        // significant bits for an f16 `x` of magnitude 1 or more, so `half`'s conversion from
        // f64 (through f32) rounds it once, as the fma does.
        let small: Vec<f64> = (0..n)
            .map(|_| {
                let v = rng.random_range(1..8) as f64 * 2f64.powi(rng.random_range(0..5));
                if rng.random() {
                    v
                } else {
                    -v
                }
            })
            .collect();
        let pack = |v: &[f64]| {
            let codes: Vec<u32> = v.iter().map(|&x| dtype.encode(x as f32).unwrap()).collect();
            storage::pack(dtype, &codes)
        };
        let mut cases = vec![
            (Some(ElementOp::Add), "add", &ys),
            (Some(ElementOp::Sub), "sub", &ys),
            (Some(ElementOp::Mul), "mul", &ys),
        ];
        if dtype == DType::F16 {
            // bf16's fma rounding at the overflow threshold: `fma_half`'s unit test.
            cases.push((None, "mul_add", &small));
        }
        let mut infinities = 0;
        for (op, name, ys) in cases {
            let mut args = [
                Arg::Buffer(pack(&xs)),
                Arg::Buffer(pack(ys)),
                Arg::Buffer(poisoned(dtype, n)),
            ];
            run(&half_op_kernel(dtype, op, n), &mut args).unwrap();
            let got = decode(dtype, bytes(&args[2]), n);
            for i in 0..n {
                let (x, y) = (xs[i], ys[i]);
                let exact = match name {
                    "add" => x + y,
                    "sub" => x - y,
                    "mul" => x * y,
                    _ => x * y + y,
                };
                // Exact in f64; rounding through f32 is innocuous for one + - * of half
                // values (and for the 24-bit mul_add values); `half` overflows to infinity.
                let want = match dtype {
                    DType::F16 => half::f16::from_f64(exact).to_f64(),
                    _ => half::bf16::from_f64(exact).to_f64(),
                };
                assert_eq!(got[i], want, "{dtype} {name}({x:e}, {y:e})");
                infinities += want.is_infinite() as usize;
            }
        }
        assert!(infinities > 0, "{dtype}: no result overflowed");
        // A conversion still saturates.
        assert_eq!(dtype.decode(dtype.encode(f32::INFINITY).unwrap()), max);
        // Infinite operands: inf + 1 is inf; inf - inf is a NaN, an error.
        let inf = dtype.round(f32::INFINITY).unwrap();
        let one = dtype.encode(1.0).unwrap();
        let run_on = |op, y: u32| {
            let mut args = [
                Arg::Buffer(storage::pack(dtype, &vec![inf; n])),
                Arg::Buffer(storage::pack(dtype, &vec![y; n])),
                Arg::Buffer(poisoned(dtype, n)),
            ];
            run(&half_op_kernel(dtype, Some(op), n), &mut args)
                .map(|_| decode(dtype, bytes(&args[2]), n))
        };
        let sums = run_on(ElementOp::Add, one).unwrap();
        assert!(sums.iter().all(|v| *v == f64::INFINITY), "{sums:?}");
        let e = run_on(ElementOp::Sub, inf).unwrap_err();
        assert!(e.to_string().contains("NaN"), "{e}");
        // A cast to the same type moves the infinity; to the other half type it saturates.
        let other = if dtype == DType::F16 {
            DType::BF16
        } else {
            DType::F16
        };
        for (to, want) in [(dtype, f64::INFINITY), (other, other.max_value())] {
            let mut args = [
                Arg::Buffer(storage::pack(dtype, &vec![inf; n])),
                Arg::Buffer(poisoned(to, n)),
            ];
            run(&cast_kernel(dtype, to, n), &mut args).unwrap();
            let got = decode(to, bytes(&args[1]), n);
            assert!(got.iter().all(|v| *v == want), "{dtype} -> {to}: {got:?}");
        }
    }
}

/// A cast keeps the sign of zero (the GPU's conversions do): -0.0 in f32, f16 and bf16 stays
/// -0.0 in the other two. (A biased cast adding a bias of 0.0 once turned it into +0.0.)
#[test]
fn cast_keeps_negative_zero() {
    let n = 64;
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F16),
        (DType::F16, DType::BF16),
    ] {
        let neg_zero = from.encode(-0.0).unwrap();
        let src = storage::pack(from, &vec![neg_zero; n]);
        let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(to, n))];
        run(&cast_kernel(from, to, n), &mut args).unwrap();
        let out = storage::unpack(to, bytes(&args[1]), n);
        let want = to.encode(-0.0).unwrap();
        assert!(out.iter().all(|&c| c == want), "{from} -> {to}: {out:x?}");
    }
}

#[test]
fn view_reinterprets_register_bits() {
    // Each thread loads 3 bytes and views them as four i6 values, stored back row-major.
    let mut b = ProgramBuilder::new("view", 32);
    let src = b.param_ptr("src", DType::UInt(8), false);
    let dst = b.param_ptr("dst", DType::Int(6), true);
    b.grid(vec![Expr::Int(1)]);
    let gs = b.view_global("gs", src, DType::UInt(8), vec![Expr::Int(96)]);
    let x = b.load_global("x", gs, l("local(3).spatial(32)"), vec![0.into()]);
    let y = b.view("y", x, DType::Int(6), l("spatial(32).local(4)"));
    let gd = b.view_global("gd", dst, DType::Int(6), vec![Expr::Int(128)]);
    b.store_global(y, gd, vec![0.into()]);
    let p = b.finish();
    let (_, src) = random(DType::UInt(8), 96, 0.0, 255.0);
    let mut args = [
        Arg::Buffer(src.clone()),
        Arg::Buffer(poisoned(DType::Int(6), 128)),
    ];
    run(&p, &mut args).unwrap();
    let out = storage::unpack(DType::Int(6), bytes(&args[1]), 128);
    for t in 0..32 {
        // Thread t's bytes are src[t], src[t+32], src[t+64], LSB first.
        let word = src[t] as u32 | (src[t + 32] as u32) << 8 | (src[t + 64] as u32) << 16;
        for i in 0..4 {
            assert_eq!(out[t * 4 + i], word >> (6 * i) & 63, "thread {t} local {i}");
        }
    }
}

// ---- dot -----------------------------------------------------------------------------------

fn dot_kernel(
    dtype: DType,
    acc: DType,
    threads: u32,
    (la, lb, lc): (Layout, Layout, Layout),
) -> Program {
    let mut b = ProgramBuilder::new("dot", threads);
    let pa = b.param_ptr("a", dtype, false);
    let pb = b.param_ptr("b", dtype, false);
    let pc = b.param_ptr("c", acc, true);
    b.grid(vec![Expr::Int(1)]);
    let dims = |l: &Layout| {
        l.shape()
            .iter()
            .map(|&d| Expr::Int(d as i32))
            .collect::<Vec<_>>()
    };
    let ga = b.view_global("ga", pa, dtype, dims(&la));
    let gb = b.view_global("gb", pb, dtype, dims(&lb));
    let gc = b.view_global("gc", pc, acc, dims(&lc));
    let z = vec![Expr::Int(0), Expr::Int(0)];
    let ra = b.load_global("ra", ga, la, z.clone());
    let rb = b.load_global("rb", gb, lb, z.clone());
    let rc = b.load_global("rc", gc, lc, z.clone());
    let out = b.dot("out", ra, rb, rc);
    b.store_global(out, gc, z);
    b.finish()
}

fn check_dot(dtype: DType, acc: DType, threads: u32, layouts: (Layout, Layout, Layout)) {
    let (m, k) = (layouts.0.shape()[0], layouts.0.shape()[1]);
    let n = layouts.1.shape()[1];
    let p = dot_kernel(dtype, acc, threads, layouts);
    let (a, ba) = random(dtype, m * k, -8.0, 8.0);
    let (b, bb) = random(dtype, k * n, -8.0, 8.0);
    let (c, bc) = random(acc, m * n, -8.0, 8.0);
    let mut args = [Arg::Buffer(ba), Arg::Buffer(bb), Arg::Buffer(bc)];
    run(&p, &mut args).unwrap();
    let out = decode(acc, bytes(&args[2]), m * n);
    for i in 0..m {
        for j in 0..n {
            let want = c[i * n + j] + (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum::<f64>();
            let want = acc.decode(acc.encode(want as f32).unwrap());
            assert_eq!(out[i * n + j], want, "{dtype} c[{i}, {j}]");
        }
    }
}

#[test]
fn dot_thread_local() {
    check_dot(
        DType::F32,
        DType::F32,
        64,
        (
            l("spatial(64,1).local(1,8)"),
            l("local(8,4)"),
            l("spatial(64,1).local(1,4)"),
        ),
    );
    check_dot(
        DType::Int(8),
        DType::Int(32),
        32,
        (
            l("spatial(8,1).local(2,16)"),
            l("local(16,4)"),
            l("spatial(8,1).local(2,4)"),
        ),
    );
}

#[test]
fn dot_mma_layouts() {
    check_dot(
        DType::F16,
        DType::F32,
        128,
        (
            programs::a_tile(32, 32),
            programs::b_tile(32, 64),
            programs::c_tile(32, 64),
        ),
    );
    let [fa, fb, fc] = tilus_core::verify::mma_fragments(tilus_core::verify::MmaKind::I8);
    check_dot(DType::Int(8), DType::Int(32), 32, (fa, fb, fc));
}

// ---- shared memory -------------------------------------------------------------------------

/// Store a tile to shared with `store`, optionally synchronize, load it with `load`, store out.
fn shared_kernel(store: &Layout, load: &Layout, layout: SharedLayout, sync: bool) -> Program {
    let mut b = ProgramBuilder::new("shared", 128);
    let src = b.param_ptr("src", DType::F16, false);
    let dst = b.param_ptr("dst", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    let dims: Vec<Expr> = store.shape().iter().map(|&d| Expr::Int(d as i32)).collect();
    let z = vec![Expr::Int(0); 2];
    let gs = b.view_global("gs", src, DType::F16, dims.clone());
    let gd = b.view_global("gd", dst, DType::F16, dims);
    let s = b.allocate_shared("s", DType::F16, layout);
    let x = b.load_global("x", gs, store.clone(), z.clone());
    b.set_span(SpanId(3));
    b.store_shared(x, s, z.clone());
    if sync {
        b.synchronize();
    }
    b.set_span(SpanId(5));
    let y = b.load_shared("y", s, load.clone(), z.clone());
    b.store_global(y, gd, z);
    b.finish()
}

#[test]
fn shared_roundtrip_across_threads() {
    let store = l("spatial(16,8).local(1,4)");
    let load = l("local(2,2).spatial(8,16)");
    let swizzled = SharedLayout::row_major(&[16, 32]).with_swizzle(Swizzle::new(2, 3, 2).unwrap());
    for layout in [
        SharedLayout::row_major(&[16, 32]),
        SharedLayout::column_major(&[16, 32]),
        swizzled,
    ] {
        let p = shared_kernel(&store, &load, layout, true);
        let (xs, src) = random(DType::F16, 512, -2.0, 2.0);
        let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(DType::F16, 512))];
        run(&p, &mut args).unwrap();
        assert_eq!(decode(DType::F16, bytes(&args[1]), 512), xs);
    }
}

#[test]
fn missing_synchronize_is_a_race() {
    let p = shared_kernel(
        &l("spatial(16,8).local(1,4)"),
        &l("local(2,2).spatial(8,16)"),
        SharedLayout::row_major(&[16, 32]),
        false,
    );
    let (_, src) = random(DType::F16, 512, -2.0, 2.0);
    let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(DType::F16, 512))];
    let e = run_err(&p, &mut args);
    assert_eq!(e.span, SpanId(5));
    contains_all(
        &e.message,
        &[
            "load_shared: race on shared tensor `s`",
            "which thread",
            "missing synchronize?",
        ],
    );
    // The same layout on both sides: every thread reads only what it wrote, no barrier needed.
    let same = l("spatial(16,8).local(1,4)");
    let p = shared_kernel(&same, &same, SharedLayout::row_major(&[16, 32]), false);
    run(&p, &mut args).unwrap();
}

#[test]
fn write_after_read_without_barrier_is_a_race() {
    let mut b = ProgramBuilder::new("war", 32);
    b.grid(vec![Expr::Int(1)]);
    let s = b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[32]));
    let x = b.allocate_register("x", DType::F32, l("spatial(32)"), Some(1.0));
    b.store_shared(x, s, vec![0.into()]);
    b.synchronize();
    let y = b.load_shared("y", s, l("local(32)"), vec![0.into()]);
    b.set_span(SpanId(9));
    b.store_shared(y, s, vec![0.into()]);
    let e = run_err(&b.finish(), &mut []);
    assert_eq!(e.span, SpanId(9));
    contains_all(&e.message, &["store_shared: race on shared tensor `s`: thread 0 overwrites [0], which several threads read since the last synchronize"]);
}

#[test]
fn uninitialised_shared_read_is_an_error() {
    let mut b = ProgramBuilder::new("uninit", 32);
    b.grid(vec![Expr::Int(1)]);
    let s = b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[32]));
    b.load_shared("y", s, l("spatial(32)"), vec![0.into()]);
    let e = run_err(&b.finish(), &mut []);
    contains_all(
        &e.message,
        &["read of shared tensor `s` at [0], which was never written"],
    );
}

#[test]
fn slice_shared_aliases_its_source() {
    // Store each half of a [2, 32] tile through a slice, load the whole tile back.
    let mut b = ProgramBuilder::new("slice", 32);
    let src = b.param_ptr("src", DType::Int(4), false);
    let dst = b.param_ptr("dst", DType::Int(4), true);
    b.grid(vec![Expr::Int(1)]);
    let gs = b.view_global("gs", src, DType::Int(4), vec![Expr::Int(2), Expr::Int(32)]);
    let gd = b.view_global("gd", dst, DType::Int(4), vec![Expr::Int(2), Expr::Int(32)]);
    let s = b.allocate_shared("s", DType::Int(4), SharedLayout::row_major(&[2, 32]));
    b.for_range("r", 0.into(), 2.into(), |b, r| {
        // Two i4 per thread: each thread writes whole bytes.
        let x = b.load_global("x", gs, l("spatial(16).local(2)"), vec![r.into(), 0.into()]);
        let row = b.slice_shared("row", s, vec![r.into(), 0.into()], vec![32]);
        b.store_shared(x, row, vec![0.into()]);
    });
    b.synchronize();
    let y = b.load_shared(
        "y",
        s,
        l("spatial(2,16).local(1,2)"),
        vec![0.into(), 0.into()],
    );
    b.store_global(y, gd, vec![0.into(), 0.into()]);
    let p = b.finish();
    let (xs, src) = random(DType::Int(4), 64, -8.0, 8.0);
    let mut args = [Arg::Buffer(src), Arg::Buffer(poisoned(DType::Int(4), 64))];
    run(&p, &mut args).unwrap();
    assert_eq!(decode(DType::Int(4), bytes(&args[1]), 64), xs);
}

/// cp.async a `[16, 32]` tile at row `row0` of a `[m, 32]` view into shared, then
/// wait/synchronize as told, load it and store it out.
fn copy_async_kernel(wait: bool, sync: bool) -> Program {
    let mut b = ProgramBuilder::new("cp_async", 64);
    let m = b.param_i32("m");
    let row0 = b.param_i32("row0");
    let src = b.param_ptr("src", DType::F16, false);
    let dst = b.param_ptr("dst", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    let gs = b.view_global("gs", src, DType::F16, vec![m.into(), Expr::Int(32)]);
    let gd = b.view_global("gd", dst, DType::F16, vec![Expr::Int(16), Expr::Int(32)]);
    let s = b.allocate_shared("s", DType::F16, SharedLayout::row_major(&[16, 32]));
    b.copy_async(s, gs, vec![row0.into(), 0.into()]);
    b.copy_async_commit_group();
    if wait {
        b.copy_async_wait_group(0);
    }
    if sync {
        b.synchronize();
    }
    b.set_span(SpanId(4));
    let y = b.load_shared(
        "y",
        s,
        l("spatial(16,4).local(1,8)"),
        vec![0.into(), 0.into()],
    );
    b.store_global(y, gd, vec![0.into(), 0.into()]);
    b.finish()
}

#[test]
fn copy_async_lands_at_wait_group_with_masking() {
    let (m, row0) = (20, 10);
    let (xs, src) = random(DType::F16, m * 32, -2.0, 2.0);
    let mut args = [
        Arg::I32(m as i32),
        Arg::I32(row0),
        Arg::Buffer(src),
        Arg::Buffer(poisoned(DType::F16, 512)),
    ];
    run(&copy_async_kernel(true, true), &mut args).unwrap();
    let out = decode(DType::F16, bytes(&args[3]), 512);
    // Rows 10..20 of the source, then zeros for the rows past m.
    assert_eq!(out[..320], xs[320..]);
    assert!(out[320..].iter().all(|&v| v == 0.0));
}

#[test]
fn copy_async_bugs_are_caught() {
    let (_, src) = random(DType::F16, 512, -2.0, 2.0);
    let mut args = [
        Arg::I32(16),
        Arg::I32(0),
        Arg::Buffer(src),
        Arg::Buffer(vec![0; 1024]),
    ];
    let e = run_err(&copy_async_kernel(false, true), &mut args);
    assert_eq!(e.span, SpanId(4));
    contains_all(&e.message, &["read of shared tensor `s` at [0, 0] while an asynchronous copy into it is in flight; missing wait_group or mbarrier_wait?"]);
    let e = run_err(&copy_async_kernel(true, false), &mut args);
    contains_all(
        &e.message,
        &[
            "a cp.async filled, but no synchronize followed the wait_group",
            "missing synchronize?",
        ],
    );
}

#[test]
fn wait_group_retires_only_old_groups() {
    // Two groups in flight; wait_group(1) lands the first only.
    let mut b = ProgramBuilder::new("groups", 32);
    let src = b.param_ptr("src", DType::F32, false);
    b.grid(vec![Expr::Int(1)]);
    let g = b.view_global("g", src, DType::F32, vec![Expr::Int(64)]);
    let s = b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[2, 32]));
    for r in 0..2 {
        let row = b.slice_shared("row", s, vec![r.into(), 0.into()], vec![32]);
        b.copy_async(row, g, vec![Expr::Int(32 * r)]);
        b.copy_async_commit_group();
    }
    b.copy_async_wait_group(1);
    b.synchronize();
    let first = b.slice_shared("first", s, vec![0.into(), 0.into()], vec![32]);
    b.load_shared("y0", first, l("spatial(32)"), vec![0.into()]);
    let second = b.slice_shared("second", s, vec![1.into(), 0.into()], vec![32]);
    b.load_shared("y1", second, l("spatial(32)"), vec![0.into()]);
    let (_, data) = random(DType::F32, 64, -1.0, 1.0);
    let e = run_err(&b.finish(), &mut [Arg::Buffer(data)]);
    contains_all(
        &e.message,
        &["read of shared tensor `second` at [0] while an asynchronous copy into it is in flight"],
    );
}

#[test]
fn copy_async_over_unsynchronized_reads_is_a_race() {
    let mut b = ProgramBuilder::new("refill", 32);
    let src = b.param_ptr("src", DType::F32, false);
    b.grid(vec![Expr::Int(1)]);
    let g = b.view_global("g", src, DType::F32, vec![Expr::Int(32)]);
    let s = b.allocate_shared("s", DType::F32, SharedLayout::row_major(&[32]));
    b.copy_async(s, g, vec![0.into()]);
    b.copy_async_commit_group();
    b.copy_async_wait_group(0);
    b.synchronize();
    b.load_shared("y", s, l("spatial(32)"), vec![0.into()]);
    b.set_span(SpanId(6));
    b.copy_async(s, g, vec![0.into()]);
    let (_, data) = random(DType::F32, 32, -1.0, 1.0);
    let e = run_err(&b.finish(), &mut [Arg::Buffer(data)]);
    assert_eq!(e.span, SpanId(6));
    contains_all(&e.message, &["copy_async: race on shared tensor `s`: a cp.async overwrites [0], which thread 0 read since the last synchronize"]);
}

// ---- scalars and control flow --------------------------------------------------------------

/// A kernel writing one i32 per block: `out[block] = value(builder, block indices)`.
fn scalar_kernel(
    grid: Vec<Expr>,
    value: impl FnOnce(&mut ProgramBuilder, &[VarId], VarId) -> Expr,
) -> Program {
    let mut b = ProgramBuilder::new("scalar", 32);
    let n = b.param_i32("n");
    let out = b.param_ptr("out", DType::Int(32), true);
    let rank = grid.len();
    b.grid(grid);
    let names = ["bx", "by", "bz"];
    let ix = b.block_indices(&names[..rank]);
    // Linear block index, dimension 0 fastest.
    let mut linear = Expr::from(ix[rank - 1]);
    for d in (0..rank - 1).rev() {
        linear = linear * Expr::Int(if d == 0 { 2 } else { 3 }) + ix[d];
    }
    let v = value(&mut b, &ix, n);
    let z = b.allocate_register("z", DType::Int(32), l("local(1)"), Some(0.0));
    let r = b.binary("r", ElementOp::Add, z, Operand::Scalar(v));
    let g = b.view_global("g", out, DType::Int(32), vec![Expr::Int(1 << 12)]);
    b.store_global(r, g, vec![linear]);
    b.finish()
}

fn out_i32(args: &[Arg], len: usize) -> Vec<i32> {
    bytes(&args[1])[..4 * len]
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn block_indices_cover_a_3d_grid() {
    // Grid [2, 3, n]: out[(z * 3 + y) * 2 + x] = x + 10 y + 100 z.
    let p = scalar_kernel(
        vec![Expr::Int(2), Expr::Int(3), Expr::Var(VarId(0))],
        |_, ix, _| Expr::from(ix[0]) + Expr::from(ix[1]) * 10 + Expr::from(ix[2]) * 100,
    );
    let mut args = [Arg::I32(4), Arg::Buffer(vec![POISON; 4 << 12])];
    run(&p, &mut args).unwrap();
    let out = out_i32(&args, 24);
    for (i, v) in out.iter().enumerate() {
        let (x, y, z) = (i % 2, i / 2 % 3, i / 6);
        assert_eq!(*v as usize, x + 10 * y + 100 * z);
    }
}

#[test]
fn loops_and_conditions() {
    // sum of i*i over i < n with i odd, computed with while, for and if.
    let p = scalar_kernel(vec![Expr::Int(1)], |b, _, n| {
        let acc = b.let_("acc", ScalarType::I32, Expr::Int(0));
        b.for_range("i", 0.into(), n.into(), |b, i| {
            let odd = Expr::binary(BinaryOp::Eq, Expr::from(i) % 2, 1);
            b.if_else(
                odd,
                |b| b.assign(acc, Expr::from(acc) + Expr::from(i) * i),
                |_| {},
            );
        });
        let j = b.let_("j", ScalarType::I32, Expr::Int(0));
        b.while_(Expr::binary(BinaryOp::Lt, j, 5), |b| {
            b.assign(j, Expr::from(j) + 2)
        });
        Expr::from(acc) * 10 + j
    });
    let n = rand::rng().random_range(5..50);
    let mut args = [Arg::I32(n), Arg::Buffer(vec![POISON; 4 << 12])];
    run(&p, &mut args).unwrap();
    let want: i32 = (0..n).filter(|i| i % 2 == 1).map(|i| i * i).sum();
    assert_eq!(out_i32(&args, 1), vec![want * 10 + 6]);
}

#[test]
fn scalar_overflow_and_division_by_zero_are_errors() {
    let p = scalar_kernel(vec![Expr::Int(1)], |_, _, n| Expr::from(n) * n);
    let mut args = [Arg::I32(1 << 16), Arg::Buffer(vec![0; 4 << 12])];
    contains_all(
        &run_err(&p, &mut args).message,
        &["i32 overflow: 65536 * 65536"],
    );
    let p = scalar_kernel(vec![Expr::Int(1)], |b, _, n| {
        let q = b.let_("q", ScalarType::I32, Expr::Int(7) / n);
        q.into()
    });
    let mut args = [Arg::I32(0), Arg::Buffer(vec![0; 4 << 12])];
    contains_all(
        &run_err(&p, &mut args).message,
        &["`q` = ...: division by zero: 7 / 0"],
    );
}

#[test]
fn exit_ends_the_block() {
    // Blocks with an odd index exit before storing.
    let mut b = ProgramBuilder::new("exit", 32);
    let out = b.param_ptr("out", DType::Int(32), true);
    b.grid(vec![Expr::Int(8)]);
    let ix = b.block_indices(&["bx"]);
    let odd = Expr::binary(BinaryOp::Eq, Expr::from(ix[0]) % 2, 1);
    b.if_else(odd, |b| b.exit(), |_| {});
    let r = b.allocate_register("r", DType::Int(32), l("local(1)"), Some(5.0));
    let g = b.view_global("g", out, DType::Int(32), vec![Expr::Int(8)]);
    b.store_global(r, g, vec![ix[0].into()]);
    let mut args = [Arg::Buffer(vec![POISON; 32])];
    run(&b.finish(), &mut args).unwrap();
    let out: Vec<i32> = bytes(&args[0])
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(out, vec![5, -1, 5, -1, 5, -1, 5, -1]);
}

#[test]
fn allocate_global_scratch_is_zeroed_and_shared_by_blocks() {
    // Each block adds its index into scratch[0] (blocks run in order), then writes the total.
    let mut b = ProgramBuilder::new("scratch", 32);
    let out = b.param_ptr("out", DType::Int(32), true);
    b.grid(vec![Expr::Int(5)]);
    let ix = b.block_indices(&["bx"]);
    let s = b.allocate_global("s", DType::Int(32), vec![Expr::Int(1)]);
    let x = b.load_global("x", s, l("local(1)"), vec![0.into()]);
    let y = b.binary("y", ElementOp::Add, x, Operand::Scalar(ix[0].into()));
    b.store_global(y, s, vec![0.into()]);
    let g = b.view_global("g", out, DType::Int(32), vec![Expr::Int(5)]);
    b.store_global(y, g, vec![ix[0].into()]);
    let mut args = [Arg::Buffer(vec![POISON; 20])];
    run(&b.finish(), &mut args).unwrap();
    let out: Vec<i32> = bytes(&args[0])
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(out, vec![0, 1, 3, 6, 10]);
}

#[test]
fn print_runs() {
    let mut b = ProgramBuilder::new("print", 32);
    b.grid(vec![Expr::Int(1)]);
    let r = b.allocate_register("r", DType::F16, l("spatial(4,8)"), Some(1.5));
    b.print("r", Operand::Tensor(r));
    b.print("answer", Operand::Scalar(Expr::Int(6) * 7));
    run(&b.finish(), &mut []).unwrap();
}

#[test]
fn sub_byte_elements_of_different_threads_in_one_byte_race() {
    let mut b = ProgramBuilder::new("nibbles", 32);
    b.grid(vec![Expr::Int(1)]);
    let s = b.allocate_shared("s", DType::UInt(4), SharedLayout::row_major(&[32]));
    let x = b.allocate_register("x", DType::UInt(4), l("spatial(32)"), Some(3.0));
    b.store_shared(x, s, vec![0.into()]);
    let e = run_err(&b.finish(), &mut []);
    contains_all(
        &e.message,
        &[
            "thread 1 writes [1], which thread 0 wrote",
            "sub-byte elements of different threads share a byte",
        ],
    );
}

#[test]
fn dot_accumulator_overflow_is_an_error() {
    let p = dot_kernel(
        DType::Int(8),
        DType::Int(32),
        32,
        (l("local(1,64)"), l("local(64,1)"), l("local(1,1)")),
    );
    // 64 * 127 * 127 + (2^31 - 1 - 1000) overflows i32.
    let c = (i32::MAX - 1000).to_le_bytes().to_vec();
    let mut args = [
        Arg::Buffer(vec![127; 64]),
        Arg::Buffer(vec![127; 64]),
        Arg::Buffer(c),
    ];
    contains_all(
        &run_err(&p, &mut args).message,
        &["dot: `rc`[0, 0]: the result", "overflows i32"],
    );
}

// ---- mul_add and reordering casts ----------------------------------------------------------

/// `out = x * s + y` with `s` broadcast over rows, then a cast to f16 that reorders each
/// thread's locals: every element rounds once (against the platform's fused multiply-add), and
/// lands at its own index.
#[test]
fn mul_add_rounds_once_and_cast_to_keeps_indices() {
    let (m, n) = (8, 16);
    let lay = l("spatial(4,8).local(2,2)");
    let reordered = lay.swap_inner_locals(2, 2).unwrap();
    let mut b = ProgramBuilder::new("fma", 32);
    let xp = b.param_ptr("x", DType::F32, false);
    let sp = b.param_ptr("s", DType::F32, false);
    let yp = b.param_ptr("y", DType::F32, false);
    let op = b.param_ptr("out", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    let gx = b.view_global("gx", xp, DType::F32, vec![Expr::Int(m), Expr::Int(n)]);
    let gy = b.view_global("gy", yp, DType::F32, vec![Expr::Int(m), Expr::Int(n)]);
    let gs = b.view_global("gs", sp, DType::F32, vec![Expr::Int(1), Expr::Int(n)]);
    let go = b.view_global("go", op, DType::F16, vec![Expr::Int(m), Expr::Int(n)]);
    let z = || vec![Expr::Int(0), Expr::Int(0)];
    let x = b.load_global("x", gx, lay.clone(), z());
    let y = b.load_global("y", gy, lay.clone(), z());
    let s = b.load_global("s", gs, lay.reduce(&[0]).unwrap(), z());
    let f = b.mul_add("f", x, Operand::Tensor(s), y);
    let h = b.cast_to("h", f, DType::F16, reordered);
    b.store_global(h, go, z());
    let p = b.finish();

    let mut rng = rand::rng();
    let gen = |len: usize, rng: &mut rand::rngs::ThreadRng| -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-8.0f32..8.0)).collect()
    };
    let (xs, ys, ss) = (
        gen(m as usize * n as usize, &mut rng),
        gen(m as usize * n as usize, &mut rng),
        gen(n as usize, &mut rng),
    );
    let le = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut args = vec![
        Arg::Buffer(le(&xs)),
        Arg::Buffer(le(&ss)),
        Arg::Buffer(le(&ys)),
        Arg::Buffer(poisoned(DType::F16, (m * n) as usize)),
    ];
    run(&p, &mut args).unwrap();
    let got = decode(DType::F16, bytes(&args[3]), (m * n) as usize);
    for i in 0..m as usize {
        for (j, &s) in ss.iter().enumerate() {
            let k = i * n as usize + j;
            let want = half::f16::from_f32(xs[k].mul_add(s, ys[k])).to_f64();
            assert_eq!(got[k], want, "[{i}, {j}]");
        }
    }
}
