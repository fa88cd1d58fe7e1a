//! Reductions (`sum`, `reduce_max`, `reduce_min`, `argmax`, `any`, `all`): the interpreter
//! against an f64 reference on fresh random data for layouts that exercise every lowering stage,
//! a following broadcast `sub`, the verifier's rejections, and the generated code's stages.

use rand::Rng;
use tilus_core::codegen::emit;
use tilus_core::interp::{run, Arg};
use tilus_core::ir::{ProgramBuilder, ReduceOp};
use tilus_core::layout::parse;
use tilus_core::verify::{plan_reduce, verify, Target};
use tilus_core::{storage, DType};

#[allow(dead_code)]
#[path = "../../tests/common/reduce_programs.rs"]
mod reduce_programs;
use reduce_programs::{
    out_dtype, reduce_program, scan_program, shape, sizes, sub_max_program, CASES, SCAN_CASES,
};

/// Random codes of `dtype`: u1 uniformly, integers in [-50, 50], floats in [-1, 1]; never all
/// zero.
fn random_codes(dtype: DType, len: usize) -> Vec<u32> {
    let mut rng = rand::rng();
    loop {
        let codes: Vec<u32> = (0..len)
            .map(|_| match dtype {
                DType::UInt(1) => rng.random_range(0..2u32),
                d if !d.is_float() => {
                    let v: i64 = rng.random_range(if d.is_signed() { -50 } else { 0 }..=50);
                    v as u32 & d.code_mask()
                }
                d => d.encode(rng.random_range(-1.0f32..1.0)).unwrap(),
            })
            .collect();
        if codes.iter().any(|&c| dtype.decode(c) != 0.0) {
            return codes;
        }
    }
}

/// The f64 reference of one row; for float sums the exact sum (rounding is compared with a
/// tolerance of one unit of the dtype).
fn reference(op: ReduceOp, row: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => row.iter().sum(),
        ReduceOp::Max | ReduceOp::Any => row.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min | ReduceOp::All => row.iter().cloned().fold(f64::INFINITY, f64::min),
        ReduceOp::ArgMax => {
            let mut best = 0;
            for (k, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = k;
                }
            }
            best as f64
        }
    }
}

fn check_case(case: &reduce_programs::ReduceCase, op: ReduceOp, dtype: DType) {
    let p = reduce_program(case, op, dtype);
    let od = out_dtype(op, dtype);
    let (n_in, n_out) = sizes(case);
    let s = shape(case);
    let codes = random_codes(dtype, n_in);
    let x: Vec<f64> = codes.iter().map(|&c| dtype.decode(c)).collect();
    let mut args = vec![
        Arg::Buffer(storage::pack(dtype, &codes)),
        Arg::Buffer(vec![0xff; storage::packed_len(od, n_out)]),
    ];
    run(&p, &mut args).unwrap_or_else(|e| panic!("{} {op:?} {dtype}: {e}", case.layout));
    let Arg::Buffer(out) = &args[1] else {
        unreachable!()
    };
    let got: Vec<f64> = storage::unpack(od, out, n_out)
        .into_iter()
        .map(|c| od.decode(c))
        .collect();
    let cols = s[1];
    let rows = n_in / cols;
    for (o, &g) in got.iter().enumerate() {
        // Output element `o` of `[rows, 1]` (dim 1) or `[blocks, cols]` (dim 0).
        let row: Vec<f64> = if case.dim == 1 {
            (0..cols).map(|k| x[o * cols + k]).collect()
        } else {
            let (blk, c) = (o / cols, o % cols);
            (0..s[0]).map(|k| x[(blk * s[0] + k) * cols + c]).collect()
        };
        assert!(rows > 0);
        let want = reference(op, &row);
        let tol = if op == ReduceOp::Sum && dtype.is_float() {
            // One rounding to the dtype (f16: 11 significant bits).
            let man = if dtype == DType::F32 {
                24
            } else if dtype == DType::F16 {
                11
            } else {
                8
            };
            want.abs().max(1e-30) * 2f64.powi(-man + 1)
        } else {
            0.0
        };
        assert!(
            (g - want).abs() <= tol,
            "{} dim {} {op:?} {dtype}: output {o}: got {g}, want {want} (row {row:?})",
            case.layout,
            case.dim
        );
    }
}

#[test]
fn reductions_match_the_f64_reference_on_every_layout() {
    for case in CASES {
        for dtype in [DType::F32, DType::F16] {
            for op in [
                ReduceOp::Sum,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::ArgMax,
            ] {
                check_case(case, op, dtype);
            }
        }
        check_case(case, ReduceOp::Sum, DType::Int(32));
        check_case(case, ReduceOp::Max, DType::Int(4));
        check_case(case, ReduceOp::Any, DType::UInt(1));
        check_case(case, ReduceOp::All, DType::UInt(1));
    }
}

#[test]
fn argmax_prefers_the_smallest_index_on_ties() {
    let case = &CASES[3]; // lanes and warps
    let p = reduce_program(case, ReduceOp::ArgMax, DType::F32);
    let (n_in, n_out) = sizes(case);
    let cols = shape(case)[1];
    // Every row: 0.5 at columns 7 and 40, smaller elsewhere.
    let x: Vec<f32> = (0..n_in)
        .map(|i| {
            if i % cols == 7 || i % cols == 40 {
                0.5
            } else {
                -((i % 5) as f32) / 8.0
            }
        })
        .collect();
    let codes: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let mut args = vec![
        Arg::Buffer(storage::pack(DType::F32, &codes)),
        Arg::Buffer(vec![0xff; n_out * 4]),
    ];
    run(&p, &mut args).unwrap();
    let Arg::Buffer(out) = &args[1] else {
        unreachable!()
    };
    for o in out.chunks(4) {
        assert_eq!(i32::from_le_bytes([o[0], o[1], o[2], o[3]]), 7);
    }
}

#[test]
fn integer_sum_overflow_is_an_error() {
    let case = &CASES[2];
    let p = reduce_program(case, ReduceOp::Sum, DType::Int(8));
    let (n_in, n_out) = sizes(case);
    let mut args = vec![Arg::Buffer(vec![100; n_in]), Arg::Buffer(vec![0; n_out])];
    let e = run(&p, &mut args).expect_err("32 x 100 overflows i8");
    assert!(e.message.contains("overflows i8"), "{}", e.message);
}

/// `sub(x, reduce_max(x, 1))` broadcasts thread-locally: every thread holds its rows' maxima.
#[test]
fn sub_of_the_row_max_broadcasts_in_registers() {
    for (layout, threads) in [
        ("local(2,1).spatial(2,64)", 128),
        ("spatial(8,16).local(1,4)", 128),
        ("column_spatial(4,32).local(2,1)", 128),
    ] {
        let p = sub_max_program(layout, threads);
        let s = parse(layout).unwrap().shape().to_vec();
        let n = s[0] * s[1];
        let codes = random_codes(DType::F32, n);
        let x: Vec<f64> = codes.iter().map(|&c| DType::F32.decode(c)).collect();
        let mut args = vec![
            Arg::Buffer(storage::pack(DType::F32, &codes)),
            Arg::Buffer(vec![0xff; n * 4]),
        ];
        run(&p, &mut args).unwrap_or_else(|e| panic!("{layout}: {e}"));
        let Arg::Buffer(out) = &args[1] else {
            unreachable!()
        };
        for r in 0..s[0] {
            let m = x[r * s[1]..(r + 1) * s[1]]
                .iter()
                .cloned()
                .fold(f64::NEG_INFINITY, f64::max);
            for c in 0..s[1] {
                let i = r * s[1] + c;
                let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
                assert_eq!(got, (x[i] - m) as f32, "{layout}: [{r}, {c}]");
            }
        }
        // And the generated code needs no shared memory beyond the reduction's scratch.
        emit(&p, &Target::default()).unwrap_or_else(|e| panic!("{layout}: {e}"));
    }
}

#[test]
fn the_result_layout_groups_locals_as_the_plan_says() {
    for case in CASES {
        let x = parse(case.layout).unwrap();
        let out = x.reduce(&[case.dim]).unwrap();
        let plan = plan_reduce(&x, case.dim).unwrap();
        assert_eq!(plan.out_locals(), out.num_locals(), "{}", case.layout);
        for t in 0..x.num_threads() {
            for (j, group) in plan.groups.iter().enumerate() {
                for &i in group {
                    let mut idx = x.eval(t, i);
                    idx[case.dim] = 0;
                    assert_eq!(out.eval(t, j), idx, "{} t {t} j {j}", case.layout);
                }
            }
        }
        // Slots: one per layout thread up to the shuffle bits, each written by one thread.
        let mut seen = vec![0; plan.slots];
        let lane_bits: usize = plan.lane_masks.iter().sum();
        for r in (0..plan.threads).filter(|r| r & lane_bits == 0) {
            seen[plan.slot_of(r)] += 1;
        }
        assert!(seen.iter().all(|&c| c == 1), "{}: {seen:?}", case.layout);
    }
}

#[test]
fn generated_code_uses_shuffles_and_the_shared_stage_where_needed() {
    let src = |layout: &str, dim: usize, threads: u32| {
        let case = reduce_programs::ReduceCase {
            layout: Box::leak(layout.to_string().into_boxed_str()),
            dim,
            threads,
        };
        emit(
            &reduce_program(&case, ReduceOp::Sum, DType::F32),
            &Target::default(),
        )
        .unwrap()
    };
    let k = src("spatial(4,32)", 1, 128);
    assert_eq!(
        k.source.matches("__shfl_xor_sync").count(),
        5,
        "{}",
        k.source
    );
    assert!(!k.source.contains("__syncthreads"), "{}", k.source);
    assert_eq!(k.shared_bytes, 0);
    let k = src("local(2,1).spatial(2,64)", 1, 128);
    assert!(k.source.contains("__syncthreads"), "{}", k.source);
    // Four slots (two warps x two row groups) of two f32 partials.
    assert_eq!(k.shared_bytes, 4 * 2 * 4);
    let k = src("spatial(128,1).local(1,16)", 1, 128);
    assert!(!k.source.contains("__shfl") && !k.source.contains("__syncthreads"));
}

#[test]
fn verifier_rejects_bad_reductions_naming_the_operand() {
    let diag = |dtype: DType, op: ReduceOp, dim: usize| {
        let mut b = ProgramBuilder::new("bad", 128);
        b.grid(vec![1.into()]);
        let x = b.allocate_register("xs", dtype, parse("spatial(4,32)").unwrap(), Some(0.0));
        b.reduce("r", x, op, dim);
        let p = b.finish();
        let d = verify(&p, &Target::default()).expect_err("must not verify");
        d.iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let m = diag(DType::F32, ReduceOp::Sum, 2);
    assert!(
        m.contains("dim 2 is out of range") && m.contains("`xs`"),
        "{m}"
    );
    let m = diag(DType::UInt(4), ReduceOp::Sum, 1);
    assert!(
        m.contains("sum is defined for") && m.contains("`xs`") && m.contains("u4"),
        "{m}"
    );
    let m = diag(DType::F8E4M3, ReduceOp::Sum, 1);
    assert!(m.contains("sum is defined for"), "{m}");
    let m = diag(DType::F32, ReduceOp::Any, 1);
    assert!(m.contains("any reduces u1") && m.contains("`xs`"), "{m}");
    let m = diag(DType::Int(8), ReduceOp::All, 0);
    assert!(m.contains("all reduces u1"), "{m}");
}

#[test]
fn reduction_scratch_counts_against_shared_memory() {
    // 1024 threads along dim 0 reduced across 32 warps, 64 f32 results per thread: 32 slots x
    // 64 x 4 bytes = 8 KiB of scratch, plus a 220 KiB shared tensor: over sm_80's 163 KiB... the
    // scratch alone is fine, the sum is not.
    let mut b = ProgramBuilder::new("big", 1024);
    b.grid(vec![1.into()]);
    let x = b.allocate_register(
        "xs",
        DType::F32,
        parse("spatial(1024,1).local(1,64)").unwrap(),
        Some(1.0),
    );
    b.reduce("r", x, ReduceOp::Sum, 0);
    let ok = b.finish();
    verify(&ok, &Target::default()).unwrap();
    let mut b = ProgramBuilder::new("big", 1024);
    b.grid(vec![1.into()]);
    let limit = Target::default().max_shared_bytes;
    b.allocate_shared(
        "sh",
        DType::UInt(8),
        tilus_core::layout::SharedLayout::row_major(&[limit - 1024]),
    );
    let x = b.allocate_register(
        "xs",
        DType::F32,
        parse("spatial(1024,1).local(1,64)").unwrap(),
        Some(1.0),
    );
    b.reduce("r", x, ReduceOp::Sum, 0);
    let d = verify(&b.finish(), &Target::default()).expect_err("over the shared limit");
    let m = d[0].message.clone();
    assert!(m.contains("shared memory") && m.contains("`r`"), "{m}");
}

#[test]
fn cumsum_matches_the_f64_reference() {
    for case in SCAN_CASES {
        for dtype in [DType::F32, DType::F16, DType::Int(32)] {
            let p = scan_program(case, dtype);
            let s = shape(case);
            let n = s[0] * s[1];
            let codes = random_codes(dtype, n);
            let x: Vec<f64> = codes.iter().map(|&c| dtype.decode(c)).collect();
            let mut args = vec![
                Arg::Buffer(storage::pack(dtype, &codes)),
                Arg::Buffer(vec![0xff; storage::packed_len(dtype, n)]),
            ];
            run(&p, &mut args).unwrap_or_else(|e| panic!("{} {dtype}: {e}", case.layout));
            let Arg::Buffer(out) = &args[1] else {
                unreachable!()
            };
            let got: Vec<f64> = storage::unpack(dtype, out, n)
                .into_iter()
                .map(|c| dtype.decode(c))
                .collect();
            for r in 0..s[0] {
                for c in 0..s[1] {
                    let want: f64 = if case.dim == 1 {
                        (0..=c).map(|k| x[r * s[1] + k]).sum()
                    } else {
                        (0..=r).map(|k| x[k * s[1] + c]).sum()
                    };
                    let man = match dtype {
                        DType::F32 => 24,
                        DType::F16 => 11,
                        _ => 80,
                    };
                    let g = got[r * s[1] + c];
                    assert!(
                        (g - want).abs() <= want.abs() * 2f64.powi(-man + 1),
                        "{} {dtype} [{r}, {c}]: got {g}, want {want}",
                        case.layout
                    );
                }
            }
        }
    }
}

#[test]
fn cumsum_of_sub_byte_or_a_bad_dim_is_rejected() {
    let diag = |layout: &str, dtype: DType, dim: usize| {
        let mut b = ProgramBuilder::new("bad", 128);
        b.grid(vec![1.into()]);
        let x = b.allocate_register("xs", dtype, parse(layout).unwrap(), Some(0.0));
        b.scan("c", x, tilus_core::ir::ScanOp::Sum, dim);
        let d = verify(&b.finish(), &Target::default()).expect_err("must not verify");
        d.iter()
            .map(|d| d.message.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Across warps is fine (a shared-memory step), and its scratch is counted.
    let mut b = ProgramBuilder::new("ok", 128);
    b.grid(vec![1.into()]);
    let x = b.allocate_register(
        "xs",
        DType::F32,
        parse("local(2,1).spatial(2,64)").unwrap(),
        Some(0.0),
    );
    b.scan("c", x, tilus_core::ir::ScanOp::Sum, 1);
    let p = b.finish();
    verify(&p, &Target::default()).unwrap();
    let plan =
        tilus_core::verify::plan_scan(&parse("local(2,1).spatial(2,64)").unwrap(), 1).unwrap();
    assert_eq!(plan.scratch_bytes(128, 2), 128 * 2 * 4);
    let m = diag("spatial(4,32)", DType::UInt(2), 1);
    assert!(
        m.contains("cumsum is defined for") && m.contains("`xs`"),
        "{m}"
    );
    let m = diag("spatial(4,32)", DType::F32, 3);
    assert!(m.contains("out of range"), "{m}");
}
