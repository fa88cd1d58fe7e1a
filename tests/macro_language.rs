//! The `#[kernel]` language on the CPU interpreter: `f32` scalars, float constants from tile
//! parameters, `step_by` loops with unroll hints, tensor reassignment. Fresh random inputs,
//! outputs poisoned before each run, references computed here.

#[path = "kernels/language.rs"]
mod language;

use language::{
    batched_mma, block_values, chunk_max, closures, constant_bits, flagged, fp8_mma, fp8_mma_case,
    helpers, int8_mma, int8_mma_case, let_copies, narrow_wide, odd_rows, own_tile_order, run_mma,
    scalar_bits, scalar_bits_reference, scalar_operands, scale_shift, shared, tail_ifs, tile_order,
    unrolled, wide_offsets,
};
use rand::Rng;

#[test]
fn scalar_bit_operators_interpret() {
    let mut rng = rand::rng();
    let n = 100;
    for _ in 0..4 {
        let s: i32 = rng.random_range(-1000..1000);
        let w: i64 = rng.random_range(-(1 << 40)..(1 << 40));
        let mut out = vec![-7i32; n];
        scalar_bits::interpret(&scalar_bits::SPACE[0], n as i32, s, w, &mut out).unwrap();
        assert_eq!(out, scalar_bits_reference(n, s, w), "s = {s}, w = {w}");
    }
}

#[test]
fn f32_parameters_and_float_constants() {
    let mut rng = rand::rng();
    for cfg in scale_shift::SPACE {
        let n = rng.random_range(1..300usize);
        let scale: f32 = rng.random_range(-2.0..2.0);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        scale_shift::interpret(cfg, n as i32, scale, &x, &mut y).unwrap();
        // The kernel's f32 arithmetic, step by step (each operation rounded to f32).
        let s = scale * 2.0 + (n as f32) / 1024.0;
        let shift = (1.0 / cfg.BLOCK as f64) as f32;
        for i in 0..n {
            assert_eq!(y[i], x[i] * s + shift, "{cfg} n={n} at {i}");
        }
    }
}

#[test]
fn stepped_loops_and_tensor_reassignment() {
    let mut rng = rand::rng();
    for cfg in chunk_max::SPACE {
        let ch = cfg.CH as usize;
        let (rows, cols) = (rng.random_range(1..5usize), rng.random_range(ch..5 * ch));
        let x: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        let mut y = vec![f32::NAN; rows * ch];
        chunk_max::interpret(cfg, rows as i32, cols as i32, &x, &mut y).unwrap();
        for r in 0..rows {
            for j in 0..ch {
                let want = (0..cols.div_ceil(ch))
                    .map(|k| {
                        let c = k * ch + j;
                        if c < cols {
                            x[r * cols + c]
                        } else {
                            0.0
                        }
                    })
                    .fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(
                    y[r * ch + j],
                    want,
                    "{cfg} rows={rows} cols={cols} at ({r}, {j})"
                );
            }
        }
    }
}

#[test]
fn loops_print_their_step_and_unroll_hint() {
    let p = chunk_max::program(&chunk_max::SPACE[0]).unwrap();
    let text = p.to_string();
    assert!(text.contains("#[unroll(2)]"), "{text}");
    assert!(text.contains(".step_by(32)"), "{text}");
    let k = tilus::core::codegen::emit(&p, &tilus::core::target::Target::SM90).unwrap();
    assert!(k.source.contains("#pragma unroll 2"), "{}", k.source);
    assert!(k.source.contains(" += 32)"), "{}", k.source);
    // f32 arithmetic goes through the round-to-nearest intrinsics (never contracted to FMA).
    let p = scale_shift::program(&scale_shift::SPACE[0]).unwrap();
    let k = tilus::core::codegen::emit(&p, &tilus::core::target::Target::SM90).unwrap();
    assert!(
        k.source.contains("__fadd_rn(__fmul_rn(scale, 2.0f)"),
        "{}",
        k.source
    );
    assert!(k.source.contains("float scale"), "{}", k.source);
}

#[test]
fn helper_functions_inline_and_return_tuples() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..200usize);
    let s: f32 = rng.random_range(-2.0..2.0);
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    let (mut hi, mut lo) = (vec![f32::NAN; n], vec![f32::NAN; n]);
    helpers::interpret(&helpers::SPACE[0], n as i32, s, &x, &mut hi, &mut lo).unwrap();
    for i in 0..n {
        let up = x[i] * s + 1.0;
        let (a, b) = (up.max(x[i]), up.min(x[i]));
        let a = a * 0.5 - 1.0;
        assert_eq!((hi[i], lo[i]), (a.max(b), a.min(b)), "n={n} s={s} at {i}");
    }
    // Each call is inlined: `order` twice, so two `max` instructions.
    let text = helpers::program(&helpers::SPACE[0]).unwrap().to_string();
    assert_eq!(text.matches("= max(").count(), 2, "{text}");
}

/// The prelude's `grouped_tile` visits every tile of a random grid exactly once, in groups of
/// `group` tile rows, down each column of a group (the last group shorter); a kernel's own
/// `grouped_tile` replaces it.
#[test]
fn grouped_tile_visits_every_tile_once_in_groups() {
    let mut rng = rand::rng();
    for _ in 0..8 {
        let (rows, cols) = (rng.random_range(1..20usize), rng.random_range(1..20usize));
        let group = rng.random_range(1..10usize);
        let tiles = rows * cols;
        let mut out = vec![-1i32; tiles * 32];
        let args = (rows as i32, cols as i32, group as i32);
        tile_order::interpret(&tile_order::SPACE[0], args.0, args.1, args.2, &mut out).unwrap();
        let tag = format!("{rows} x {cols} tiles, group {group}");
        let mut seen = vec![false; tiles];
        let mut pid = 0;
        for first in (0..rows).step_by(group) {
            let height = group.min(rows - first);
            for bj in 0..cols {
                for bi in first..first + height {
                    let at = &out[pid * 32..(pid + 1) * 32];
                    let want = (bi * cols + bj) as i32;
                    assert!(at.iter().all(|&v| v == want), "{tag}: block {pid} {at:?}");
                    assert!(!seen[bi * cols + bj], "{tag}: tile ({bi}, {bj}) twice");
                    seen[bi * cols + bj] = true;
                    pid += 1;
                }
            }
        }
        assert_eq!(pid, tiles, "{tag}");
        let mut own = vec![-1i32; tiles * 32];
        own_tile_order::interpret(&own_tile_order::SPACE[0], args.0, args.1, args.2, &mut own)
            .unwrap();
        for pid in 0..tiles {
            let want = ((pid % rows) * cols + pid / rows) as i32;
            assert!(
                own[pid * 32..(pid + 1) * 32].iter().all(|&v| v == want),
                "{tag}: own {pid}"
            );
        }
    }
}

/// `#[tilus::helpers]`: two kernels of one module call the same helpers (which read each
/// kernel's own parameters and tile parameter), every configuration on the interpreter.
#[test]
fn shared_helpers_serve_every_kernel_of_the_module() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..300usize);
    let (s, a): (f32, f32) = (rng.random_range(-3.0..3.0), rng.random_range(-2.0..2.0));
    let limit: f32 = rng.random_range(0.5..4.0);
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    for cfg in shared::scaled::SPACE {
        let mut y = vec![f32::NAN; n];
        shared::scaled::interpret(cfg, n as i32, s, limit, &x, &mut y).unwrap();
        for i in 0..n {
            assert_eq!(
                y[i],
                (x[i] * s).clamp(-limit, limit),
                "{cfg:?} n={n} at {i}"
            );
        }
    }
    let mut y = vec![f32::NAN; n];
    shared::shifted::interpret(&shared::shifted::SPACE[0], n as i32, a, limit, &x, &mut y).unwrap();
    for i in 0..n {
        assert_eq!(y[i], (x[i] + a).clamp(-limit, limit), "n={n} at {i}");
    }
}

#[test]
fn ifs_ending_a_block_are_statements() {
    let mut rng = rand::rng();
    for cfg in tail_ifs::SPACE {
        // Blocks 4 and 5 (the helper's branches) always run.
        let n = rng.random_range(161..300usize);
        let t: f32 = rng.random_range(-2.0..2.0);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        tail_ifs::interpret(cfg, n as i32, t, &x, &mut y).unwrap();
        for i in 0..n {
            let want = match (i / 32 % 2, cfg.TWICE) {
                (0, _) => x[i] + t,
                (_, 1) => x[i] * 2.0,
                _ => x[i] * 3.0,
            };
            assert_eq!(y[i], want, "{cfg} n={n} at {i}");
        }
    }
}

#[test]
fn closures_capture_their_scope() {
    let mut rng = rand::rng();
    for cfg in closures::SPACE {
        let n = rng.random_range(1..200usize);
        let s: f32 = rng.random_range(-2.0..2.0);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        closures::interpret(cfg, n as i32, s, &x, &mut y).unwrap();
        let mut reps: Vec<i32> = (0..cfg.REPS).collect();
        if cfg.REPS > 1 {
            reps.push(100);
        }
        for i in 0..n {
            let mut want = 0.0f32;
            for &rep in &reps {
                want = (x[i] * s).mul_add(x[i], want) + rep as f32;
            }
            if cfg.REPS > 1 {
                want += 0.5;
            }
            assert_eq!(y[i], want, "{cfg} n={n} s={s} at {i}");
        }
    }
    // The closure is inlined at each call and writes the captured accumulator itself: no copy.
    let text = closures::program(&closures::SPACE[1]).unwrap().to_string();
    assert_eq!(text.matches("mul_add(").count(), 2, "{text}");
    assert!(!text.contains("view("), "{text}");
}

#[test]
fn blocks_are_values() {
    let mut rng = rand::rng();
    for cfg in block_values::SPACE {
        let n = rng.random_range(33..200usize);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        block_values::interpret(cfg, n as i32, &x, &mut y).unwrap();
        for i in 0..n {
            let bi = (i / 32) as i32;
            let base = if cfg.MODE == 1 { bi * 2 + 3 } else { 7 };
            let mut want = (x[i] + 1.0) * base as f32;
            if cfg.MODE == 1 {
                want += 0.25;
            }
            assert_eq!(y[i], want, "{cfg} n={n} at {i}");
        }
    }
}

#[test]
fn constant_loops_unroll_in_the_translator() {
    let mut rng = rand::rng();
    for cfg in unrolled::SPACE {
        let n = rng.random_range(1..100usize);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let mut y = vec![f32::NAN; n];
        unrolled::interpret(cfg, n as i32, &x, &mut y).unwrap();
        for i in 0..n {
            let want = (0..cfg.COPIES).fold(x[i], |a, c| a * 2.0 + c as f32);
            assert_eq!(y[i], want, "{cfg} at {i}");
        }
        let text = unrolled::program(cfg).unwrap().to_string();
        // No loop is left: three copies with the constants 0, 1, 2, or nothing at all.
        assert!(!text.contains("for "), "{text}");
        assert_eq!(
            text.matches("= mul(").count(),
            cfg.COPIES as usize,
            "{text}"
        );
        if cfg.COPIES == 3 {
            assert!(text.contains(", 2)"), "{text}");
        }
    }
}

#[test]
fn scalar_operands_convert_exactly() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..100usize);
    let big = (1 << 24) + 1 + rng.random_range(0..1000);
    let t: f32 = rng.random_range(-1.0..1.0);
    let xi: Vec<i32> = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
    let xf: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0..2.0)).collect();
    let (mut yi, mut yf) = (vec![i32::MIN; n], vec![f32::NAN; n]);
    scalar_operands::interpret(
        &scalar_operands::SPACE[0],
        n as i32,
        big,
        t,
        &xi,
        &xf,
        &mut yi,
        &mut yf,
    )
    .unwrap();
    for i in 0..n {
        assert_eq!(yi[i], xi[i] + big, "at {i}");
        assert_eq!(yf[i], xf[i].min(t), "at {i}");
    }
}

#[test]
fn bool_parameters_steer_branches() {
    let mut rng = rand::rng();
    let n = rng.random_range(1..100usize);
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    for negate in [false, true] {
        let mut y = vec![f32::NAN; n];
        flagged::interpret(&flagged::SPACE[0], n as i32, negate, &x, &mut y).unwrap();
        for i in 0..n {
            assert_eq!(
                y[i],
                if negate { -x[i] } else { x[i] },
                "negate={negate} at {i}"
            );
        }
    }
    let k = tilus::core::codegen::emit(
        &flagged::program(&flagged::SPACE[0]).unwrap(),
        &tilus::core::target::Target::SM90,
    )
    .unwrap();
    assert!(k.source.contains("int negate"), "{}", k.source);
}

/// The reference of `wide_offsets`: element `i` of block `bi` is `x[start + 32 bi + j]` (0 past
/// the view), plus 1 when the block's tile passes the view's end.
fn wide_offsets_reference(rows: usize, cols: usize, n: usize, start: i64, x: &[f32]) -> Vec<f64> {
    let total = (rows * cols) as i64;
    (0..n)
        .map(|i| {
            let at = start + (i / 32 * 32) as i64;
            let e = start + i as i64;
            let v = if (0..total).contains(&e) {
                x[e as usize] as f64
            } else {
                0.0
            };
            if at + 32 <= total {
                v
            } else {
                v + 1.0
            }
        })
        .collect()
}

/// `i64` offsets on the interpreter: random views, starts in and past the view, outputs
/// poisoned; `load_global` and `copy_async` agree with the reference.
#[test]
fn i64_offsets_address_global_views() {
    let mut rng = rand::rng();
    let cfg = &wide_offsets::SPACE[0];
    for _ in 0..20 {
        let (rows, cols) = (
            rng.random_range(1..6usize),
            32 * rng.random_range(1..4usize),
        );
        let total = rows * cols;
        let n = 32 * rng.random_range(1..4usize);
        // Tiles start on a multiple of 32, so each stays inside one row.
        let start = 32 * rng.random_range(0..(total / 32 + 2)) as i64;
        let x: Vec<f32> = (0..total).map(|_| rng.random_range(-4.0..4.0)).collect();
        let (mut y, mut z) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        wide_offsets::interpret(
            cfg,
            rows as i32,
            cols as i32,
            n as i32,
            start,
            &x,
            &mut y,
            &mut z,
        )
        .unwrap();
        let want = wide_offsets_reference(rows, cols, n, start, &x);
        for i in 0..n {
            assert_eq!(
                y[i] as f64, want[i],
                "load_global rows={rows} cols={cols} start={start} at {i}"
            );
            assert_eq!(
                z[i] as f64, want[i],
                "copy_async rows={rows} cols={cols} start={start} at {i}"
            );
        }
    }
    // An offset past the i32 range is masked (out of the view), not truncated into it.
    let x: Vec<f32> = (0..64).map(|_| rng.random_range(-4.0..4.0)).collect();
    let start = (1i64 << 32) * 32;
    let (mut y, mut z) = (vec![f32::NAN; 32], vec![f32::NAN; 32]);
    wide_offsets::interpret(cfg, 2, 32, 32, start, &x, &mut y, &mut z).unwrap();
    assert_eq!(y, vec![1.0; 32]);
    assert_eq!(z, vec![1.0; 32]);
}

/// `i64 * i32` promotes and is exact past the i32 range; `as i32` of an in-range i64 is exact,
/// of an out-of-range one an error naming the conversion, and i64 overflow is an error.
#[test]
fn i64_arithmetic_and_narrowing_are_checked() {
    let mut rng = rand::rng();
    let cfg = &narrow_wide::SPACE[0];
    let x: Vec<i32> = (0..32).map(|_| rng.random_range(-1000..1000)).collect();
    for _ in 0..20 {
        // v * k passes i32 (v alone may) but v * k / 2 fits it.
        let k = rng.random_range(2..100i32);
        let v = rng.random_range(-(i32::MAX as i64)..=i32::MAX as i64) / k as i64 * 2;
        let mut y = vec![i32::MIN; 32];
        narrow_wide::interpret(cfg, v, k, &x, &mut y).unwrap();
        let s = (v as i128 * k as i128 / 2) as f64;
        for i in 0..32 {
            assert_eq!(y[i] as f64, x[i] as f64 + s, "v={v} k={k} at {i}");
        }
    }
    let mut y = vec![i32::MIN; 32];
    let err = narrow_wide::interpret(cfg, 3_000_000_000, 2, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not fit an i32"), "{err}");
    let err = narrow_wide::interpret(cfg, i64::MAX / 2, 3, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(err.contains("i64 overflow"), "{err}");
}

/// Random `a [32, k]` and `bt [16, k]` with small integer values (every product and sum exact
/// in f32, so any summation order gives the same bits) and the f64 product `a · btᵀ`.
pub fn run_mma_case(k: usize) -> (Vec<half::f16>, Vec<half::f16>, Vec<f64>) {
    let mut rng = rand::rng();
    let mut gen = |len: usize| -> Vec<half::f16> {
        (0..len)
            .map(|_| half::f16::from_f32(rng.random_range(-8..=8) as f32))
            .collect()
    };
    let (a, bt) = (gen(32 * k), gen(16 * k));
    let mut c = vec![0f64; 32 * 16];
    for i in 0..32 {
        for j in 0..16 {
            c[i * 16 + j] = (0..k)
                .map(|kk| a[i * k + kk].to_f64() * bt[j * k + kk].to_f64())
                .sum();
        }
    }
    (a, bt, c)
}

/// `[4, 16, k] x [4, k, 16]` small-integer f16 operands and their exact batched product.
pub fn batched_case(k: usize) -> (Vec<half::f16>, Vec<half::f16>, Vec<f64>) {
    let mut rng = rand::rng();
    let mut gen = |len: usize| -> Vec<half::f16> {
        (0..len)
            .map(|_| half::f16::from_f32(rng.random_range(-8..=8) as f32))
            .collect()
    };
    let (a, b) = (gen(4 * 16 * k), gen(4 * k * 16));
    let mut c = vec![0f64; 4 * 16 * 16];
    for i in 0..4 {
        for r in 0..16 {
            for j in 0..16 {
                c[(i * 16 + r) * 16 + j] = (0..k)
                    .map(|kk| a[(i * 16 + r) * k + kk].to_f64() * b[(i * k + kk) * 16 + j].to_f64())
                    .sum();
            }
        }
    }
    (a, b, c)
}

/// A batched `dot` (one product per warp) computes each product on its own operands, on the
/// mma and with thread-local FMAs.
#[test]
fn batched_dot_computes_one_product_per_batch() {
    for cfg in batched_mma::SPACE {
        let k = 64;
        let (a, b, reference) = batched_case(k);
        let mut c = vec![f32::NAN; 4 * 16 * 16];
        batched_mma::interpret(cfg, k as i32, &a, &b, &mut c).unwrap();
        for (i, (&got, &want)) in c.iter().zip(&reference).enumerate() {
            assert_eq!(got as f64, want, "{cfg} at {i}");
        }
    }
}

/// The run fragments (k permuted so each thread holds 4 or 8 consecutive k) compute the
/// ordinary product.
#[test]
fn run_fragments_compute_the_product() {
    for cfg in run_mma::SPACE {
        let k = 4 * 8 * cfg.R as usize;
        let (a, bt, reference) = run_mma_case(k);
        let mut c = vec![f32::NAN; 32 * 16];
        run_mma::interpret(cfg, k as i32, &a, &bt, &mut c).unwrap();
        for (i, (&got, &want)) in c.iter().zip(&reference).enumerate() {
            assert_eq!(got as f64, want, "{cfg} at {i}");
        }
    }
}

/// The fp8 fragments (`mma_a_f8`, `mma_b_f8`, a view of `mma_b_f8_t`) compute the product.
#[test]
fn fp8_fragments_compute_the_product() {
    for tiny in [false, true] {
        let k = 96;
        let (a, bt, reference) = fp8_mma_case(k, tiny);
        assert!(
            reference.iter().any(|&x| x != 0.0),
            "a case of zeros tests nothing"
        );
        let mut c = vec![f32::NAN; 32 * 16];
        fp8_mma::interpret(&fp8_mma::SPACE[0], k as i32, &a, &bt, &mut c).unwrap();
        for (i, (&got, &want)) in c.iter().zip(&reference).enumerate() {
            assert_eq!(got as f64, want, "tiny = {tiny} at {i}");
        }
    }
}

/// 8-bit integers of every signedness pair on the k32 fragments (`mma.m16n8k32 .s32.u8.s8` and
/// the others) compute the exact product from a non-zero accumulator.
#[test]
fn int8_k32_fragments_compute_the_product() {
    assert_eq!(int8_mma::SPACE.len(), 4);
    for cfg in int8_mma::SPACE.iter() {
        let signed = (cfg.A == tilus::DType::Int(8), cfg.B == tilus::DType::Int(8));
        let k = 96;
        let (a, bt, reference) = int8_mma_case(k, signed);
        let mut c = vec![i32::MIN; 32 * 16];
        int8_mma::interpret(cfg, k as i32, &a, &bt, &mut c).unwrap();
        for (i, (&got, &want)) in c.iter().zip(&reference).enumerate() {
            assert_eq!(got as i64, want, "{signed:?} at {i}");
        }
    }
}

#[test]
fn bit_operators_fold_on_constants() {
    let mut rng = rand::rng();
    for cfg in constant_bits::SPACE {
        let n = rng.random_range(1..100usize);
        let x: Vec<i32> = (0..n).map(|_| rng.random()).collect();
        let mut y = vec![i32::MIN; n];
        constant_bits::interpret(cfg, n as i32, &x, &mut y).unwrap();
        let mask = (1i32 << cfg.BITS) - 1;
        let high = ((0xF0 >> 4) ^ 1) << cfg.BITS;
        for i in 0..n {
            assert_eq!(y[i], (x[i] & mask) | high, "{cfg} at {i}");
        }
    }
}

/// A `copy_async` that cannot move whole 4-, 8- or 16-byte chunks is still exact (the
/// interpreter copies every element), and its generated code carries a note naming the copy,
/// while a chunked copy (`wide_offsets`, 16-byte chunks) has none.
#[test]
fn a_synchronous_copy_async_is_noted() {
    use half::f16;
    let mut rng = rand::rng();
    let x: Vec<f16> = (0..96)
        .map(|_| f16::from_f32(rng.random_range(-4.0..4.0)))
        .collect();
    let mut y = vec![f16::NAN; 96];
    odd_rows::interpret(&odd_rows::SPACE[0], &x, &mut y).unwrap();
    assert_eq!(
        x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let target = tilus::core::target::Target::SM90;
    let k = tilus::core::codegen::emit(&odd_rows::program(&odd_rows::SPACE[0]).unwrap(), &target)
        .unwrap();
    assert_eq!(k.notes.len(), 1, "{:?}", k.notes);
    let note = &k.notes[0].message;
    assert!(note.starts_with("copy_async into `"), "{note}");
    assert!(
        note.contains("3 x 16-bit") && note.contains("synchronous"),
        "{note}"
    );
    let k = tilus::core::codegen::emit(
        &wide_offsets::program(&wide_offsets::SPACE[0]).unwrap(),
        &target,
    )
    .unwrap();
    assert!(k.notes.is_empty(), "{:?}", k.notes);
}

/// `let b = a;` copies a register tensor when either name is mutable: writing one later
/// leaves the other (it used to alias them).
#[test]
fn let_of_a_mutable_tensor_copies_it() {
    let mut rng = rand::rng();
    let x: Vec<i32> = (0..32).map(|_| rng.random_range(-1000..1000)).collect();
    let mut out = vec![i32::MIN; 128];
    let_copies::interpret(&let_copies::SPACE[0], &x, &mut out).unwrap();
    for i in 0..32 {
        let want = [x[i], x[i] + 1, 2 * (x[i] + 1), x[i] + 1];
        for (j, w) in want.iter().enumerate() {
            assert_eq!(out[32 * j + i], *w, "out[{}] (x = {})", 32 * j + i, x[i]);
        }
    }
}
