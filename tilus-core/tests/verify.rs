//! Every rejection of the verifier, each at the span of the offending statement.

use tilus_core::ir::{
    BinaryOp, ElementOp, Expr, Operand, Program, ProgramBuilder, ScalarType, SpanId, VarId, VarType,
};
use tilus_core::layout::{parse, Layout, SharedLayout};
use tilus_core::verify::{plan_dot, verify, Diagnostic, DotPlan, MmaKind, Target};
use tilus_core::DType;

// The paper programs are example material of the facade (`tilus::programs`), included by
// path: the core crate must not depend on the facade.
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

fn l(text: &str) -> Layout {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A kernel with `m` and pointers `a` (f16, read-only) and `c` (f16, mutable), grid `[1]`.
struct K {
    b: ProgramBuilder,
    m: VarId,
    a: VarId,
    c: VarId,
}

fn kernel(threads: u32) -> K {
    let mut b = ProgramBuilder::new("k", threads);
    b.set_program_span(SpanId(1000));
    let m = b.param_i32("m");
    let a = b.param_ptr("a", DType::F16, false);
    let c = b.param_ptr("c", DType::F16, true);
    b.grid(vec![Expr::Int(1)]);
    K { b, m, a, c }
}

impl K {
    fn at(&mut self, span: u32) -> &mut ProgramBuilder {
        self.b.set_span(SpanId(span));
        &mut self.b
    }
    fn finish(self) -> Program {
        self.b.finish()
    }
}

fn diags(p: &Program) -> Vec<Diagnostic> {
    verify(p, &Target::default()).expect_err("the program should be rejected")
}

/// Exactly one diagnostic, at `span`, containing every needle.
fn one(p: &Program, span: u32, needles: &[&str]) {
    let d = diags(p);
    assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
    assert_eq!(d[0].span, SpanId(span), "{d:#?}");
    for n in needles {
        assert!(d[0].message.contains(n), "`{n}` not in: {}", d[0].message);
    }
}

fn ok(p: &Program) {
    if let Err(d) = verify(p, &Target::default()) {
        panic!("unexpected diagnostics: {d:#?}");
    }
}

#[test]
fn accepts_a_small_valid_program() {
    let mut k = kernel(128);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g =
        k.b.view_global("g", _a, DType::F16, vec![_m.into(), Expr::Int(64)]);
    let x = k.b.load_global(
        "x",
        g,
        l("spatial(16,8).local(1,8)"),
        vec![0.into(), 0.into()],
    );
    let gc =
        k.b.view_global("gc", _c, DType::F16, vec![_m.into(), Expr::Int(64)]);
    k.b.store_global(x, gc, vec![0.into(), 0.into()]);
    ok(&k.finish());
}

#[test]
fn accepts_the_paper_programs() {
    ok(&programs::matmul_f16_i6(16, 64, 16));
    ok(&programs::matmul_f16_i6(64, 128, 64));
    ok(&programs::relayout_i6(32, 128));
    for stages in [2, 3, 4] {
        ok(&programs::matmul_f16_pipelined(32, 128, 32, stages));
    }
}

// ---- kernel header -------------------------------------------------------------------------

#[test]
fn rejects_grid_rank_zero_and_four() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.b.grid(vec![]);
    one(&k.finish(), 1000, &["grid has 0 dimensions"]);
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.b.grid(vec![Expr::Int(1); 4]);
    one(&k.finish(), 1000, &["grid has 4 dimensions"]);
}

#[test]
fn rejects_non_positive_constant_grid_extent() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.b.grid(vec![Expr::Int(4), Expr::Int(0)]);
    one(&k.finish(), 1000, &["grid extent 1 is 0"]);
}

#[test]
fn rejects_grid_over_non_parameters() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k.at(3).let_("x", ScalarType::I32, Expr::Int(2));
    k.b.grid(vec![Expr::from(x)]);
    let d = diags(&k.finish());
    assert!(
        d[0].message
            .contains("uses `x`, which is not a kernel parameter"),
        "{d:#?}"
    );
}

#[test]
fn rejects_bad_thread_counts() {
    for (threads, needle) in [
        (0, "positive multiple of 32"),
        (48, "positive multiple of 32"),
        (2048, "at most 1024"),
    ] {
        one(&kernel(threads).finish(), 1000, &[needle]);
    }
}

// ---- definitions and scalars ---------------------------------------------------------------

#[test]
fn rejects_use_before_definition() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let later = k.b.new_var("later", VarType::Scalar(ScalarType::I32));
    k.at(5).let_("y", ScalarType::I32, Expr::from(later) + 1);
    k.at(6).assign(later, Expr::Int(3));
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_eq!(d[0].span, SpanId(5));
    assert!(d[0]
        .message
        .contains("`later` is used before it is defined"));
    assert_eq!(d[1].span, SpanId(6));
}

#[test]
fn rejects_use_outside_the_defining_block() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let mut inner = None;
    k.at(2).for_range("i", 0.into(), 4.into(), |b, i| {
        inner = Some(b.let_("sq", ScalarType::I32, Expr::from(i) * i));
    });
    k.at(7)
        .let_("after", ScalarType::I32, Expr::from(inner.unwrap()));
    one(
        &k.finish(),
        7,
        &["`sq` is used before it is defined (or outside the block"],
    );
}

#[test]
fn rejects_scalar_type_errors() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(1).if_else(Expr::Int(1), |_| {}, |_| {});
    k.at(2).let_(
        "bad",
        ScalarType::I32,
        Expr::binary(BinaryOp::Add, Expr::Bool(true), 1),
    );
    k.at(3).while_(Expr::from(_m), |_| {});
    k.at(4).let_("flag", ScalarType::Bool, Expr::Int(3));
    let d = diags(&k.finish());
    let spans: Vec<u32> = d.iter().map(|d| d.span.0).collect();
    assert_eq!(spans, vec![1, 2, 3, 4], "{d:#?}");
    assert!(d[0]
        .message
        .contains("condition of an if must be bool, found i32"));
    assert!(d[1]
        .message
        .contains("`+` needs i32 operands, found bool and i32"));
    assert!(d[2]
        .message
        .contains("condition of a while loop must be bool"));
    assert!(d[3]
        .message
        .contains("let `flag`: the variable is bool but the value is i32"));
}

#[test]
fn rejects_tensor_in_scalar_expression() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k.at(1).view_global("g", _a, DType::F16, vec![Expr::Int(8)]);
    k.at(2).let_("x", ScalarType::I32, Expr::from(g) + 1);
    one(
        &k.finish(),
        2,
        &[
            "`g` is a global f16 tensor",
            "cannot be used in a scalar expression",
        ],
    );
}

#[test]
fn rejects_assignment_to_loop_variable() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(3).for_range("i", 0.into(), 4.into(), |b, i| {
        b.set_span(SpanId(4));
        b.assign(i, Expr::Int(0));
    });
    one(&k.finish(), 4, &["`i` is a loop variable"]);
}

#[test]
fn rejects_block_indices_of_wrong_rank() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(2).block_indices(&["bi", "bj"]);
    one(&k.finish(), 2, &["binds 2 indices, but the grid has 1"]);
}

// ---- memory scopes -------------------------------------------------------------------------

#[test]
fn rejects_load_global_from_shared() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let s = k
        .at(1)
        .allocate_shared("s", DType::F16, SharedLayout::row_major(&[32]));
    k.at(2)
        .load_global("x", s, l("spatial(32)"), vec![0.into()]);
    one(
        &k.finish(),
        2,
        &["load_global: the source `s` must be a global tensor, but it is a shared"],
    );
}

#[test]
fn rejects_copy_async_into_registers() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![Expr::Int(32)]);
    let r = k
        .at(2)
        .allocate_register("r", DType::F16, l("spatial(32)"), None);
    k.at(3).copy_async(r, g, vec![0.into()]);
    one(
        &k.finish(),
        3,
        &[
            "destination `r` must be a shared tensor",
            "but it is a register f16[32] tensor",
        ],
    );
}

#[test]
fn rejects_store_to_read_only_view() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("ga", _a, DType::F16, vec![Expr::Int(32)]);
    let r = k
        .at(2)
        .allocate_register("r", DType::F16, l("spatial(32)"), Some(1.0));
    k.at(3).store_global(r, g, vec![0.into()]);
    one(&k.finish(), 3, &["`ga` is a view of read-only pointer `a`"]);
}

#[test]
fn rejects_view_global_of_non_pointer() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let m = _m;
    k.at(4).view_global("g", m, DType::F16, vec![Expr::Int(32)]);
    one(&k.finish(), 4, &["`m` must be a pointer parameter"]);
}

/// A shared operand selects the warpgroup MMA, which reads `b` from shared memory: a register
/// right operand is named.
#[test]
fn rejects_dot_mixing_shared_and_register_operands() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let s = k
        .at(1)
        .allocate_shared("sa", DType::F16, SharedLayout::row_major(&[16, 16]));
    let rb = k
        .at(2)
        .allocate_register("rb", DType::F16, programs::mma_b(), Some(1.0));
    let acc = k
        .at(3)
        .allocate_register("acc", DType::F32, programs::mma_c(), Some(0.0));
    k.at(4).dot(acc, s, rb, acc);
    one(
        &k.finish(),
        4,
        &["dot: the right operand `rb` must be a shared tensor (a dot with a shared operand runs on wgmma: b from shared memory, a from shared memory or registers)"],
    );
}

/// The RS form of wgmma: a register `a` in the A fragment tiles of `c` is accepted; one in
/// another layout is named, with the layout to write; a shared `b` that is not k-major is
/// named.
#[test]
fn dot_with_a_register_a_and_a_shared_b() {
    let build = |a_layout: &str, b_strides: [usize; 2]| {
        let mut k = kernel(256);
        let ra = k
            .at(1)
            .allocate_register("ra", DType::F16, l(a_layout), Some(1.0));
        let sb = k.at(2).allocate_shared(
            "sb",
            DType::F16,
            SharedLayout::strided(&[64, 128], &b_strides)
                .unwrap()
                .with_swizzle(tilus_core::verify::wgmma::SWIZZLE_128B),
        );
        let acc = k.at(3).allocate_register(
            "acc",
            DType::F32,
            l("spatial(2, 1).spatial(4, 1).local(1, 16).mma_c"),
            Some(0.0),
        );
        k.at(4).dot(acc, ra, sb, acc);
        k.finish()
    };
    let good = "spatial(2, 1).spatial(4, 1).local(1, 4).mma_a";
    ok(&build(good, [1, 64]));
    one(
        &build(
            "spatial(1, 2).local(2, 1).spatial(4, 1).local(1, 2).mma_a",
            [1, 64],
        ),
        4,
        &[
            "cannot serve `ra` (registers), `sb` and `acc`",
            "the register operand a is not warpgroup tiles of the wgmma A fragment",
            "help: write it as `spatial(2, 1).spatial(4, 1).local(1, 4).mma_a`",
        ],
    );
    one(
        &build(good, [128, 1]),
        4,
        &["the shared operand b is not k-major"],
    );
}

// ---- shapes --------------------------------------------------------------------------------

#[test]
fn rejects_offsets_of_wrong_rank() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![_m.into(), Expr::Int(64)]);
    k.at(2)
        .load_global("x", g, l("spatial(4,8)"), vec![0.into()]);
    one(
        &k.finish(),
        2,
        &["the offset has rank 1 but `g` has rank 2"],
    );
}

#[test]
fn rejects_tile_larger_than_static_trailing_dims() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![_m.into(), Expr::Int(8)]);
    k.at(2)
        .load_global("x", g, l("spatial(2,16)"), vec![0.into(), 0.into()]);
    one(
        &k.finish(),
        2,
        &["tile [2, 16] is larger than the trailing dims [?, 8] of `g`"],
    );
}

#[test]
fn rejects_tile_of_higher_rank() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![Expr::Int(64)]);
    k.at(2)
        .load_global("x", g, l("spatial(4,8)"), vec![0.into()]);
    one(&k.finish(), 2, &["higher rank than `g`"]);
}

#[test]
fn rejects_store_into_smaller_shared_tensor() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let s = k
        .at(1)
        .allocate_shared("s", DType::F16, SharedLayout::row_major(&[4, 4]));
    let r = k
        .at(2)
        .allocate_register("r", DType::F16, l("spatial(4,8)"), Some(0.5));
    k.at(3).store_shared(r, s, vec![0.into(), 0.into()]);
    one(
        &k.finish(),
        3,
        &["store_shared: the tile [4, 8] is larger than the trailing dims [4, 4] of `s`"],
    );
}

#[test]
fn rejects_shared_tile_outside_at_constant_offset() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let s = k
        .at(1)
        .allocate_shared("s", DType::F16, SharedLayout::row_major(&[2, 8, 8]));
    k.at(2)
        .slice_shared("s2", s, vec![2.into(), 0.into(), 0.into()], vec![8, 8]);
    one(
        &k.finish(),
        2,
        &["slice_shared: the tile [8, 8] at offset [2, 0, 0] lies outside `s`"],
    );
}

#[test]
fn rejects_binary_shapes_that_do_not_broadcast() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(4,8)"), Some(1.0));
    let y = k
        .at(2)
        .allocate_register("y", DType::F32, l("local(3)"), Some(1.0));
    k.at(3).binary("z", ElementOp::Add, x, Operand::Tensor(y));
    one(
        &k.finish(),
        3,
        &[
            "add: `y` cannot be broadcast to `x`",
            "shape [3] does not broadcast to [4, 8]",
        ],
    );
}

#[test]
fn rejects_store_and_copy_dtype_mismatch() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("gc", _c, DType::F16, vec![Expr::Int(32)]);
    let r = k
        .at(2)
        .allocate_register("r", DType::F32, l("spatial(32)"), Some(1.0));
    k.at(3).store_global(r, g, vec![0.into()]);
    let s = k
        .at(4)
        .allocate_shared("s", DType::F32, SharedLayout::row_major(&[32]));
    k.at(5).copy_async(s, g, vec![0.into()]);
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_eq!((d[0].span, d[1].span), (SpanId(3), SpanId(5)));
    assert!(d[0].message.contains("`r` holds f32 but `gc` holds f16"));
    assert!(d[1].message.contains("`s` holds f32 but `gc` holds f16"));
}

// ---- register layouts ----------------------------------------------------------------------

#[test]
fn rejects_layout_threads_not_dividing_the_block() {
    let mut k = kernel(128);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(1)
        .allocate_register("x", DType::F32, l("spatial(3,32)"), None);
    k.at(2)
        .allocate_register("y", DType::F32, l("spatial(16,16)"), None);
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0]
        .message
        .contains("spans 96 threads, which is neither the block's 128 threads nor a divisor"));
    assert!(d[1].message.contains("spans 256 threads"));
}

#[test]
fn accepts_replicated_layouts() {
    let mut k = kernel(128);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(1)
        .allocate_register("x", DType::F32, l("spatial(4,8)"), None);
    k.at(2)
        .allocate_register("y", DType::F32, l("reduce(spatial(4,32), [0])"), None);
    ok(&k.finish());
}

#[test]
fn rejects_view_changing_thread_count() {
    let mut k = kernel(64);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::UInt(8), l("spatial(64).local(3)"), None);
    k.at(2)
        .view("y", x, DType::Int(6), l("spatial(32).local(4)"));
    one(
        &k.finish(),
        2,
        &["view: `y` spreads over 32 threads but `x` over 64"],
    );
}

#[test]
fn rejects_view_changing_bits_per_thread() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::UInt(8), l("spatial(32).local(3)"), None);
    k.at(2)
        .view("y", x, DType::Int(6), l("spatial(32).local(5)"));
    one(
        &k.finish(),
        2,
        &[
            "each thread holds 24 bits of `x` (3 x u8) but `y` needs 30 bits (5 x i6)",
            "help: as i6, each thread's 24 bits are 4 locals",
        ],
    );
}

#[test]
fn rejects_redefinition_with_another_type() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![Expr::Int(64)]);
    let x = k
        .at(2)
        .load_global("x", g, l("spatial(32).local(2)"), vec![0.into()]);
    k.at(3)
        .load_global(x, g, l("local(2).spatial(32)"), vec![0.into()]);
    one(
        &k.finish(),
        3,
        &[
            "load_global: `x` is a register f16[64] tensor",
            "(the layouts differ)",
        ],
    );
}

// ---- dot -----------------------------------------------------------------------------------

fn dot_kernel(a: (DType, Layout), b: (DType, Layout), c: (DType, Layout)) -> Program {
    let mut k = kernel(128);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let ra = k.at(1).allocate_register("ra", a.0, a.1, Some(1.0));
    let rb = k.at(2).allocate_register("rb", b.0, b.1, Some(1.0));
    let acc = k.at(3).allocate_register("acc", c.0, c.1, Some(0.0));
    k.at(4).dot(acc, ra, rb, acc);
    k.finish()
}

#[test]
fn rejects_dot_shape_mismatch() {
    let p = dot_kernel(
        (DType::F32, l("local(4,8)")),
        (DType::F32, l("local(4,8)")),
        (DType::F32, l("local(4,8)")),
    );
    one(
        &p,
        4,
        &["dot: shapes do not agree: `ra` is [4, 8], `rb` is [4, 8], `acc` is [4, 8]"],
    );
}

#[test]
fn rejects_dot_dtypes() {
    let p = dot_kernel(
        (DType::F16, l("local(4,8)")),
        (DType::F32, l("local(8,4)")),
        (DType::F32, l("local(4,4)")),
    );
    one(&p, 4, &["`ra` holds f16 but `rb` holds f32"]);
    let p = dot_kernel(
        (DType::F16, programs::mma_a()),
        (DType::F16, programs::mma_b()),
        (DType::F16, programs::mma_c()),
    );
    one(
        &p,
        4,
        &["the accumulator `acc` must be f32 for f16 operands, but it is f16"],
    );
    let p = dot_kernel(
        (DType::Int(8), l("local(4,8)")),
        (DType::Int(8), l("local(8,4)")),
        (DType::F32, l("local(4,4)")),
    );
    one(&p, 4, &["must be i32 for i8 operands"]);
}

#[test]
fn rejects_dot_layouts_no_implementation_serves() {
    // Threads hold rows of `a` that do not match the rows of `c` they compute, and the
    // layouts are not mma fragments.
    let p = dot_kernel(
        (DType::F16, l("column_spatial(16,8).local(1,2)")),
        (DType::F16, l("local(16,8)")),
        (DType::F32, l("spatial(16,8)")),
    );
    one(
        &p,
        4,
        &[
            "no thread-level or warp-level implementation serves the layouts of `ra`, `rb` and `acc`",
            "thread-local: thread 0 computes c[0, 0] but does not hold a[0, 2]",
            "mma.m16n8k16: the layout of a is not warp tiles",
            "help: write it as `<warp tiles>.mma_a`, e.g. `spatial(..).local(..).mma_a`, where `mma_a` is the m16n8k16 a fragment `column_local(2,2).spatial(8,4).local(1,2)`",
        ],
    );
}

#[test]
fn rejects_dot_with_thread_dependent_local() {
    // Every thread holds all of `a` (replicated), but row `t` of `c` needs local `t`.
    let p = dot_kernel(
        (DType::F32, l("local(128,1)")),
        (DType::F32, l("local(1,1)")),
        (DType::F32, l("spatial(128,1)")),
    );
    one(
        &p,
        4,
        &[
            "at local 1, but thread 0 holds its operand at local 0",
            "must not depend on the thread",
        ],
    );
}

#[test]
fn plans_thread_local_and_mma_dots() {
    let reg = |dtype, layout| tilus_core::ir::RegisterType { dtype, layout };
    // Outer products per thread: each thread owns its rows of a and c, and all of b.
    let plan = plan_dot(
        &reg(DType::F32, l("spatial(128,1).local(1,8)")),
        &reg(DType::F32, l("local(8,4)")),
        &reg(DType::F32, l("spatial(128,1).local(1,4)")),
        128,
        &Target::default(),
    );
    assert_eq!(plan, Ok(DotPlan::ThreadLocal));
    // A target without the m16n8k16 mma: the thread-local plan, or none, never an mma.
    let no_mma = Target {
        mma: &[],
        ..Target::SM80
    };
    let plan = plan_dot(
        &reg(DType::F16, programs::a_tile(32, 32)),
        &reg(DType::F16, programs::b_tile(32, 128)),
        &reg(DType::F32, programs::c_tile(32, 128)),
        128,
        &no_mma,
    );
    assert!(
        matches!(&plan, Err(m) if m.contains("has no m16n8k16 mma")),
        "{plan:?}"
    );
    let plan = plan_dot(
        &reg(DType::F16, programs::a_tile(32, 32)),
        &reg(DType::F16, programs::b_tile(32, 128)),
        &reg(DType::F32, programs::c_tile(32, 128)),
        128,
        &Target::default(),
    )
    .unwrap();
    let DotPlan::Mma { kind, a, b, c } = plan else {
        panic!("expected mma, got {plan:?}")
    };
    assert_eq!(kind, MmaKind::F16);
    assert_eq!(a, l("local(2,2)"));
    assert_eq!(b, l("spatial(1,4).local(2,4)"));
    assert_eq!(c, l("spatial(1,4).local(2,4)"));
    // i8 operands with the int8 m16n8k16 fragments.
    let frag = tilus_core::verify::mma_fragments(MmaKind::I8);
    let plan = plan_dot(
        &reg(DType::Int(8), frag[0].clone()),
        &reg(DType::Int(8), frag[1].clone()),
        &reg(DType::Int(32), frag[2].clone()),
        32,
        &Target::default(),
    );
    assert!(
        matches!(
            plan,
            Ok(DotPlan::Mma {
                kind: MmaKind::I8,
                ..
            })
        ),
        "{plan:?}"
    );
    // 8-bit integers on the k32 fragments: m16n8k32, for one signedness or a mixed pair; a mixed
    // pair on the k16 fragments has no mma, and the error names the k32 shape.
    let f32s = tilus_core::verify::mma_fragments(MmaKind::E4M3);
    for (da, db) in [
        (DType::UInt(8), DType::Int(8)),
        (DType::Int(8), DType::UInt(8)),
        (DType::UInt(8), DType::UInt(8)),
        (DType::Int(8), DType::Int(8)),
    ] {
        let plan = plan_dot(
            &reg(da, f32s[0].clone()),
            &reg(db, f32s[1].clone()),
            &reg(DType::Int(32), f32s[2].clone()),
            32,
            &Target::SM80,
        );
        let want = MmaKind::Int8K32 {
            a_signed: da == DType::Int(8),
            b_signed: db == DType::Int(8),
        };
        assert!(
            matches!(plan, Ok(DotPlan::Mma { kind, .. }) if kind == want),
            "{da} x {db}: {plan:?}"
        );
    }
    let plan = plan_dot(
        &reg(DType::UInt(8), frag[0].clone()),
        &reg(DType::Int(8), frag[1].clone()),
        &reg(DType::Int(32), frag[2].clone()),
        32,
        &Target::default(),
    );
    assert!(
        matches!(&plan, Err(m) if m.contains("mma.m16n8k32")),
        "{plan:?}"
    );
}

// ---- elementwise broadcast layouts -----------------------------------------------------------

#[test]
fn rejects_broadcast_operand_not_held_by_the_thread() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("column_spatial(2,16)"), Some(1.0));
    let y = k
        .at(2)
        .allocate_register("y", DType::F32, l("spatial(2,16)"), Some(1.0));
    k.at(3).binary("z", ElementOp::Mul, x, Operand::Tensor(y));
    one(
        &k.finish(),
        3,
        &[
            "mul: `y` cannot be broadcast to `x` in registers",
            "thread 1 holds lhs[1, 0] but not the rhs element [1, 0]",
        ],
    );
}

#[test]
fn rejects_broadcast_operand_at_thread_dependent_local() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(32)"), Some(1.0));
    let y = k
        .at(2)
        .allocate_register("y", DType::F32, l("local(32)"), Some(1.0));
    k.at(3).binary("z", ElementOp::Add, x, Operand::Tensor(y));
    one(&k.finish(), 3, &["must not depend on the thread"]);
}

#[test]
fn accepts_row_broadcasts() {
    // Each thread holds whole rows; the row vector is replicated in every thread.
    let mut k = kernel(32);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(32,1).local(1,16)"), Some(1.0));
    let y = k
        .at(2)
        .allocate_register("y", DType::F32, l("local(16)"), Some(1.0));
    k.at(3).binary("z", ElementOp::Add, x, Operand::Tensor(y));
    ok(&k.finish());
    // A bias over the columns a thread owns, distributed like the tile's columns.
    let mut k = kernel(32);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(4,8).local(2,2)"), Some(1.0));
    let y = k.at(2).allocate_register(
        "y",
        DType::F32,
        l("reduce(spatial(4,8), [0]).local(1,2)"),
        Some(1.0),
    );
    k.at(3).binary("z", ElementOp::Add, x, Operand::Tensor(y));
    ok(&k.finish());
}

#[test]
fn rejects_mod_of_floats_and_neg_of_unsigned() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(32)"), Some(1.0));
    k.at(2).binary("y", ElementOp::Mod, x, Operand::Imm(2.0));
    let u = k
        .at(3)
        .allocate_register("u", DType::UInt(4), l("spatial(32)"), Some(1.0));
    k.at(4).neg("v", u);
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0]
        .message
        .contains("mod is defined for integer tensors, but `x` holds f32"));
    assert!(d[1].message.contains("neg of unsigned u4 tensor `u`"));
}

// ---- shared memory budget ------------------------------------------------------------------

#[test]
fn rejects_shared_memory_over_the_target() {
    let mut k = kernel(128);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    k.at(1)
        .allocate_shared("sa", DType::F16, SharedLayout::row_major(&[4, 64, 128]));
    k.at(2)
        .allocate_shared("sb", DType::F16, SharedLayout::row_major(&[4, 128, 128]));
    let p = k.finish();
    let d = verify(&p, &Target::SM80).unwrap_err();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].span, SpanId(1000));
    assert!(d[0].message.contains("allocates 196608 bytes of shared memory (`sa` 65536 B, `sb` 131072 B), more than the target's 166912 bytes"), "{}", d[0].message);
    assert!(verify(
        &p,
        &Target {
            max_shared_bytes: 196608,
            ..Target::SM80
        }
    )
    .is_ok());
}

// ---- all problems at once ------------------------------------------------------------------

#[test]
fn reports_every_problem_in_program_order() {
    let mut k = kernel(100);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let g = k
        .at(1)
        .view_global("g", _a, DType::F16, vec![Expr::Int(64)]);
    k.at(2)
        .load_global("x", g, l("spatial(32)"), vec![0.into(), 1.into()]);
    k.at(3).if_else(Expr::Int(0), |_| {}, |_| {});
    k.at(4).store_global(g, g, vec![0.into()]);
    let d = diags(&k.finish());
    let spans: Vec<u32> = d.iter().map(|d| d.span.0).collect();
    assert_eq!(spans, vec![1000, 2, 3, 4, 4], "{d:#?}");
}

// ---- smaller rules -------------------------------------------------------------------------

#[test]
fn rejects_malformed_shared_layouts() {
    let mut k = kernel(32);
    let bad = SharedLayout {
        shape: vec![4, 4],
        strides: vec![4],
        swizzle: None,
    };
    k.at(1).allocate_shared("s", DType::F16, bad);
    k.at(2)
        .allocate_shared("e", DType::F16, SharedLayout::row_major(&[0, 4]));
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0]
        .message
        .contains("shape [4, 4] has 2 dims but the layout has 1 strides"));
    assert!(d[1]
        .message
        .contains("allocate_shared `e`: shape [0, 4] is empty"));
}

#[test]
fn rejects_nan_initial_values_and_immediates() {
    let mut k = kernel(32);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(32)"), Some(f64::NAN));
    k.at(2)
        .binary("y", ElementOp::Add, x, Operand::Imm(f64::NAN));
    let d = diags(&k.finish());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0].message.contains("NaN is not a valid initial value"));
    assert!(d[1].message.contains("add: NaN is not a valid immediate"));
}

#[test]
fn rejects_operator_type_errors() {
    let mut k = kernel(32);
    let sel = Expr::Select(
        Box::new(Expr::Int(1)),
        Box::new(Expr::Int(2)),
        Box::new(Expr::Bool(false)),
    );
    k.at(1).let_("a", ScalarType::I32, sel);
    k.at(2).let_(
        "b",
        ScalarType::Bool,
        Expr::binary(BinaryOp::Eq, Expr::Int(1), Expr::Bool(true)),
    );
    k.at(3).let_(
        "c",
        ScalarType::Bool,
        Expr::Unary(tilus_core::ir::UnaryOp::Not, Box::new(Expr::Int(1))),
    );
    k.at(4).let_(
        "d",
        ScalarType::Bool,
        Expr::binary(BinaryOp::Lt, Expr::Bool(true), Expr::Bool(false)),
    );
    let d = diags(&k.finish());
    let msgs: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs.len(), 5, "{d:#?}");
    assert!(msgs[0].contains("condition of a select must be bool, found i32"));
    assert!(msgs[1].contains("branches of a select have different types (i32 and bool)"));
    assert!(msgs[2].contains("`==` compares values of different types (i32 and bool)"));
    assert!(msgs[3].contains("`!` needs a bool operand, found i32"));
    assert!(msgs[4].contains("`<` needs i32 operands, found bool and bool"));
}

#[test]
fn rejects_non_scalar_let_and_assign_targets() {
    let mut k = kernel(32);
    let r = k
        .at(1)
        .allocate_register("r", DType::F32, l("spatial(32)"), None);
    k.at(2).assign(r, Expr::Int(1));
    let d = diags(&k.finish());
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0]
        .message
        .contains("assignment to `r`: only scalars can be assigned, but it is a register f32[32]"));
}

#[test]
fn rejects_parameters_that_are_not_scalars_or_pointers() {
    let mut k = kernel(32);
    let s = k.b.new_var(
        "tile",
        VarType::Shared(tilus_core::ir::SharedType {
            dtype: DType::F16,
            layout: SharedLayout::row_major(&[8]),
        }),
    );
    let mut p = k.finish();
    p.params.push(tilus_core::ir::Param { var: s });
    one(&p, 1000, &["parameter `tile` is a shared f16[8] tensor; parameters must be i32, f32 or bool scalars or pointers"]);
}

#[test]
fn rejects_mul_add_off_floats_and_with_a_misplaced_addend() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let h = k
        .at(1)
        .allocate_register("h", DType::Int(32), l("spatial(4,8)"), Some(1.0));
    k.at(2).mul_add("hh", h, Operand::Imm(2.0), h);
    one(
        &k.finish(),
        2,
        &["mul_add is defined for f32, f16 and bf16 tensors", "`h`"],
    );

    let mut k = kernel(32);
    let x = k
        .at(1)
        .allocate_register("x", DType::F32, l("spatial(4,8).local(1,2)"), Some(1.0));
    let y = k
        .at(2)
        .allocate_register("y", DType::F32, l("local(1,2).spatial(4,8)"), Some(1.0));
    k.at(3).mul_add("z", x, Operand::Imm(2.0), y);
    one(
        &k.finish(),
        3,
        &["the addend `y`", "cannot be broadcast to `x`"],
    );
}

#[test]
fn rejects_a_cast_that_moves_elements_between_threads() {
    let mut k = kernel(32);
    let (_m, _a, _c) = (k.m, k.a, k.c);
    let x = k
        .at(1)
        .allocate_register("x", DType::F16, l("spatial(4,8).local(1,4)"), Some(1.0));
    // The same elements per thread in another local order: fine.
    let per_thread = l("spatial(4,8).local(1,4)")
        .swap_inner_locals(2, 2)
        .unwrap();
    k.at(2).cast_to("ok", x, DType::F32, per_thread);
    // Elements of other threads: rejected.
    k.at(3)
        .cast_to("bad", x, DType::F32, l("local(1,4).spatial(4,8)"));
    one(
        &k.finish(),
        3,
        &["does not hold the elements of `x`", "reorder"],
    );
}
