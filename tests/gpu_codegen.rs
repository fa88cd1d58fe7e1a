//! GPU tests of the CUDA code generator: every paper program (several configurations), plus
//! small programs for the instructions the paper programs do not use, runs on the GPU and in
//! the CPU interpreter on the same fresh random inputs, with output buffers poisoned before
//! both runs; the outputs must agree (bit for bit for integer outputs and untouched bytes,
//! within `||gpu - ref|| / ||ref|| < 1e-2` for f16 results of `dot`).
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns
//! the skip into a failure. Run on the GPU machine with
//! `cargo test --release --test gpu_codegen -- --nocapture --test-threads=1`.

mod common;
#[path = "common/reduce_programs.rs"]
mod reduce_programs;

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/addressing.rs"]
mod addressing;

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/bmma.rs"]
mod bmma;

#[allow(dead_code)]
#[path = "../tilus-core/tests/programs/fence.rs"]
mod fence;

use rand::Rng;
use std::sync::Arc;
use tilus::core::codegen::{emit, ArgValue, CudaKernel, ParamKind};
use tilus::core::interp::{self, Arg};
use tilus::core::ir::{ElementOp, Expr, MathOp, Operand, Program, ProgramBuilder, ReduceOp};
use tilus::core::layout::{parse, SharedLayout, Swizzle};
use tilus::core::storage;
use tilus::programs;
use tilus::runtime::half::{self, f16};
use tilus::runtime::{Context, DeviceBuffer, KernelSource, LaunchDims, Param};
use tilus::DType;

/// How a buffer argument is filled and compared.
#[derive(Clone, Debug)]
enum Buf {
    /// Random bytes (any bit pattern: sub-byte integer weights, packed data).
    RandomBytes(usize),
    /// Random f16 values in [-1, 1].
    RandomF16(usize),
    /// Random bf16 values in [-1, 1].
    RandomBf16(usize),
    /// An output of `len` bytes, poisoned (0xff) before launch; compared exactly.
    OutExact(usize),
    /// An output of `len` f16 values, poisoned; compared with a relative-error bound.
    OutF16(usize),
    /// `len` random values of a float or integer `dtype` in `[lo, hi)` (encoded, so exact).
    Random {
        dtype: DType,
        len: usize,
        lo: f64,
        hi: f64,
    },
    /// An output of `len` f32, f16 or bf16 values, poisoned; each element may differ from the
    /// interpreter's by `ulps` units in the last place of `dtype` (the math functions' bounds).
    OutUlps { dtype: DType, len: usize, ulps: u32 },
    /// Random f32 values in [-1, 1].
    RandomF32(usize),
    /// Random i32 values in [-bound, bound].
    RandomI32(usize, i32),
    /// An output of `len` values of `dtype` (f16, bf16 or f32), poisoned; each element within
    /// `tol` of the interpreter's (float sums: `n * 2^-24 * sum|x|` plus a rounding).
    OutNear { dtype: DType, len: usize, tol: f64 },
    /// `len` random i32 values in `[lo, hi)` (indices, some out of range; integer operands
    /// and accumulators); compared exactly.
    I32Range { len: usize, lo: i32, hi: i32 },
    /// `len` distinct i32 values from `[lo, hi)` (a shuffled range): scatter targets and
    /// indices whose old values are returned.
    DistinctI32 { len: usize, lo: i32, hi: i32 },
    /// `len` random f32 values in [-1, 1], updated by f32 atomic adds whose order the GPU does
    /// not fix: compared with `||gpu - ref|| / ||ref|| < 1e-5`.
    F32Sum(usize),
}

#[derive(Clone, Debug)]
enum A {
    I32(i32),
    Buf(Buf),
}

struct Case {
    name: String,
    program: Program,
    args: Vec<A>,
}

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0).no_disk_cache())
}

fn fill(b: &Buf, rng: &mut impl Rng) -> Vec<u8> {
    match b {
        Buf::RandomBytes(n) => (0..*n).map(|_| rng.random::<u8>()).collect(),
        Buf::RandomF16(n) => (0..*n)
            .flat_map(|_| {
                f16::from_f32(rng.random_range(-1.0f32..1.0))
                    .to_bits()
                    .to_le_bytes()
            })
            .collect(),
        Buf::RandomBf16(n) => (0..*n)
            .flat_map(|_| {
                half::bf16::from_f32(rng.random_range(-1.0f32..1.0))
                    .to_bits()
                    .to_le_bytes()
            })
            .collect(),
        Buf::OutExact(n) => vec![0xff; *n],
        Buf::OutF16(n) => vec![0xff; 2 * n],
        Buf::Random { dtype, len, lo, hi } => {
            let codes: Vec<u32> = (0..*len)
                .map(|_| dtype.encode(rng.random_range(*lo..*hi) as f32).unwrap())
                .collect();
            storage::pack(*dtype, &codes)
        }
        Buf::OutUlps { dtype, len, .. } => vec![0xff; storage::packed_len(*dtype, *len)],
        Buf::RandomF32(n) | Buf::F32Sum(n) => (0..*n)
            .flat_map(|_| rng.random_range(-1.0f32..1.0).to_le_bytes())
            .collect(),
        Buf::RandomI32(n, b) => (0..*n)
            .flat_map(|_| rng.random_range(-*b..=*b).to_le_bytes())
            .collect(),
        Buf::OutNear { dtype, len, .. } => vec![0xff; storage::packed_len(*dtype, *len)],
        Buf::I32Range { len, lo, hi } => (0..*len)
            .flat_map(|_| rng.random_range(*lo..*hi).to_le_bytes())
            .collect(),
        Buf::DistinctI32 { len, lo, hi } => {
            use rand::seq::SliceRandom;
            let mut all: Vec<i32> = (*lo..*hi).collect();
            all.shuffle(rng);
            assert!(all.len() >= *len, "{b:?}: not enough distinct values");
            all[..*len].iter().flat_map(|v| v.to_le_bytes()).collect()
        }
    }
}

/// A float code mapped to a line where neighbouring values are neighbouring integers.
fn ordered(dtype: DType, code: u32) -> i64 {
    let sign = 1u32 << (dtype.bits() - 1);
    if code & sign != 0 {
        -((code & !sign) as i64)
    } else {
        code as i64
    }
}

/// The runtime's view of a generated kernel: every pointer is passed as bytes.
fn kernel_source(name: &str, k: &CudaKernel) -> KernelSource {
    let params: Vec<Param> = k
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::I32 { .. } => Param::value::<i32>(p.ir_name.clone()),
            ParamKind::I64 { .. } => Param::value::<i64>(p.ir_name.clone()),
            ParamKind::F32 { .. } => Param::value::<f32>(p.ir_name.clone()),
            ParamKind::Bool { .. } => Param::value::<i32>(p.ir_name.clone()),
            ParamKind::Pointer { mutable: false, .. } => Param::ptr::<u8>(p.ir_name.clone()),
            ParamKind::Pointer { mutable: true, .. } | ParamKind::Workspace { .. } => {
                Param::ptr_mut::<u8>(p.ir_name.clone())
            }
            // TMA kernels launch through `tilus::gpu::GpuKernel`, which encodes the maps.
            ParamKind::TensorMap { .. } => panic!("{name}: cases here take no tensor maps"),
        })
        .collect();
    KernelSource::new(name, "", k.entry.clone(), k.source.clone(), params)
}

fn compare(case: &str, spec: &Buf, want: &[u8], got: &[u8]) {
    assert_eq!(want.len(), got.len());
    match spec {
        Buf::OutNear { dtype, len, tol } => {
            let w = storage::unpack(*dtype, want, *len);
            let g = storage::unpack(*dtype, got, *len);
            let mut worst = 0f64;
            for (i, (&wc, &gc)) in w.iter().zip(&g).enumerate() {
                let (wv, gv) = (dtype.decode(wc), dtype.decode(gc));
                assert!(
                    gv.is_finite() && (wv - gv).abs() <= *tol,
                    "{case}: element {i}: interpreter {wv}, GPU {gv} (tolerance {tol})"
                );
                worst = worst.max((wv - gv).abs());
            }
            eprintln!("{case}: largest difference {worst:.2e} (tolerance {tol:.2e})");
        }
        Buf::OutF16(_) => {
            let (mut num, mut den) = (0f64, 0f64);
            for (i, (w, g)) in want.chunks(2).zip(got.chunks(2)).enumerate() {
                let (wb, gb) = (
                    u16::from_le_bytes([w[0], w[1]]),
                    u16::from_le_bytes([g[0], g[1]]),
                );
                if wb == gb {
                    let v = f16::from_bits(wb).to_f64();
                    if v.is_finite() {
                        den += v * v;
                    }
                    continue;
                }
                let (wv, gv) = (f16::from_bits(wb).to_f64(), f16::from_bits(gb).to_f64());
                assert!(
                    wv.is_finite() && gv.is_finite(),
                    "{case}: element {i}: interpreter {wv} ({wb:#06x}), GPU {gv} ({gb:#06x})"
                );
                num += (wv - gv) * (wv - gv);
                den += wv * wv;
            }
            let rel = (num / den.max(1e-30)).sqrt();
            eprintln!("{case}: relative error {rel:.2e}");
            assert!(rel < 1e-2, "{case}: relative error {rel} >= 1e-2");
        }
        Buf::OutUlps { dtype, len, ulps } => {
            let (w, g) = (
                storage::unpack(*dtype, want, *len),
                storage::unpack(*dtype, got, *len),
            );
            let mut worst = 0;
            for (i, (&wc, &gc)) in w.iter().zip(&g).enumerate() {
                let d = (ordered(*dtype, wc) - ordered(*dtype, gc)).unsigned_abs();
                assert!(
                    wc == gc || d <= *ulps as u64,
                    "{case}: element {i}: interpreter {} ({wc:#x}), GPU {} ({gc:#x}): {d} ulps > {ulps}",
                    dtype.decode(wc),
                    dtype.decode(gc)
                );
                worst = worst.max(if wc == gc { 0 } else { d });
            }
            eprintln!("{case}: at most {worst} ulps (bound {ulps})");
        }
        Buf::F32Sum(_) => {
            let f = |b: &[u8]| -> Vec<f64> {
                b.chunks(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                    .collect()
            };
            let (w, g) = (f(want), f(got));
            let num: f64 = w.iter().zip(&g).map(|(a, b)| (a - b) * (a - b)).sum();
            let den: f64 = w.iter().map(|a| a * a).sum();
            let rel = (num / den.max(1e-30)).sqrt();
            eprintln!("{case}: relative error {rel:.2e} (f32 atomic sums)");
            assert!(rel < 1e-5, "{case}: relative error {rel} >= 1e-5");
        }
        _ => {
            if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
                let bad = want.iter().zip(got).filter(|(a, b)| a != b).count();
                panic!(
                    "{case}: {bad} bytes differ, first at byte {i}: interpreter {:#04x}, GPU {:#04x}",
                    want[i], got[i]
                );
            }
        }
    }
}

fn run_case(ctx: &Arc<Context>, case: Case) {
    let mut rng = rand::rng();
    let kernel = emit(&case.program, &Default::default())
        .unwrap_or_else(|e| panic!("{}: codegen failed: {e}", case.name));
    // Fresh inputs, poisoned outputs, the same bytes for both runs.
    let host: Vec<Option<Vec<u8>>> = case
        .args
        .iter()
        .map(|a| match a {
            A::I32(_) => None,
            A::Buf(b) => Some(fill(b, &mut rng)),
        })
        .collect();
    let mut iargs: Vec<Arg> = case
        .args
        .iter()
        .zip(&host)
        .map(|(a, h)| match a {
            A::I32(v) => Arg::I32(*v),
            A::Buf(_) => Arg::Buffer(h.clone().unwrap()),
        })
        .collect();
    interp::run(&case.program, &mut iargs)
        .unwrap_or_else(|e| panic!("{}: interpreter failed: {e}", case.name));

    let src = kernel_source(&case.name, &kernel);
    let loaded = ctx
        .load(&src)
        .unwrap_or_else(|e| panic!("{}: load failed: {e}\n{}", case.name, kernel.source));
    // Device buffers are padded to whole 32-bit words (with 0x5a, checked untouched below), as
    // the launcher requires for writable sub-byte views: their stores update whole words.
    let padded = |b: &Vec<u8>| {
        let mut p = b.clone();
        p.resize(b.len().next_multiple_of(4), 0x5a);
        p
    };
    let mut bufs: Vec<Option<DeviceBuffer<u8>>> = host
        .iter()
        .map(|h| {
            h.as_ref()
                .map(|b| DeviceBuffer::from_host(ctx, &padded(b)).unwrap())
        })
        .collect();
    // Workspaces of allocate_global (zeroed, one per launch).
    let scalar = |i: usize| match case.args.get(i) {
        Some(A::I32(v)) => Some(*v),
        _ => None,
    };
    let mut values: Vec<ArgValue> = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        values.push(match &p.kind {
            ParamKind::I32 { .. } => ArgValue::I32(scalar(i).expect("scalar argument")),
            _ => ArgValue::Pointer(0),
        });
    }
    let mut workspaces = Vec::new();
    for p in &kernel.params {
        if let ParamKind::Workspace { dtype, shape } = &p.kind {
            let n: i64 = shape
                .iter()
                .map(|e| kernel.eval(e, &values).unwrap() as i64)
                .product();
            let len = storage::packed_len(*dtype, n as usize).max(1);
            workspaces.push(DeviceBuffer::<u8>::zeros(ctx, len).unwrap());
        }
    }
    for (i, b) in bufs.iter().enumerate() {
        if let Some(b) = b {
            values[i] = ArgValue::Pointer(b.device_ptr());
        }
    }
    kernel
        .check_args(&values)
        .unwrap_or_else(|e| panic!("{}: assumptions: {e}", case.name));
    let grid = kernel.grid_dims(&values).unwrap();
    let dims = LaunchDims::new(grid, [kernel.block_threads, 1, 1])
        .with_dyn_smem(kernel.shared_bytes as u32);
    {
        let mut launch = loaded.args();
        let mut ws = workspaces.iter_mut();
        let mut refs = bufs.iter_mut();
        for (i, p) in kernel.params.iter().enumerate() {
            match &p.kind {
                ParamKind::I32 { .. } => {
                    refs.next();
                    launch = launch.value(scalar(i).unwrap());
                }
                // Kernels with f32 or i64 parameters are tested through `#[kernel]`
                // (macro_gpu.rs).
                ParamKind::F32 { .. } | ParamKind::I64 { .. } | ParamKind::Bool { .. } => {
                    panic!("{}: cases here take i32 scalars", case.name)
                }
                ParamKind::Pointer { mutable: false, .. } => {
                    let b: &DeviceBuffer<u8> = refs.next().unwrap().as_mut().unwrap();
                    launch = launch.arg(b);
                }
                ParamKind::Pointer { mutable: true, .. } => {
                    launch = launch.arg_mut(refs.next().unwrap().as_mut().unwrap());
                }
                ParamKind::Workspace { .. } => launch = launch.arg_mut(ws.next().unwrap()),
                ParamKind::TensorMap { .. } => {
                    panic!("{}: cases here take no tensor maps", case.name)
                }
            }
        }
        launch
            .launch(dims)
            .unwrap_or_else(|e| panic!("{}: launch failed: {e}", case.name));
    }
    ctx.synchronize()
        .unwrap_or_else(|e| panic!("{}: kernel failed: {e}", case.name));
    for (i, a) in case.args.iter().enumerate() {
        if let (A::Buf(spec), Some(b), Arg::Buffer(want)) = (a, &bufs[i], &iargs[i]) {
            let got = b.to_host().unwrap();
            let (got, pad) = got.split_at(want.len());
            assert!(
                pad.iter().all(|&x| x == 0x5a),
                "{} arg {i}: the padding past the buffer was written",
                case.name
            );
            compare(&format!("{} arg {i}", case.name), spec, want, got);
        }
    }
    eprintln!(
        "{}: ok ({} assumptions)",
        case.name,
        kernel.assumptions.len()
    );
}

fn run_all(test: &str, cases: Vec<Case>) {
    let Some(ctx) = context(test) else { return };
    eprintln!("{test}: {} on {}", cases.len(), ctx.device().name);
    for c in cases {
        run_case(&ctx, c);
    }
}

fn fig2_case(weight: DType, bm: usize, bn: usize, bk: usize) -> Case {
    let (m, n, k) = (3 * bm as i32 - 5, 2 * bn as i32, 3 * bk as i32);
    let bits = weight.bits() as usize;
    let wbytes = (k as usize / bk) * (n as usize / bn) * (bk * bn * bits / 8);
    Case {
        name: format!("fig2 {weight} bm={bm} bn={bn} bk={bk} m={m} n={n} k={k}"),
        program: programs::matmul_f16_int(weight, bm, bn, bk),
        args: vec![
            A::I32(m),
            A::I32(n),
            A::I32(k),
            A::Buf(Buf::RandomF16((m * k) as usize)),
            A::Buf(Buf::RandomBytes(wbytes)),
            A::Buf(Buf::OutF16((m * n) as usize)),
        ],
    }
}

fn fig8_case(weight: DType, bk: usize, bn: usize) -> Case {
    let (k, n) = (2 * bk, 3 * bn);
    let bits = weight.bits() as usize;
    Case {
        name: format!("fig8 {weight} bk={bk} bn={bn} k={k} n={n}"),
        program: programs::relayout_int(weight, bk, bn),
        args: vec![
            A::I32(k as i32),
            A::I32(n as i32),
            A::Buf(Buf::RandomBytes(storage::packed_len(weight, k * n))),
            A::Buf(Buf::OutExact(k * n * bits / 8)),
        ],
    }
}

fn fig14_case(bm: usize, bn: usize, bk: usize, stages: usize) -> Case {
    let (m, n, k) = (2 * bm as i32 + 3, 2 * bn as i32, 5 * bk as i32);
    Case {
        name: format!("fig14 bm={bm} bn={bn} bk={bk} stages={stages} m={m} n={n} k={k}"),
        program: programs::matmul_f16_pipelined(bm, bn, bk, stages),
        args: vec![
            A::I32(m),
            A::I32(n),
            A::I32(k),
            A::Buf(Buf::RandomF16((m * k) as usize)),
            A::Buf(Buf::RandomF16((k * n) as usize)),
            A::Buf(Buf::OutF16((m * n) as usize)),
        ],
    }
}

#[test]
fn fig2_matmul_matches_interpreter() {
    run_all(
        "fig2_matmul_matches_interpreter",
        vec![
            fig2_case(DType::Int(6), 16, 64, 64),
            fig2_case(DType::UInt(4), 32, 128, 64),
            fig2_case(DType::Int(8), 64, 64, 32),
            fig2_case(DType::UInt(2), 16, 128, 32),
            fig2_case(DType::Int(3), 32, 64, 64),
        ],
    );
}

#[test]
fn fig8_relayout_matches_interpreter() {
    run_all(
        "fig8_relayout_matches_interpreter",
        vec![
            fig8_case(DType::Int(6), 64, 64),
            fig8_case(DType::UInt(4), 32, 64),
            fig8_case(DType::Int(8), 16, 128),
            fig8_case(DType::UInt(3), 64, 128),
        ],
    );
}

#[test]
fn fig14_pipelined_matches_interpreter() {
    run_all(
        "fig14_pipelined_matches_interpreter",
        vec![
            fig14_case(64, 64, 32, 3),
            fig14_case(16, 128, 64, 4),
            fig14_case(32, 64, 16, 2),
        ],
    );
}

fn l(s: &str) -> tilus::Layout {
    parse(s).unwrap()
}

/// Elementwise arithmetic (`mul_add` included), broadcasts, casts to narrow types and sub-byte
/// stores (atomics), through registers and (swizzled) shared memory.
fn elementwise_program(dtype_in: DType, dtype_out: DType) -> Program {
    let mut b = ProgramBuilder::new(&format!("elementwise_{dtype_in}_{dtype_out}"), 128);
    let m = b.param_i32("m");
    let x = b.param_ptr("x", dtype_in, false);
    let y = b.param_ptr("y", dtype_in, false);
    let out = b.param_ptr("out", dtype_out, true);
    let out2 = b.param_ptr("out2", dtype_in, true);
    b.grid(vec![Expr::cdiv(m, 32)]);
    let bi = b.block_indices(&["bi"])[0];
    let gx = b.view_global("gx", x, dtype_in, vec![m.into(), 64.into()]);
    let gy = b.view_global("gy", y, dtype_in, vec![1.into(), 64.into()]);
    let go = b.view_global("go", out, dtype_out, vec![m.into(), 64.into()]);
    let go2 = b.view_global("go2", out2, dtype_in, vec![m.into(), 64.into()]);
    let tile = l("local(2,1).spatial(16,8).local(1,8)");
    let rx = b.load_global("rx", gx, tile.clone(), vec![Expr::from(bi) * 32, 0.into()]);
    let ry = b.load_global(
        "ry",
        gy,
        l("reduce(spatial(16,8),[0]).local(1,8)"),
        vec![0.into(), 0.into()],
    );
    let s = b.binary("s", ElementOp::Add, rx, Operand::Tensor(ry));
    let s = b.binary("s2", ElementOp::Mul, s, Operand::Imm(3.5));
    let s = b.binary(
        "s3",
        ElementOp::Max,
        s,
        Operand::Scalar(Expr::from(m) - m - 2),
    );
    let s = b.neg("s4", s);
    // Fused multiply-adds: a broadcast factor with a same-layout addend, then an immediate
    // factor with a broadcast addend.
    let s = b.mul_add("s5", s, Operand::Tensor(ry), rx);
    let s = b.mul_add("s6", s, Operand::Imm(0.75), ry);
    let q = b.cast("q", s, dtype_out);
    b.store_global(q, go, vec![Expr::from(bi) * 32, 0.into()]);
    // Round trip through swizzled shared memory, read back in another layout.
    let sh = b.allocate_shared(
        "sh",
        dtype_in,
        SharedLayout::row_major(&[32, 64]).with_swizzle(Swizzle::new(3, 3, 3).unwrap()),
    );
    b.store_shared(s, sh, vec![0.into(), 0.into()]);
    b.synchronize();
    let back = b.load_shared(
        "back",
        sh,
        l("spatial(32,4).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    let back = b.binary("back2", ElementOp::Sub, back, Operand::Imm(0.25));
    b.store_global(back, go2, vec![Expr::from(bi) * 32, 0.into()]);
    b.finish()
}

fn elementwise_case(dtype_out: DType) -> Case {
    elementwise_case_from(DType::F16, dtype_out)
}

/// Inputs are random 16-bit patterns of finite values: f16 in [-1, 1], or bf16 made from the
/// same f32 values.
fn elementwise_case_from(dtype_in: DType, dtype_out: DType) -> Case {
    let input = move |n: usize| match dtype_in {
        DType::BF16 => Buf::RandomBf16(n),
        _ => Buf::RandomF16(n),
    };
    elementwise_case_on(dtype_in, dtype_out, "", input)
}

/// The same program on operands spread over the whole finite range of `dtype` (f16 or bf16),
/// so that sums, products and fmas overflow: IEEE arithmetic gives infinities (one HFMA2 per
/// pair, no clamp), the final cast saturates them, and the round trip through shared memory
/// keeps them; bit for bit with the interpreter's `DType::round`.
fn elementwise_overflow_case(dtype: DType) -> Case {
    let max = dtype.max_value();
    let input = move |len: usize| Buf::Random {
        dtype,
        len,
        lo: -max,
        hi: max,
    };
    elementwise_case_on(dtype, dtype, ", overflowing", input)
}

/// `elementwise_program` on 70 rows of inputs made by `input(len)`, both outputs poisoned and
/// compared exactly.
fn elementwise_case_on(
    dtype_in: DType,
    dtype_out: DType,
    what: &str,
    input: impl Fn(usize) -> Buf,
) -> Case {
    let m = 70;
    Case {
        name: format!("elementwise {dtype_in} -> {dtype_out}{what}"),
        program: elementwise_program(dtype_in, dtype_out),
        args: vec![
            A::I32(m),
            A::Buf(input((m * 64) as usize)),
            A::Buf(input(64)),
            A::Buf(Buf::OutExact(storage::packed_len(
                dtype_out,
                (m * 64) as usize,
            ))),
            A::Buf(Buf::OutExact((m * 64 * 2) as usize)),
        ],
    }
}

/// A thread-local integer dot whose `a` operand goes through `copy_async` of a sub-byte tile
/// and `load_shared`; i4 operands, i32 result.
fn int_dot_program() -> Program {
    let mut b = ProgramBuilder::new("int_dot", 64);
    let a = b.param_ptr("a", DType::Int(4), false);
    let w = b.param_ptr("w", DType::Int(4), false);
    let c = b.param_ptr("c", DType::Int(32), true);
    b.grid(vec![2.into()]);
    let bi = b.block_indices(&["bi"])[0];
    let ga = b.view_global("ga", a, DType::Int(4), vec![32.into(), 16.into()]);
    let gw = b.view_global("gw", w, DType::Int(4), vec![16.into(), 16.into()]);
    let gc = b.view_global("gc", c, DType::Int(32), vec![32.into(), 16.into()]);
    let sa = b.allocate_shared("sa", DType::Int(4), SharedLayout::row_major(&[16, 16]));
    b.copy_async(sa, ga, vec![Expr::from(bi) * 16, 0.into()]);
    b.copy_async_commit_group();
    b.copy_async_wait_group(0);
    b.synchronize();
    let ra = b.load_shared(
        "ra",
        sa,
        l("reduce(spatial(16,4),[1]).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    let rb = b.load_global(
        "rb",
        gw,
        l("reduce(spatial(16,4),[0]).local(16,4)"),
        vec![0.into(), 0.into()],
    );
    let acc = b.allocate_register(
        "acc",
        DType::Int(32),
        l("spatial(16,4).local(1,4)"),
        Some(3.0),
    );
    let acc2 = b.dot("acc2", ra, rb, acc);
    b.store_global(acc2, gc, vec![Expr::from(bi) * 16, 0.into()]);
    b.finish()
}

/// One warp's `mma.m16n8k16` on i8 operands (the verifier's i8 fragments).
fn int8_mma_program() -> Program {
    let mut b = ProgramBuilder::new("int8_mma", 32);
    let a = b.param_ptr("a", DType::Int(8), false);
    let w = b.param_ptr("w", DType::Int(8), false);
    let c = b.param_ptr("c", DType::Int(32), true);
    b.grid(vec![1.into()]);
    let ga = b.view_global("ga", a, DType::Int(8), vec![16.into(), 32.into()]);
    let gw = b.view_global("gw", w, DType::Int(8), vec![32.into(), 8.into()]);
    let gc = b.view_global("gc", c, DType::Int(32), vec![16.into(), 8.into()]);
    let ra = b.load_global(
        "ra",
        ga,
        l("local(1,2).local(2,1).spatial(8,4).local(1,4)"),
        vec![0.into(), 0.into()],
    );
    let rb = b.load_global(
        "rb",
        gw,
        l("local(2,1).column_spatial(4,8).local(4,1)"),
        vec![0.into(), 0.into()],
    );
    let acc = b.allocate_register(
        "acc",
        DType::Int(32),
        l("local(2,1).spatial(8,4).local(1,2)"),
        Some(-7.0),
    );
    let acc = b.dot(acc, ra, rb, acc);
    b.store_global(acc, gc, vec![0.into(), 0.into()]);
    b.finish()
}

/// u1 `dot`s on the 1-bit tensor cores (`mma.m16n8k256 .and.popc`): random bit planes, exact
/// i32 results, one warp tile and a tiling of 4 warps over several k steps.
fn bmma_cases() -> Vec<Case> {
    let tilings = [
        (
            bmma::Tiling {
                wm: 1,
                wn: 1,
                fm: 1,
                fn_: 1,
                kt: 1,
            },
            512,
        ),
        (
            bmma::Tiling {
                wm: 2,
                wn: 2,
                fm: 2,
                fn_: 4,
                kt: 2,
            },
            1536,
        ),
    ];
    tilings
        .into_iter()
        .flat_map(|(t, k)| {
            [false, true].map(|paired| Case {
                name: format!("bmma {t:?} k={k} paired={paired}"),
                program: if paired {
                    bmma::bmma_program_paired(t, -5)
                } else {
                    bmma::bmma_program(t, -5)
                },
                args: vec![
                    A::I32(k as i32),
                    A::Buf(Buf::RandomBytes(t.bm() * k / 8)),
                    A::Buf(Buf::RandomBytes(t.bn() * k / 8)),
                    A::Buf(Buf::OutExact(t.bm() * t.bn() * 4)),
                ],
            })
        })
        .collect()
}

/// A thread-local f16 dot accumulating in f32, cast to f16.
fn f16_dot_program() -> Program {
    let mut b = ProgramBuilder::new("f16_dot", 64);
    let a = b.param_ptr("a", DType::F16, false);
    let w = b.param_ptr("w", DType::F16, false);
    let c = b.param_ptr("c", DType::F16, true);
    b.grid(vec![1.into()]);
    let ga = b.view_global("ga", a, DType::F16, vec![8.into(), 16.into()]);
    let gw = b.view_global("gw", w, DType::F16, vec![16.into(), 8.into()]);
    let gc = b.view_global("gc", c, DType::F16, vec![8.into(), 8.into()]);
    let ra = b.load_global(
        "ra",
        ga,
        l("reduce(spatial(8,8),[1]).local(1,16)"),
        vec![0.into(), 0.into()],
    );
    let rb = b.load_global(
        "rb",
        gw,
        l("reduce(spatial(8,8),[0]).local(16,1)"),
        vec![0.into(), 0.into()],
    );
    let acc = b.allocate_register("acc", DType::F32, l("spatial(8,8)"), Some(0.5));
    let acc = b.dot(acc, ra, rb, acc);
    let out = b.cast("out", acc, DType::F16);
    b.store_global(out, gc, vec![0.into(), 0.into()]);
    b.finish()
}

/// `cast::<f16/bf16>` of f32 pairs (the packed `cvt.rn.satfinite` path): `[32, 64]` f32 in
/// pairs of consecutive elements per thread, cast and stored.
fn f32_pair_cast_program(dtype: DType) -> Program {
    let mut b = ProgramBuilder::new(&format!("f32_pair_cast_{dtype}"), 128);
    let x = b.param_ptr("x", DType::F32, false);
    let y = b.param_ptr("y", dtype, true);
    b.grid(vec![1.into()]);
    let gx = b.view_global("gx", x, DType::F32, vec![32.into(), 64.into()]);
    let gy = b.view_global("gy", y, dtype, vec![32.into(), 64.into()]);
    let tile = l("local(2,1).spatial(16,8).local(1,8)");
    let rx = b.load_global("rx", gx, tile, vec![0.into(), 0.into()]);
    let out = b.cast("out", rx, dtype);
    b.store_global(out, gy, vec![0.into(), 0.into()]);
    b.finish()
}

/// f32 to f16 and bf16 over ranges that saturate (past 65504 for f16) and that give
/// subnormal results, compared bit for bit.
fn f32_pair_cast_cases() -> Vec<Case> {
    let n = 32 * 64;
    [
        (DType::F16, 7.0e4),
        (DType::F16, 1.0e-4),
        (DType::BF16, 3.4e38),
        (DType::BF16, 1.0e-38),
    ]
    .into_iter()
    .map(|(dtype, r)| Case {
        name: format!("f32 pair cast to {dtype} in +-{r:e}"),
        program: f32_pair_cast_program(dtype),
        args: vec![
            A::Buf(Buf::Random {
                dtype: DType::F32,
                len: n,
                lo: -r,
                hi: r,
            }),
            A::Buf(Buf::OutExact(n * 2)),
        ],
    })
    .collect()
}

/// The input range of a float math op: positive for logarithms and roots.
fn math_range(op: MathOp) -> (f64, f64) {
    match op {
        MathOp::Log | MathOp::Log2 | MathOp::Sqrt | MathOp::Rsqrt => (0.01, 8.0),
        _ => (-4.0, 4.0),
    }
}

/// Every float math op on f32 (the documented f32 ulp bound over the input range), f16 and
/// bf16 (1 ulp of the output type); bit operations on integer types; comparisons and `select`;
/// the masked row kernel (`arange`, `lt`, `select`, `exp`, `load_global` with fill `-inf`).
fn math_cases() -> Vec<Case> {
    use tilus::core::ir::CmpOp;
    let n = (common::math::M * 64) as usize;
    let mut cases = Vec::new();
    for op in MathOp::ALL.into_iter().filter(|o| !o.is_integer()) {
        let (lo, hi) = math_range(op);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let ulps = if dtype == DType::F32 {
                op.max_ulp(lo as f32).max(op.max_ulp(hi as f32))
            } else {
                1
            };
            cases.push(Case {
                name: format!("{} {dtype}", op.name()),
                program: common::math::unary_program(op, dtype),
                args: vec![
                    A::I32(common::math::M),
                    A::Buf(Buf::Random {
                        dtype,
                        len: n,
                        lo,
                        hi,
                    }),
                    A::Buf(Buf::OutUlps {
                        dtype,
                        len: n,
                        ulps,
                    }),
                ],
            });
        }
    }
    for dtype in [
        DType::Int(8),
        DType::UInt(8),
        DType::Int(4),
        DType::UInt(32),
    ] {
        cases.push(Case {
            name: format!("bits {dtype}"),
            program: common::math::bits_program(dtype),
            args: vec![
                A::I32(common::math::M),
                A::Buf(Buf::RandomBytes(storage::packed_len(dtype, n))),
                A::Buf(Buf::RandomBytes(storage::packed_len(dtype, n))),
                A::Buf(Buf::OutExact(storage::packed_len(dtype, n))),
                A::Buf(Buf::OutExact(storage::packed_len(dtype, n))),
            ],
        });
    }
    for (dtype, op) in [
        (DType::F16, CmpOp::Lt),
        (DType::F32, CmpOp::Ge),
        (DType::Int(8), CmpOp::Ne),
        (DType::BF16, CmpOp::Le),
    ] {
        let random = |len| Buf::Random {
            dtype,
            len,
            lo: -3.0,
            hi: 3.0,
        };
        cases.push(Case {
            name: format!("compare {} {dtype}", op.name()),
            program: common::math::compare_select_program(dtype, op),
            args: vec![
                A::I32(common::math::M),
                A::Buf(random(n)),
                A::Buf(random(64)),
                A::Buf(Buf::OutExact(storage::packed_len(DType::UInt(1), n))),
                A::Buf(Buf::OutExact(storage::packed_len(dtype, n))),
            ],
        });
    }
    let (m, cols) = (37, 100);
    let padded = (m as usize).div_ceil(16) * 16 * (cols as usize).div_ceil(64) * 64;
    cases.push(Case {
        name: "masked_row".into(),
        program: common::math::masked_row_program(),
        args: vec![
            A::I32(m),
            A::I32(cols),
            A::Buf(Buf::Random {
                dtype: DType::F32,
                len: (m * cols) as usize,
                lo: -4.0,
                hi: 4.0,
            }),
            A::Buf(Buf::OutUlps {
                dtype: DType::F32,
                len: (m * cols) as usize,
                ulps: MathOp::Exp.max_ulp(0.0),
            }),
            A::Buf(Buf::OutExact(padded * 4)),
        ],
    });
    cases
}

#[test]
fn math_instructions_match_interpreter() {
    run_all("math_instructions_match_interpreter", math_cases());
}

/// The instructions beyond the paper's programs: elementwise arithmetic into every kind of
/// type (overflowing half arithmetic included), integer and f16 dots, paired casts, 1-bit MMA.
fn beyond_the_paper_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = [
        DType::Int(8),
        DType::UInt(4),
        DType::Float { exp: 2, man: 1 },
        DType::Float { exp: 3, man: 2 },
        DType::F8E4M3,
        DType::BF16,
    ]
    .into_iter()
    .map(elementwise_case)
    .collect();
    cases.push(elementwise_case_from(DType::BF16, DType::Int(8)));
    cases.push(elementwise_case_from(DType::BF16, DType::F16));
    cases.push(elementwise_overflow_case(DType::F16));
    cases.push(elementwise_overflow_case(DType::BF16));
    cases.push(Case {
        name: "int_dot".into(),
        program: int_dot_program(),
        args: vec![
            A::Buf(Buf::RandomBytes(32 * 16 / 2)),
            A::Buf(Buf::RandomBytes(16 * 16 / 2)),
            A::Buf(Buf::OutExact(32 * 16 * 4)),
        ],
    });
    cases.push(Case {
        name: "int8_mma".into(),
        program: int8_mma_program(),
        args: vec![
            A::Buf(Buf::RandomBytes(16 * 32)),
            A::Buf(Buf::RandomBytes(32 * 8)),
            A::Buf(Buf::OutExact(16 * 8 * 4)),
        ],
    });
    cases.push(Case {
        name: "f16_dot".into(),
        program: f16_dot_program(),
        args: vec![
            A::Buf(Buf::RandomF16(8 * 16)),
            A::Buf(Buf::RandomF16(16 * 8)),
            A::Buf(Buf::OutF16(8 * 8)),
        ],
    });
    cases.extend(f32_pair_cast_cases());
    cases.extend(bmma_cases());
    cases
}

#[test]
fn instructions_beyond_the_paper_match_interpreter() {
    run_all(
        "instructions_beyond_the_paper_match_interpreter",
        beyond_the_paper_cases(),
    );
}

/// Every reduction of `reduce_programs::CASES` (each lowering stage) for each op: f32 and f16
/// sums, maxima, minima and argmax; i32 sums; `any`/`all` of u1.
fn reduce_cases() -> Vec<Case> {
    use reduce_programs::{reduce_program, shape, sizes, CASES};
    let mut cases = Vec::new();
    for (k, rc) in CASES.iter().enumerate() {
        let (n_in, n_out) = sizes(rc);
        let n = shape(rc)[rc.dim];
        let input = |d: DType| match d {
            DType::F32 => Buf::RandomF32(n_in),
            DType::F16 => Buf::RandomF16(n_in),
            DType::Int(32) => Buf::RandomI32(n_in, 1000),
            _ => Buf::RandomBytes(storage::packed_len(d, n_in)),
        };
        let ops: [(ReduceOp, DType); 10] = [
            (ReduceOp::Sum, DType::F32),
            (ReduceOp::Sum, DType::F16),
            (ReduceOp::Sum, DType::Int(32)),
            (ReduceOp::Max, DType::F32),
            (ReduceOp::Max, DType::F16),
            (ReduceOp::Min, DType::F16),
            (ReduceOp::ArgMax, DType::F32),
            (ReduceOp::ArgMax, DType::F16),
            (ReduceOp::Any, DType::UInt(1)),
            (ReduceOp::All, DType::UInt(1)),
        ];
        for (op, d) in ops {
            let od = reduce_programs::out_dtype(op, d);
            let out = if op == ReduceOp::Sum && d.is_float() {
                // |x| <= 1: sum|x| <= n; plus one rounding of the dtype at magnitude n.
                let ulp = match d {
                    DType::F16 => 2f64.powi(-10),
                    _ => 2f64.powi(-23),
                };
                let tol = (n * n) as f64 * 2f64.powi(-24) + n as f64 * ulp;
                Buf::OutNear {
                    dtype: od,
                    len: n_out,
                    tol,
                }
            } else {
                Buf::OutExact(storage::packed_len(od, n_out))
            };
            cases.push(Case {
                name: format!("reduce case {k} ({} dim {}) {op:?} {d}", rc.layout, rc.dim),
                program: reduce_program(rc, op, d),
                args: vec![A::Buf(input(d)), A::Buf(out)],
            });
        }
        // Integers combine in 32 bits: maxima, minima and argmax compare as `int` (i32 with
        // negatives, i8 sign-extended from random bytes) or `unsigned` (u32 with the top bit
        // set in half the words); sums add modulo 2^32 (i8 and u8 terms whose sums fit the
        // dtype, i32 terms of up to 2^31 / 128 in magnitude, at most 128 to a row).
        let big = 1 << 24; // 2^31 / 128
        let small = |dtype: DType, lo: f64| Buf::Random {
            dtype,
            len: n_in,
            lo,
            hi: 1.5,
        };
        let ints: [(ReduceOp, DType, Buf); 9] = [
            (ReduceOp::Max, DType::Int(32), Buf::RandomI32(n_in, 1000)),
            (ReduceOp::Min, DType::Int(32), Buf::RandomI32(n_in, 1000)),
            (ReduceOp::ArgMax, DType::Int(32), Buf::RandomI32(n_in, 1000)),
            (ReduceOp::Max, DType::UInt(32), Buf::RandomBytes(4 * n_in)),
            (ReduceOp::Min, DType::UInt(32), Buf::RandomBytes(4 * n_in)),
            (ReduceOp::ArgMax, DType::Int(8), Buf::RandomBytes(n_in)),
            (ReduceOp::Sum, DType::Int(8), small(DType::Int(8), -1.0)),
            (ReduceOp::Sum, DType::UInt(8), small(DType::UInt(8), 0.0)),
            (
                ReduceOp::Sum,
                DType::Int(32),
                Buf::I32Range {
                    len: n_in,
                    lo: -big,
                    hi: big,
                },
            ),
        ];
        for (op, d, input) in ints {
            let od = reduce_programs::out_dtype(op, d);
            cases.push(Case {
                name: format!(
                    "reduce case {k} ({} dim {}) {op:?} {d} (32-bit)",
                    rc.layout, rc.dim
                ),
                program: reduce_program(rc, op, d),
                args: vec![
                    A::Buf(input),
                    A::Buf(Buf::OutExact(storage::packed_len(od, n_out))),
                ],
            });
        }
    }
    // cumsum: element k of a row sums k + 1 elements; the bound of the longest prefix.
    // Integers add modulo 2^32 (i32 terms up to 1000, i8 and u8 ones of -1 to 1 and 0 to 1,
    // whose prefixes of at most 256 terms stay in range but for a many-sigma walk).
    for (k, sc) in reduce_programs::SCAN_CASES.iter().enumerate() {
        let s = reduce_programs::shape(sc);
        let (len, n) = (s[0] * s[1], s[sc.dim]);
        for d in [
            DType::F32,
            DType::F16,
            DType::Int(32),
            DType::Int(8),
            DType::UInt(8),
        ] {
            let small = |lo: f64| Buf::Random {
                dtype: d,
                len,
                lo,
                hi: 1.5,
            };
            let input = match d {
                DType::F32 => Buf::RandomF32(len),
                DType::F16 => Buf::RandomF16(len),
                DType::Int(8) => small(-1.0),
                DType::UInt(8) => small(0.0),
                _ => Buf::RandomI32(len, 1000),
            };
            let out = match d {
                DType::Int(32) => Buf::OutExact(4 * len),
                DType::Int(8) | DType::UInt(8) => Buf::OutExact(len),
                _ => {
                    let ulp = if d == DType::F16 {
                        2f64.powi(-10)
                    } else {
                        2f64.powi(-23)
                    };
                    let tol = (n * n) as f64 * 2f64.powi(-24) + n as f64 * ulp;
                    Buf::OutNear { dtype: d, len, tol }
                }
            };
            cases.push(Case {
                name: format!("cumsum case {k} ({} dim {}) {d}", sc.layout, sc.dim),
                program: reduce_programs::scan_program(sc, d),
                args: vec![A::Buf(input), A::Buf(out)],
            });
        }
    }
    for (layout, threads) in [
        ("local(2,1).spatial(2,64)", 128),
        ("spatial(8,16).local(1,4)", 128),
        ("column_spatial(4,32).local(2,1)", 128),
    ] {
        let s = tilus::core::layout::parse(layout).unwrap().shape().to_vec();
        let n = s[0] * s[1];
        cases.push(Case {
            name: format!("sub row max {layout}"),
            program: reduce_programs::sub_max_program(layout, threads),
            args: vec![A::Buf(Buf::RandomF32(n)), A::Buf(Buf::OutExact(4 * n))],
        });
    }
    cases
}

/// `item`, `gather`, `scatter` and atomics: random indices (some out of range), permutations,
/// histograms with many collisions (f32 sums compared with a tolerance: the GPU's order of
/// atomic adds is unspecified), old values of exchange and compare-and-swap on distinct
/// indices.
fn addressing_cases() -> Vec<Case> {
    use addressing::{atomic_program, gather_program, paged_program, scatter_program, TILE};
    use tilus::core::ir::AtomicOp;
    let t = TILE as usize;
    let sh = (addressing::SH_ROWS * addressing::SH_COLS) as i32;
    let mut cases = Vec::new();
    for (dtype, shared) in [
        (DType::F16, false),
        (DType::Int(32), false),
        (DType::UInt(8), true),
        (DType::F16, true),
    ] {
        let (n, m) = (if shared { sh } else { 700 }, 600);
        let bytes = dtype.bits() as usize / 8;
        cases.push(Case {
            name: format!("gather {dtype} shared={shared}"),
            program: gather_program(dtype, shared),
            args: vec![
                A::I32(n),
                A::I32(m),
                A::Buf(Buf::RandomBytes(n as usize * bytes)),
                A::Buf(Buf::I32Range {
                    len: m as usize,
                    lo: -50,
                    hi: n + 50,
                }),
                A::Buf(Buf::OutExact(m as usize * bytes)),
            ],
        });
    }
    for (dtype, shared, replicated) in [
        (DType::F32, false, false),
        (DType::F16, false, true),
        (DType::UInt(8), true, true),
    ] {
        let m = if shared { t } else { 2 * t };
        let n = if shared { TILE } else { m as i32 + 30 };
        let (lo, hi) = if shared { (0, TILE) } else { (-20, n + 20) };
        let bytes = dtype.bits() as usize / 8;
        cases.push(Case {
            name: format!("scatter {dtype} shared={shared} replicated={replicated}"),
            program: scatter_program(dtype, shared, replicated),
            args: vec![
                A::I32(n),
                A::I32(m as i32),
                A::Buf(Buf::RandomBytes(m * bytes)),
                A::Buf(Buf::DistinctI32 { len: m, lo, hi }),
                A::Buf(Buf::OutExact(n as usize * bytes)),
            ],
        });
    }
    // Histograms: (op, dtype, shared).
    for (op, dtype, shared) in [
        (AtomicOp::Add, DType::Int(32), false),
        (AtomicOp::Add, DType::Int(32), true),
        (AtomicOp::Add, DType::F32, false),
        (AtomicOp::Add, DType::F32, true),
        (AtomicOp::Max, DType::F32, false),
        (AtomicOp::Min, DType::F32, true),
        (AtomicOp::Max, DType::UInt(32), true),
        (AtomicOp::Min, DType::Int(32), false),
    ] {
        let bins = if shared { TILE } else { 37 };
        let m = 3 * t;
        let values = |len| match dtype {
            DType::F32 => Buf::RandomF32(len),
            DType::UInt(32) => Buf::I32Range {
                len,
                lo: 0,
                hi: 1 << 30,
            },
            _ => Buf::I32Range {
                len,
                lo: -1000,
                hi: 1000,
            },
        };
        let dst = match (op, dtype) {
            (AtomicOp::Add, DType::F32) => Buf::F32Sum(bins as usize),
            _ => values(bins as usize),
        };
        cases.push(Case {
            name: format!("atomic {op:?} {dtype} shared={shared}"),
            program: atomic_program(op, dtype, shared, false),
            args: vec![
                A::I32(bins),
                A::I32(m as i32),
                A::Buf(Buf::I32Range {
                    len: m,
                    lo: -3,
                    hi: bins + 3,
                }),
                A::Buf(values(m)),
                A::Buf(dst),
            ],
        });
    }
    // Old values, distinct indices.
    for (op, dtype, shared) in [
        (AtomicOp::Exchange, DType::F32, false),
        (AtomicOp::Cas, DType::Int(32), true),
        (AtomicOp::Cas, DType::UInt(32), false),
        (AtomicOp::Add, DType::Int(32), false),
    ] {
        let bins = if shared { TILE } else { 2 * TILE };
        let m = t;
        let small = |len| Buf::I32Range { len, lo: 0, hi: 3 };
        let mut args = vec![
            A::I32(bins),
            A::I32(m as i32),
            A::Buf(Buf::DistinctI32 {
                len: m,
                lo: if shared { 0 } else { -10 },
                hi: bins + if shared { 0 } else { 10 },
            }),
            A::Buf(if dtype == DType::F32 {
                Buf::RandomF32(m)
            } else {
                small(m)
            }),
        ];
        if op == AtomicOp::Cas {
            args.push(A::Buf(small(m)));
        }
        args.push(A::Buf(if dtype == DType::F32 {
            Buf::RandomF32(bins as usize)
        } else {
            small(bins as usize)
        }));
        args.push(A::Buf(Buf::OutExact(4 * m)));
        cases.push(Case {
            name: format!("atomic {op:?} {dtype} shared={shared} with old values"),
            program: atomic_program(op, dtype, shared, true),
            args,
        });
    }
    let (blocks, npages) = (6, 4);
    cases.push(Case {
        name: "paged item".into(),
        program: paged_program(),
        args: vec![
            A::I32(blocks),
            A::I32(npages),
            A::Buf(Buf::I32Range {
                len: blocks as usize,
                lo: 0,
                hi: npages,
            }),
            A::Buf(Buf::RandomF16(blocks as usize)),
            A::Buf(Buf::RandomF32((npages * addressing::PAGE) as usize)),
            A::Buf(Buf::OutExact(4 * (blocks * addressing::PAGE) as usize)),
        ],
    });
    cases
}

#[test]
fn reductions_match_interpreter() {
    run_all("reductions_match_interpreter", reduce_cases());
}

/// Without a GPU, every reduction case verifies, generates code and runs in the interpreter.
#[test]
fn reduction_cases_generate_code_and_interpret() {
    let mut rng = rand::rng();
    for case in reduce_cases() {
        emit(&case.program, &Default::default())
            .unwrap_or_else(|e| panic!("{}: codegen failed: {e}", case.name));
        let mut args: Vec<Arg> = case
            .args
            .iter()
            .map(|a| match a {
                A::I32(v) => Arg::I32(*v),
                A::Buf(b) => Arg::Buffer(fill(b, &mut rng)),
            })
            .collect();
        interp::run(&case.program, &mut args)
            .unwrap_or_else(|e| panic!("{}: interpreter failed: {e}", case.name));
    }
}

/// The `fence` idiom: every block of a tile stores its partial, counts itself on the tile's
/// counter between two fences, and the last one sums the partials in split order and resets the
/// counter. Exact: the partials, the sums (f32 adds in a fixed order) and the counters (zero
/// before, zero after) are the interpreter's bit for bit, whichever blocks the GPU ran last.
fn fence_cases() -> Vec<Case> {
    use fence::{last_block_reduce_program, Reducer, TILE};
    [(1, 2), (5, 4), (64, 8), (300, 3)]
        .into_iter()
        .map(|(tiles, split)| {
            let cols = (tiles * TILE) as usize;
            Case {
                name: format!("last_block_reduce_{tiles}x{split}"),
                program: last_block_reduce_program(split, Reducer::Last),
                args: vec![
                    A::I32(tiles),
                    A::Buf(Buf::RandomF32(split as usize * cols)),
                    A::Buf(Buf::OutExact(4 * split as usize * cols)),
                    A::Buf(Buf::I32Range {
                        len: tiles as usize,
                        lo: 0,
                        hi: 1,
                    }),
                    A::Buf(Buf::OutExact(4 * cols)),
                ],
            }
        })
        .collect()
}

#[test]
fn fence_last_block_reduce_matches_interpreter() {
    run_all("fence_last_block_reduce_matches_interpreter", fence_cases());
}

/// `gather_rows` from every kind of source (global; shared plain, swizzled, sliced at an
/// origin, strided) over index layouts of every kind (replicated, rank 1 and 3, the VQ
/// kernels' column-spatial one) and each dim, rows of 1 to 8 elements of f16, u8 and i32;
/// random rows, indices partly outside the table (rows of zeros).
fn gather_rows_cases() -> Vec<Case> {
    use addressing::{gather_rows_program, RowSrc, ROW_BLOCKS, ROW_INDEX_LAYOUTS, SH_TABLE_ROWS};
    let mut picks = Vec::new();
    let widths = [
        (DType::F16, 4),
        (DType::F16, 8),
        (DType::UInt(8), 2),
        (DType::Int(32), 1),
    ];
    for (k, src) in RowSrc::ALL.into_iter().enumerate() {
        for (j, &(dtype, w)) in widths.iter().enumerate() {
            let (layout, dims) = ROW_INDEX_LAYOUTS[(4 * k + j) % ROW_INDEX_LAYOUTS.len()];
            picks.push((src, dtype, w, layout, dims[(k + j) % dims.len()]));
        }
    }
    // The VQ codebook shapes (LDS.64 and LDS.128 on the GPU) along both dims.
    let vq = "spatial(1, 4).local(2, 2).column_spatial(4, 8)";
    for w in [4, 8] {
        for dim in [0, 1] {
            picks.push((RowSrc::Shared, DType::F16, w, vq, dim));
        }
    }
    picks
        .into_iter()
        .map(|(src, dtype, w, layout, dim)| {
            let rows = match src {
                RowSrc::Global => 300,
                _ => SH_TABLE_ROWS as i32,
            };
            let n = ROW_BLOCKS * parse(layout).unwrap().shape().iter().product::<usize>();
            let bytes = dtype.bits() as usize / 8;
            Case {
                name: format!("gather_rows {src:?} {dtype} w={w} {layout} dim={dim}"),
                program: gather_rows_program(dtype, w, layout, dim, src),
                args: vec![
                    A::I32(rows),
                    A::Buf(Buf::RandomBytes(rows as usize * w * bytes)),
                    A::Buf(Buf::I32Range {
                        len: n,
                        lo: -3,
                        hi: rows + 3,
                    }),
                    A::Buf(Buf::OutExact(n * w * bytes)),
                ],
            }
        })
        .collect()
}

#[test]
fn gather_rows_matches_interpreter() {
    run_all("gather_rows_matches_interpreter", gather_rows_cases());
}

/// `scatter_rows` into every kind of table (global; shared plain, swizzled, sliced at an
/// origin, strided: each block's own rows, copied in and out) from index layouts of every kind
/// (replicated ones write each row once) along each dim, rows of 1 to 8 elements of f16, u8
/// and i32; random rows, distinct indices partly outside the table (skipped), the table
/// poisoned (rows not written stay so). And the VQ kernels' codebook staging: 16 copies of
/// each 4- or 8-f16 entry written into a `[4096, w]` shared table by `uint2`/`uint4` stores.
fn scatter_rows_cases() -> Vec<Case> {
    use addressing::{
        book_copies_program, scatter_rows_program, RowSrc, BOOK_ENTRIES, ROW_BLOCKS,
        ROW_INDEX_LAYOUTS, SC_TABLE_ROWS,
    };
    let mut picks = Vec::new();
    let widths = [
        (DType::F16, 4),
        (DType::F16, 8),
        (DType::UInt(8), 2),
        (DType::Int(32), 1),
    ];
    for (k, dst) in RowSrc::ALL.into_iter().enumerate() {
        for (j, &(dtype, w)) in widths.iter().enumerate() {
            let (layout, dims) = ROW_INDEX_LAYOUTS[(4 * k + j) % ROW_INDEX_LAYOUTS.len()];
            picks.push((dst, dtype, w, layout, dims[(k + j) % dims.len()]));
        }
    }
    // The VQ kernels' fragment layout along both dims, into a plain shared table.
    let vq = "spatial(1, 4).local(2, 2).column_spatial(4, 8)";
    for w in [4, 8] {
        for dim in [0, 1] {
            picks.push((RowSrc::Shared, DType::F16, w, vq, dim));
        }
    }
    let mut cases: Vec<Case> = picks
        .into_iter()
        .map(|(dst, dtype, w, layout, dim)| {
            let n = ROW_BLOCKS * parse(layout).unwrap().shape().iter().product::<usize>();
            let rows = match dst {
                RowSrc::Global => n as i32 + 40,
                _ => (ROW_BLOCKS * SC_TABLE_ROWS) as i32,
            };
            let bytes = dtype.bits() as usize / 8;
            Case {
                name: format!("scatter_rows {dst:?} {dtype} w={w} {layout} dim={dim}"),
                program: scatter_rows_program(dtype, w, layout, dim, dst),
                args: vec![
                    A::I32(rows),
                    A::Buf(Buf::RandomBytes(n * w * bytes)),
                    A::Buf(Buf::DistinctI32 {
                        len: n,
                        lo: -8,
                        hi: rows + 8,
                    }),
                    A::Buf(Buf::OutExact(rows as usize * w * bytes)),
                ],
            }
        })
        .collect();
    for w in [4, 8] {
        cases.push(Case {
            name: format!("scatter_rows book copies f16 w={w}"),
            program: book_copies_program(DType::F16, w, 16),
            args: vec![
                A::Buf(Buf::RandomBytes(BOOK_ENTRIES * w * 2)),
                A::Buf(Buf::OutExact(BOOK_ENTRIES * 16 * w * 2)),
            ],
        });
    }
    cases
}

#[test]
fn scatter_rows_matches_interpreter() {
    run_all("scatter_rows_matches_interpreter", scatter_rows_cases());
}

#[test]
fn data_dependent_addressing_matches_interpreter() {
    run_all(
        "data_dependent_addressing_matches_interpreter",
        addressing_cases(),
    );
}

/// Without a GPU, still check that every case verifies, generates code, and runs in the
/// interpreter (so the GPU tests cannot rot on machines without one).
#[test]
fn every_case_generates_code_and_interprets() {
    let mut cases = vec![
        fig2_case(DType::Int(6), 16, 64, 64),
        fig8_case(DType::UInt(3), 64, 128),
        fig14_case(32, 64, 16, 2),
    ];
    cases.extend(beyond_the_paper_cases());
    cases.extend(math_cases());
    cases.extend(addressing_cases());
    cases.extend(gather_rows_cases());
    cases.extend(scatter_rows_cases());
    cases.extend(fence_cases());
    let mut rng = rand::rng();
    for case in cases {
        let k = emit(&case.program, &Default::default())
            .unwrap_or_else(|e| panic!("{}: codegen failed: {e}", case.name));
        // TILUS_CODEGEN_DUMP=<dir> keeps the generated sources for inspection.
        if let Ok(dir) = std::env::var("TILUS_CODEGEN_DUMP") {
            let file = format!("{dir}/{}.cu", case.program.name);
            std::fs::write(&file, &k.source).unwrap();
        }
        let mut args: Vec<Arg> = case
            .args
            .iter()
            .map(|a| match a {
                A::I32(v) => Arg::I32(*v),
                A::Buf(b) => Arg::Buffer(fill(b, &mut rng)),
            })
            .collect();
        interp::run(&case.program, &mut args)
            .unwrap_or_else(|e| panic!("{}: interpreter failed: {e}", case.name));
    }
}
