//! The verifier's resource limits (`tilus_core::verify::limits`): each rejection at the span of
//! the offending statement, naming what is too big, its size and the limit, and every one of
//! them reached in bounded time however large the request.

use std::time::{Duration, Instant};
use tilus_core::codegen::emit;
use tilus_core::ir::{ElementOp, Expr, Operand, Program, ProgramBuilder, SpanId};
use tilus_core::layout::{parse, Layout, SharedLayout};
use tilus_core::verify::{
    check_limits, max_register_words, verify, Diagnostic, Target, MAX_UNROLLED_OPS,
};
use tilus_core::DType;

// The paper programs are example material of the facade (`tilus::programs`).
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

fn l(text: &str) -> Layout {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A kernel of `threads` threads, grid `[1]`, program span 1000.
fn kernel(threads: u32) -> ProgramBuilder {
    let mut b = ProgramBuilder::new("k", threads);
    b.set_program_span(SpanId(1000));
    b.grid(vec![Expr::Int(1)]);
    b
}

/// `register::<dtype>(layout)` at span 7, then a use at span 8.
fn register(threads: u32, dtype: DType, layout: Layout) -> Program {
    let mut b = kernel(threads);
    b.set_span(SpanId(7));
    let x = b.allocate_register("x", dtype, layout, Some(0.0));
    b.set_span(SpanId(8));
    b.print("x", Operand::Tensor(x));
    b.finish()
}

/// Rejected within a second with exactly one diagnostic at `span` containing every needle.
fn rejected(p: &Program, span: u32, needles: &[&str]) -> Diagnostic {
    let start = Instant::now();
    let d = verify(p, &Target::default()).expect_err("the program should be rejected");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
    assert_eq!(d[0].span, SpanId(span), "{d:#?}");
    for n in needles {
        assert!(d[0].message.contains(n), "`{n}` not in: {}", d[0].message);
    }
    d[0].clone()
}

fn accepted(p: &Program) {
    if let Err(d) = verify(p, &Target::default()) {
        panic!("unexpected diagnostics: {d:#?}");
    }
}

#[test]
fn register_words_are_the_blocks_share_of_the_register_file() {
    assert_eq!(max_register_words(128), 512);
    assert_eq!(max_register_words(1024), 64);
    assert_eq!(max_register_words(32), 2048);
    // At the limit: 512 words per thread of 128 (f32, f16, packed u1), 64 per thread of 1024.
    accepted(&register(128, DType::F32, l("local(16, 32)")));
    accepted(&register(128, DType::F16, l("local(32, 32)")));
    accepted(&register(128, DType::UInt(1), l("local(128, 128)")));
    accepted(&register(1024, DType::F32, l("spatial(1024).local(64)")));
    // Just over.
    rejected(
        &register(128, DType::F32, l("local(16, 33)")),
        7,
        &[
            "register tensor `x`: each thread holds 528 f32 elements in 528 32-bit registers, \
             more than the limit of 512 (a block's 65536 registers over 128 threads)",
        ],
    );
    rejected(
        &register(128, DType::UInt(1), l("local(16385)")),
        7,
        &["16385 u1 elements in 513 32-bit registers", "limit of 512"],
    );
    rejected(
        &register(1024, DType::F32, l("spatial(1024).local(65)")),
        7,
        &["65 f32 elements", "limit of 64", "over 1024 threads"],
    );
}

/// Sub-byte tensors are capped by (thread, local) pairs, the size of the per-element tables; the
/// largest accepted one, broadcast against itself, still verifies quickly.
#[test]
fn layout_cells_are_bounded() {
    let add = |layout: &str| {
        let mut b = kernel(128);
        b.set_span(SpanId(7));
        let x = b.allocate_register("x", DType::UInt(1), l(layout), Some(0.0));
        b.binary(x, ElementOp::Add, x, Operand::Tensor(x));
        b.finish()
    };
    let start = Instant::now();
    accepted(&add("spatial(128).local(4096)"));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    rejected(
        &add("spatial(128).local(4097)"),
        7,
        &[
            "register tensor `x`: the layout has 128 threads x 4097 locals = 524416 (thread, \
             local) pairs, more than the limit of 524288",
        ],
    );
}

#[test]
fn huge_layouts_are_rejected_at_once() {
    for (dtype, layout, needle) in [
        (DType::F32, "local(2147483647)", "2147483647 f32 elements"),
        (DType::F16, "local(65536, 65536)", "4294967296 f16 elements"),
        (
            DType::F16,
            "spatial(65536, 65536)",
            "the layout spans 4294967296 threads; a block has at most 1024",
        ),
        (
            DType::F16,
            "spatial(32, 1, 1).local(65536, 65536, 65536)",
            "281474976710656 f16 elements",
        ),
    ] {
        rejected(
            &register(128, dtype, l(layout)),
            7,
            &["register tensor `x`", needle],
        );
    }
}

/// The paper's programs with huge tiles: the limits stop them before the dot's layout tables
/// (which took gigabytes for `BM = 2^31`).
#[test]
fn huge_paper_tiles_are_rejected_before_any_table() {
    let start = Instant::now();
    for p in [
        programs::matmul_f16_int(DType::Int(6), 1 << 27, 64, 64),
        programs::matmul_f16_int(DType::Int(6), 65536, 4096, 4096),
        programs::relayout_int(DType::Int(6), 65536, 64),
        programs::matmul_f16_pipelined(1 << 20, 64, 32, 3),
    ] {
        let d = verify(&p, &Target::default()).expect_err("too big");
        assert!(
            d.iter().all(|d| d
                .message
                .contains("32-bit registers, more than the limit of 512")),
            "{}: {d:#?}",
            p.name
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn shared_sizes_do_not_overflow() {
    let mut b = kernel(128);
    b.set_span(SpanId(5));
    b.allocate_shared(
        "s",
        DType::F32,
        SharedLayout::row_major(&[1 << 40, 1 << 40]),
    );
    rejected(
        &b.finish(),
        5,
        &[
            "allocate_shared `s`: the shape [1099511627776, 1099511627776]",
            "more than 2^64 bytes",
        ],
    );
    // Representable but over the target: the usual total, at the program span.
    let mut b = kernel(128);
    b.set_span(SpanId(5));
    b.allocate_shared(
        "s",
        DType::F32,
        SharedLayout::row_major(&[1 << 20, 1 << 20]),
    );
    rejected(
        &b.finish(),
        1000,
        &[
            "4398046511104 bytes of shared memory",
            "more than the target's 232448 bytes",
        ],
    );
}

#[test]
fn unrolled_operations_are_bounded() {
    // 300 negations of 512 locals: about 300 x 1025 operations per thread.
    let mut b = kernel(128);
    b.set_span(SpanId(7));
    let x = b.allocate_register("x", DType::F32, l("local(16, 32)"), Some(1.0));
    for i in 0..300 {
        b.set_span(SpanId(10 + i));
        b.neg(x, x);
    }
    let d = rejected(
        &b.finish(),
        10,
        &[
            "the kernel unrolls to 308013 element operations per thread, more than the limit of \
             131072; the largest is `neg` (1025)",
        ],
    );
    assert!(d.message.contains(&MAX_UNROLLED_OPS.to_string()));

    // One thread-local dot of 32 x 64 x k on one warp: 2048 c locals times k multiply-adds.
    let dot = |k: usize| {
        let mut b = kernel(32);
        let a = b.allocate_register("a", DType::F16, l(&format!("local(32, {k})")), Some(1.0));
        let w = b.allocate_register("w", DType::F16, l(&format!("local({k}, 64)")), Some(1.0));
        let acc = b.allocate_register("acc", DType::F32, l("local(32, 64)"), Some(0.0));
        b.set_span(SpanId(9));
        b.dot(acc, a, w, acc);
        b.finish()
    };
    accepted(&dot(32));
    rejected(
        &dot(64),
        9,
        &[
            "element operations per thread",
            "the largest is the `dot` into `acc` (1",
        ],
    );
}

/// The code generator checks the limits itself, for programs that skipped the verifier.
#[test]
fn emit_checks_the_limits_of_unverified_programs() {
    let p = register(128, DType::F32, l("local(2147483647)"));
    let e = emit(&p, &Default::default()).expect_err("too big");
    assert_eq!(e.span, SpanId(7));
    assert!(e.message.contains("more than the limit of 512"), "{e}");
    assert!(check_limits(&p).is_err());
    assert!(check_limits(&register(128, DType::F32, l("local(16, 32)"))).is_ok());
}

/// Operands of every kind count: a scalar or immediate right operand adds nothing.
#[test]
fn scalar_operands_are_free() {
    let mut b = kernel(128);
    let x = b.allocate_register("x", DType::F32, l("local(16, 32)"), Some(1.0));
    for _ in 0..100 {
        b.binary(x, ElementOp::Add, x, Operand::Imm(1.0));
    }
    accepted(&b.finish());
}
