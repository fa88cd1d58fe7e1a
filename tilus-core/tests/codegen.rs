//! Tests of the CUDA code generator on the emitted text, no CUDA needed: instruction selection
//! (vector widths, ldmatrix, mma, cp.async), launch assumptions, the shared-memory planner,
//! names and comments. Compile and GPU checks live in the workspace's `tests/codegen_cuda.rs`
//! and `tests/gpu_codegen.rs`.

use tilus_core::codegen::{emit, ArgValue, Assumption, CudaKernel, ParamKind};
use tilus_core::ir::{ElementOp, Expr, Operand, Program, ProgramBuilder};
use tilus_core::layout::{parse, SharedLayout, Swizzle};
use tilus_core::verify::{verify, Target};
use tilus_core::DType;

// The paper programs are example material of the facade (`tilus::programs`), included by
// path: the core crate must not depend on the facade.
#[allow(dead_code)]
#[path = "../../src/programs.rs"]
mod programs;

fn l(s: &str) -> tilus_core::Layout {
    parse(s).unwrap()
}

fn emit_ok(p: &Program) -> CudaKernel {
    verify(p, &Target::default()).unwrap_or_else(|d| panic!("{} does not verify: {d:?}", p.name));
    emit(p, &Target::default()).unwrap_or_else(|e| panic!("{}: {e}", p.name))
}

/// A copy kernel: load a `[32, 64]` f16 tile of `x[m, n]` at `[bi*32, off]` with `layout`,
/// store it to `y` at the same place.
fn copy_program(layout: &str, col_offset: Expr, n: Option<i32>) -> Program {
    let mut b = ProgramBuilder::new("copy", 128);
    let m = b.param_i32("m");
    let nn = b.param_i32("n");
    let x = b.param_ptr("x", DType::F16, false);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![Expr::cdiv(m, 32)]);
    let bi = b.block_indices(&["bi"])[0];
    let cols: Expr = n.map(Expr::Int).unwrap_or(nn.into());
    let gx = b.view_global("gx", x, DType::F16, vec![m.into(), cols.clone()]);
    let gy = b.view_global("gy", y, DType::F16, vec![m.into(), cols]);
    let r = b.load_global(
        "r",
        gx,
        l(layout),
        vec![Expr::from(bi) * 32, col_offset.clone()],
    );
    b.store_global(r, gy, vec![Expr::from(bi) * 32, col_offset]);
    b.finish()
}

fn assumption_texts(k: &CudaKernel) -> Vec<String> {
    k.assumptions.iter().map(|a| a.to_string()).collect()
}

#[test]
fn global_accesses_use_the_widest_aligned_vector() {
    // 8 contiguous f16 per thread: 16-byte vectors, under launch assumptions on n and pointers.
    let k = emit_ok(&copy_program("spatial(32,4).local(1,16)", 0.into(), None));
    assert!(k.source.contains("*(const uint4*)("), "{}", k.source);
    assert!(k.source.contains("*(uint4*)("), "{}", k.source);
    let a = assumption_texts(&k);
    assert!(a.contains(&"param n % 8 == 0".to_string()), "{a:?}");
    assert!(
        a.contains(&"pointer x aligned to 16 bytes".to_string()),
        "{a:?}"
    );
    assert!(
        a.contains(&"pointer y aligned to 16 bytes".to_string()),
        "{a:?}"
    );

    // Runs of two: 32-bit accesses.
    let k = emit_ok(&copy_program(
        "local(1,8).spatial(32,4).local(1,2)",
        0.into(),
        None,
    ));
    assert!(k.source.contains("*(const uint32_t*)("), "{}", k.source);
    assert!(
        !k.source.contains("uint4") && !k.source.contains("uint2"),
        "{}",
        k.source
    );
    assert!(assumption_texts(&k).contains(&"param n % 2 == 0".to_string()));
    // Locals running down a column are not contiguous: element accesses.
    let k = emit_ok(&copy_program(
        "spatial(1,4).column_local(32,16)",
        0.into(),
        None,
    ));
    assert!(!k.source.contains("uint32_t*)("), "{}", k.source);

    // A constant row length needs no assumption on parameters.
    let k = emit_ok(&copy_program(
        "spatial(32,4).local(1,16)",
        16.into(),
        Some(64),
    ));
    assert!(k.source.contains("uint4"));
    assert!(
        k.assumptions
            .iter()
            .all(|a| matches!(a, Assumption::Aligned { .. })),
        "{:?}",
        assumption_texts(&k)
    );

    // An offset that is not a multiple of the vector: element accesses, no assumption on n.
    let k = emit_ok(&copy_program("spatial(32,4).local(1,16)", 1.into(), None));
    assert!(
        !k.source.contains("uint4") && !k.source.contains("uint2"),
        "{}",
        k.source
    );
    assert!(k.source.contains("*(const uint16_t*)("), "{}", k.source);
    assert!(!assumption_texts(&k).iter().any(|a| a.contains("param n")));

    // An offset that is a loop variable times a multiple of 8 keeps the vectors.
    let mut b = ProgramBuilder::new("loop_copy", 128);
    let n = b.param_i32("n");
    let x = b.param_ptr("x", DType::F16, false);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F16, vec![32.into(), n.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), n.into()]);
    b.for_range("kk", 0.into(), Expr::from(n) / 64, |b, kk| {
        let r = b.load_global(
            "r",
            gx,
            l("spatial(32,4).local(1,16)"),
            vec![0.into(), Expr::from(kk) * 64],
        );
        b.store_global(r, gy, vec![0.into(), Expr::from(kk) * 64]);
    });
    let k = emit_ok(&b.finish());
    assert!(k.source.contains("uint4"), "{}", k.source);
}

#[test]
fn assumptions_are_checked_before_launch_and_name_the_argument() {
    let k = emit_ok(&copy_program("spatial(32,4).local(1,16)", 0.into(), None));
    let args = |n: i32, x: u64| {
        vec![
            ArgValue::I32(100),
            ArgValue::I32(n),
            ArgValue::Pointer(x),
            ArgValue::Pointer(0x1000),
        ]
    };
    k.check_args(&args(64, 0x2000)).unwrap();
    let e = k.check_args(&args(100, 0x2000)).unwrap_err();
    assert!(
        e.contains("param n % 8 == 0") && e.contains("n = 100"),
        "{e}"
    );
    let e = k.check_args(&args(64, 0x2002)).unwrap_err();
    assert!(e.contains("argument x") && e.contains("16 bytes"), "{e}");
    assert!(k.check_args(&args(64, 0x2000)[..3]).is_err());
    // The grid comes from the parameters: cdiv(m, 32).
    assert_eq!(k.grid_dims(&args(64, 0x2000)).unwrap(), [4, 1, 1]);
    // Parameters are listed in call order with their kinds.
    assert!(matches!(k.params[0].kind, ParamKind::I32 { .. }));
    assert!(matches!(
        k.params[3].kind,
        ParamKind::Pointer { mutable: true, .. }
    ));
    assert!(k
        .source
        .contains("copy(int m, int n, const uint8_t* __restrict__ x, uint8_t* __restrict__ y)"));
}

#[test]
fn masks_follow_the_view_shape() {
    let k = emit_ok(&copy_program("spatial(32,4).local(1,16)", 0.into(), None));
    assert!(k.source.contains("(unsigned)gx_n0"), "{}", k.source);
    assert!(k.source.contains("(unsigned)gx_n1"), "{}", k.source);
    // Masked loads read zero, masked stores are skipped.
    assert!(k.source.contains(": make_uint4(0u, 0u, 0u, 0u)"));
    assert!(k.source.contains("if ((unsigned)"));
}

#[test]
fn sub_byte_stores_use_atomics_and_need_word_alignment() {
    let mut b = ProgramBuilder::new("store_u4", 32);
    let y = b.param_ptr("y", DType::UInt(4), true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::UInt(4), vec![8.into(), 9.into()]);
    let r = b.allocate_register("r", DType::UInt(4), l("spatial(8,4).local(1,2)"), Some(5.0));
    b.store_global(r, gy, vec![0.into(), 1.into()]);
    let k = emit_ok(&b.finish());
    assert!(
        k.source.contains("atomicAnd(") && k.source.contains("atomicOr("),
        "{}",
        k.source
    );
    assert!(assumption_texts(&k).contains(&"pointer y aligned to 4 bytes".to_string()));
    // Every word of `r` is initialised with the packed code 5.
    assert!(
        k.source.contains("r[0] = 0x55u;") || k.source.contains("= 0x55u;"),
        "{}",
        k.source
    );
}

#[test]
fn fig2_uses_mma_and_vector_weight_loads() {
    let k = emit_ok(&programs::matmul_f16_i6(16, 64, 64));
    assert!(k
        .source
        .contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
    assert!(k.source.contains("tilus_mma_f16(&acc["), "{}", k.source);
    // 24 bytes per thread: three 8-byte vectors.
    assert_eq!(
        k.source.matches("*(const uint2*)(").count(),
        3,
        "{}",
        k.source
    );
    assert!(k.source.contains("// acc = dot(ra, rb, acc)"));
    assert!(k.source.contains("// rq = view<i6>(rw, "));
    assert_eq!(k.shared_bytes, 0);
    assert!(k.source.contains("__launch_bounds__(128, 1)"));
}

#[test]
fn fig14_selects_cp_async_ldmatrix_and_plans_shared_memory() {
    let k = emit_ok(&programs::matmul_f16_pipelined(64, 64, 32, 3));
    assert!(k.source.contains("cp.async.cg.shared.global"));
    assert!(k.source.contains("tilus_cp_async_16("));
    assert!(k.source.contains("cp.async.commit_group"));
    assert!(k.source.contains("cp.async.wait_group 1"));
    assert!(k.source.contains("tilus_ldsm_x4(&ra["), "{}", k.source);
    assert!(
        k.source.contains("tilus_ldsm_x4_trans(&rb["),
        "{}",
        k.source
    );
    // sa [3, 64, 32] and sb [3, 32, 64] f16: 12 KiB each, both live through the loop.
    let plan = &k.shared_plan;
    assert_eq!(plan.slots.len(), 2);
    assert_eq!(plan.slots[0].bytes, 12288);
    assert_eq!(plan.slots[1].bytes, 12288);
    assert_ne!(plan.slots[0].offset, plan.slots[1].offset);
    assert_eq!(plan.total_bytes, 24576);
    assert_eq!(k.shared_bytes, 24576);
    assert!(k
        .source
        .contains("extern __shared__ __align__(1024) uint8_t tilus_smem[];"));
}

/// Two shared tensors: `first` used, then (after `sync_between` or not) `second`.
fn two_phase_program(sync_between: bool, overlap: bool) -> Program {
    let mut b = ProgramBuilder::new("two_phase", 128);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F32, vec![128.into()]);
    let tile = l("spatial(128)");
    let r = b.allocate_register("r", DType::F32, tile.clone(), Some(1.0));
    let first = b.allocate_shared("first", DType::F32, SharedLayout::row_major(&[128]));
    b.store_shared(r, first, vec![0.into()]);
    b.synchronize();
    let r1 = b.load_shared("r1", first, tile.clone(), vec![0.into()]);
    if sync_between {
        b.synchronize();
    }
    let second = b.allocate_shared("second", DType::F32, SharedLayout::row_major(&[128]));
    b.store_shared(r1, second, vec![0.into()]);
    b.synchronize();
    let r2 = b.load_shared("r2", second, tile.clone(), vec![0.into()]);
    if overlap {
        let r3 = b.load_shared("r3", first, tile, vec![0.into()]);
        b.store_global(r3, gy, vec![0.into()]);
    }
    b.store_global(r2, gy, vec![0.into()]);
    b.finish()
}

#[test]
fn planner_reuses_bytes_of_dead_tensors() {
    // `first` dies before `second` is allocated: same bytes, and with a synchronize in between
    // no extra barrier.
    let k = emit_ok(&two_phase_program(true, false));
    let (a, b) = (&k.shared_plan.slots[0], &k.shared_plan.slots[1]);
    assert_eq!((a.name.as_str(), b.name.as_str()), ("first", "second"));
    assert_eq!(a.offset, 0);
    assert_eq!(b.offset, 0);
    assert!(a.last < b.first);
    assert!(!b.barrier_before);
    assert_eq!(k.shared_bytes, 512);
    assert!(!k.source.contains("reuses shared bytes"));

    // Without the synchronize, the generator inserts a barrier before the reuse.
    let k = emit_ok(&two_phase_program(false, false));
    assert!(k.shared_plan.slots[1].barrier_before);
    assert!(
        k.source
            .contains("__syncthreads();  // second reuses shared bytes"),
        "{}",
        k.source
    );

    // Overlapping lifetimes: disjoint, 128-byte aligned bytes.
    let k = emit_ok(&two_phase_program(true, true));
    let (a, b) = (&k.shared_plan.slots[0], &k.shared_plan.slots[1]);
    assert!(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset);
    assert!(a.offset % 128 == 0 && b.offset % 128 == 0);
    assert_eq!(k.shared_bytes, 512 + 512);
}

#[test]
fn planner_extends_lifetimes_over_loops() {
    // `buf` is allocated before the loop and used inside it; `after` is allocated after the
    // loop: they may share bytes, but `buf` lives to the end of the loop.
    let mut b = ProgramBuilder::new("loop_life", 128);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F32, vec![128.into()]);
    let tile = l("spatial(128)");
    let buf = b.allocate_shared("buf", DType::F32, SharedLayout::row_major(&[128]));
    let r = b.allocate_register("r", DType::F32, tile.clone(), Some(0.0));
    b.for_range("i", 0.into(), 4.into(), |b, _| {
        b.store_shared(r, buf, vec![0.into()]);
        b.synchronize();
        let t = b.load_shared("t", buf, tile.clone(), vec![0.into()]);
        b.binary(r, ElementOp::Add, t, Operand::Imm(1.0));
        b.synchronize();
    });
    let after = b.allocate_shared("after", DType::F32, SharedLayout::row_major(&[128]));
    b.store_shared(r, after, vec![0.into()]);
    b.synchronize();
    let t = b.load_shared("t2", after, tile, vec![0.into()]);
    b.store_global(t, gy, vec![0.into()]);
    let k = emit_ok(&b.finish());
    let slots = &k.shared_plan.slots;
    // The loop's last statement precedes `after`: reuse is allowed, with the loop's trailing
    // synchronize not counting (it is inside the loop), so a barrier is inserted.
    assert_eq!(slots[0].offset, slots[1].offset);
    assert!(slots[0].last < slots[1].first);
    assert!(slots[1].barrier_before);
}

#[test]
fn names_are_sanitized_unique_and_commented() {
    let mut b = ProgramBuilder::new("my kernel!", 32);
    let n = b.param_i32("int");
    let y = b.param_ptr("tid", DType::F32, true);
    b.grid(vec![1.into()]);
    let g = b.view_global("out view", y, DType::F32, vec![n.into()]);
    let r = b.allocate_register("acc", DType::F32, l("spatial(32)"), Some(2.0));
    let r2 = b.allocate_register("acc", DType::F32, l("spatial(32)"), Some(3.0));
    let s = b.binary("acc", ElementOp::Add, r, Operand::Tensor(r2));
    b.store_global(s, g, vec![0.into()]);
    let k = emit_ok(&b.finish());
    assert_eq!(k.entry, "my_kernel");
    assert!(
        k.source
            .contains("my_kernel(int int_, uint8_t* __restrict__ tid1)"),
        "{}",
        k.source
    );
    assert!(k.source.contains("uint32_t acc[1];"));
    assert!(k.source.contains("uint32_t acc1[1];"));
    assert!(k.source.contains("uint32_t acc2[1];"));
    assert!(k.source.contains("// acc = add(acc, acc)"), "{}", k.source);
    assert_eq!(k.params[1].ir_name, "tid");
    assert_eq!(k.params[1].name, "tid1");
}

#[test]
fn control_flow_maps_one_to_one() {
    let mut b = ProgramBuilder::new("flow", 32);
    let n = b.param_i32("n");
    b.grid(vec![1.into()]);
    let x = b.let_("x", tilus_core::ir::ScalarType::I32, Expr::from(n) * 2);
    b.for_range("i", 0.into(), n.into(), |b, i| {
        b.if_else(
            Expr::binary(tilus_core::ir::BinaryOp::Lt, i, x),
            |b| b.assign(x, Expr::from(x) + 1),
            |b| b.exit(),
        );
    });
    b.while_(Expr::binary(tilus_core::ir::BinaryOp::Gt, x, 0), |b| {
        b.assign(x, Expr::from(x) - 3)
    });
    b.print("x is", Operand::Scalar(x.into()));
    let k = emit_ok(&b.finish());
    for needle in [
        "x = n * 2;",
        "for (int i = 0, i_end = n; i < i_end; ++i) {",
        "if (i < x) {",
        "x = x + 1;",
        "} else {",
        "return;",
        "while (x > 0) {",
        "x = x - 3;",
        "if (tid == 0) printf(",
    ] {
        assert!(
            k.source.contains(needle),
            "missing {needle:?} in\n{}",
            k.source
        );
    }
}

#[test]
fn thread_local_dot_when_not_mma_tiles() {
    let mut b = ProgramBuilder::new("tl_dot", 64);
    let y = b.param_ptr("y", DType::F32, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F32, vec![8.into(), 8.into()]);
    let a = b.allocate_register(
        "a",
        DType::F16,
        l("reduce(spatial(8,8),[1]).local(1,16)"),
        Some(0.5),
    );
    let w = b.allocate_register(
        "w",
        DType::F16,
        l("reduce(spatial(8,8),[0]).local(16,1)"),
        Some(2.0),
    );
    let c = b.allocate_register("c", DType::F32, l("spatial(8,8)"), Some(1.0));
    let c = b.dot(c, a, w, c);
    b.store_global(c, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    assert!(!k.source.contains("mma.sync"));
    assert_eq!(k.source.matches("fmaf(").count(), 16, "{}", k.source);
}

#[test]
fn casts_of_sub_byte_types_are_elementwise_exact_expressions() {
    let mut b = ProgramBuilder::new("casts", 32);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), 4.into()]);
    let q = b.allocate_register(
        "q",
        DType::Int(6),
        l("spatial(32,1).local(1,4)"),
        Some(-3.0),
    );
    let h = b.cast("h", q, DType::F16);
    b.store_global(h, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    // 4 locals are fewer than the vectorized cast's group of 16: scalar i6 sign extension, then
    // an f16 encode with saturation.
    assert!(!k.source.contains("tilus_cast_"), "{}", k.source);
    assert!(k.source.contains("<< 26)) >> 26)"), "{}", k.source);
    assert!(k.source.contains("__float2half_rn("), "{}", k.source);
}

#[test]
fn casts_use_vectorized_plans_per_group() {
    // fig2: 32 i6 locals per thread = two groups of 16 (3 words in, 8 words out each).
    let k = emit_ok(&programs::matmul_f16_i6(16, 64, 64));
    assert!(k
        .source
        .contains("void tilus_cast_i6_to_f16(const uint32_t* in, uint32_t* out)"));
    assert!(
        k.source.contains("tilus_cast_i6_to_f16(&rq[0], &rb[0]);"),
        "{}",
        k.source
    );
    assert!(
        k.source.contains("tilus_cast_i6_to_f16(&rq[3], &rb[8]);"),
        "{}",
        k.source
    );
    // The device function is defined once however often it is called.
    assert_eq!(k.source.matches("void tilus_cast_i6_to_f16(").count(), 1);
}

#[test]
fn swizzled_shared_addresses_follow_swizzle_apply() {
    let sw = Swizzle::new(3, 3, 3).unwrap();
    let mut b = ProgramBuilder::new("swz", 128);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), 64.into()]);
    let s = b.allocate_shared(
        "s",
        DType::F16,
        SharedLayout::row_major(&[32, 64]).with_swizzle(sw),
    );
    let r = b.allocate_register("r", DType::F16, l("spatial(32,4).local(1,16)"), Some(1.0));
    b.store_shared(r, s, vec![0.into(), 0.into()]);
    b.synchronize();
    let t = b.load_shared(
        "t",
        s,
        l("spatial(32,4).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    b.store_global(t, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    // `x ^ (((x >> (base + shift)) & (2^bits - 1)) << base)`, as `Swizzle::apply`.
    assert!(k.source.contains(">> 6) & 7) << 3)"), "{}", k.source);
    // 8-element runs stay contiguous under this swizzle: 16-byte shared accesses.
    assert!(k.source.contains("*(uint4*)(tilus_smem"), "{}", k.source);
    assert!(
        k.source.contains("*(const uint4*)(tilus_smem"),
        "{}",
        k.source
    );
    // And a swizzle that splits 16-byte runs forces narrower accesses.
    let sw2 = Swizzle::new(2, 1, 4).unwrap();
    let mut b = ProgramBuilder::new("swz2", 128);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), 64.into()]);
    let s = b.allocate_shared(
        "s",
        DType::F16,
        SharedLayout::row_major(&[32, 64]).with_swizzle(sw2),
    );
    let r = b.allocate_register("r", DType::F16, l("spatial(32,4).local(1,16)"), Some(1.0));
    b.store_shared(r, s, vec![0.into(), 0.into()]);
    b.synchronize();
    let t = b.load_shared(
        "t",
        s,
        l("spatial(32,4).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    b.store_global(t, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    assert!(!k.source.contains("uint4*)(tilus_smem"), "{}", k.source);
    assert!(k.source.contains("*(uint32_t*)(tilus_smem"), "{}", k.source);
}

#[test]
fn half_arithmetic_is_packed_in_pairs() {
    let mut b = ProgramBuilder::new("scale_rows", 128);
    let x = b.param_ptr("x", DType::F16, false);
    let s = b.param_ptr("s", DType::F16, false);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F16, vec![32.into(), 64.into()]);
    let gs = b.view_global("gs", s, DType::F16, vec![32.into(), 1.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), 64.into()]);
    let rx = b.load_global(
        "rx",
        gx,
        l("spatial(32,4).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    let rs = b.load_global(
        "rs",
        gs,
        l("reduce(spatial(32,4),[1])"),
        vec![0.into(), 0.into()],
    );
    let p = b.binary("p", ElementOp::Mul, rx, Operand::Tensor(rs));
    let p = b.binary("q", ElementOp::Sub, p, Operand::Imm(0.5));
    let p = b.binary("r", ElementOp::Add, p, Operand::Scalar(3.into()));
    b.store_global(p, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    // One broadcast element per row: both halves from the low half of rs[0].
    assert!(
        k.source
            .contains("tilus_f16x2_mul(rx[0], __byte_perm(rs[0], rs[0], 0x5410))"),
        "{}",
        k.source
    );
    // An immediate is a packed constant (0.5 = 0x3800).
    assert!(
        k.source.contains("tilus_f16x2_sub(p[7], 0x38003800u)"),
        "{}",
        k.source
    );
    // A scalar operand is an exact i32, not an f16: the element path.
    assert!(k.source.contains("__fadd_rn("), "{}", k.source);
    assert!(k.source.contains("asm(\"fma.rn.f16x2 %0, %1, %2, %3;\""));
    // IEEE overflow (`DType::round`): the fma alone, no clamp.
    assert!(!k.source.contains("min.f16x2") && !k.source.contains("max.f16x2"));
}

/// `mul_add` of f16 tensors is one packed `fma.rn.f16x2` per pair, the
/// broadcast operand assembled as for `mul`, the addend's words taken as they are.
#[test]
fn half_mul_add_is_one_packed_fma_per_pair() {
    let mut b = ProgramBuilder::new("scale_shift_rows", 128);
    let x = b.param_ptr("x", DType::F16, false);
    let s = b.param_ptr("s", DType::F16, false);
    let y = b.param_ptr("y", DType::F16, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F16, vec![32.into(), 64.into()]);
    let gs = b.view_global("gs", s, DType::F16, vec![32.into(), 1.into()]);
    let gy = b.view_global("gy", y, DType::F16, vec![32.into(), 64.into()]);
    let lay = l("spatial(32,4).local(1,16)");
    let rx = b.load_global("rx", gx, lay.clone(), vec![0.into(), 0.into()]);
    let rz = b.load_global("rz", gy, lay, vec![0.into(), 0.into()]);
    let rs = b.load_global(
        "rs",
        gs,
        l("reduce(spatial(32,4),[1])"),
        vec![0.into(), 0.into()],
    );
    let p = b.mul_add("p", rx, Operand::Tensor(rs), rz);
    let q = b.mul_add("q", p, Operand::Imm(0.5), rz);
    b.store_global(q, gy, vec![0.into(), 0.into()]);
    let k = emit_ok(&b.finish());
    assert!(
        k.source
            .contains("tilus_f16x2_fma(rx[0], __byte_perm(rs[0], rs[0], 0x5410), rz[0])"),
        "{}",
        k.source
    );
    assert!(
        k.source
            .contains("tilus_f16x2_fma(p[7], 0x38003800u, rz[7])"),
        "{}",
        k.source
    );
    assert!(!k.source.contains("__fmaf_rn"), "{}", k.source);
    assert!(!k.source.contains("min.f16x2") && !k.source.contains("max.f16x2"));
}

/// A `copy_async` of 4-byte elements into a permuted shared tile (dims reordered, so no run of
/// the destination is contiguous) copies element by element with `cp.async` (4 bytes each),
/// not with a synchronous load-and-store loop: the copy stays asynchronous.
#[test]
fn copy_async_into_a_permuted_tile_stays_asynchronous() {
    let mut b = ProgramBuilder::new("cp_async_permuted", 64);
    let m = b.param_i32("m");
    let src = b.param_ptr("src", DType::UInt(32), false);
    b.grid(vec![Expr::Int(1)]);
    let g = b.view_global(
        "g",
        src,
        DType::UInt(32),
        vec![m.into(), Expr::Int(8), Expr::Int(4), Expr::Int(2)],
    );
    let s = b.allocate_shared(
        "s",
        DType::UInt(32),
        SharedLayout::row_major(&[16, 8, 2, 4]),
    );
    let p = b.permute_shared("p", s, vec![0, 1, 3, 2]);
    b.copy_async(p, g, vec![0.into(), 0.into(), 0.into(), 0.into()]);
    b.copy_async_commit_group();
    b.copy_async_wait_group(0);
    let k = emit_ok(&b.finish());
    assert!(k.source.contains("tilus_cp_async_4("), "{}", k.source);
    assert!(!k.source.contains("for (int e"), "{}", k.source);
}
