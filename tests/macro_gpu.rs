//! The `#[kernel]` examples launched on a GPU through their generated `launch` functions, on
//! fresh random data against f64 references, plus the launcher's argument checks.
//!
//! Skips with a printed reason when no GPU can be used; `TILUS_REQUIRE_GPU=1` turns the skip
//! into a failure. Run: `cargo test --test macro_gpu -- --nocapture`.

#[allow(dead_code)]
#[path = "../examples/fig14.rs"]
mod fig14;
#[allow(dead_code)]
#[path = "../examples/fig2.rs"]
mod fig2;

#[allow(dead_code)]
#[path = "kernels/launch.rs"]
mod launch_kernels;

#[allow(dead_code)]
#[path = "kernels/language.rs"]
mod language;

#[allow(dead_code)]
#[path = "kernels/addressing.rs"]
mod addressing;

#[allow(dead_code)]
#[path = "kernels/grid_dependency.rs"]
mod pdl;

mod common;

use std::sync::Arc;
use tilus::prelude::{f16, KernelError};
use tilus::runtime::{Context, DeviceBuffer};
use tilus::DType;

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

fn rel_err(out: &[f16], reference: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (o, r) in out.iter().zip(reference) {
        num += (o.to_f64() - r).powi(2);
        den += r * r;
    }
    (num / den).sqrt()
}

#[test]
fn fig2_on_gpu() {
    use rand::Rng;
    let Some(ctx) = context("fig2_on_gpu") else {
        return;
    };
    let (m, n, k) = (200, 256, 512);
    let mut rng = rand::rng();
    for (bm, bn, bk, w) in [
        (16, 64, 16, DType::Int(6)),
        (32, 128, 32, DType::Int(6)),
        (64, 128, 64, DType::Int(4)),
        (32, 64, 32, DType::UInt(4)),
        (16, 128, 64, DType::Int(8)),
    ] {
        let cfg = fig2::matmul_f16_w::Config {
            BM: bm,
            BN: bn,
            BK: bk,
            W: w,
        };
        let a = fig2::random_f16(&mut rng, m * k);
        let codes: Vec<u32> = (0..k * n)
            .map(|_| rng.random_range(0..1u32 << w.bits()))
            .collect();
        let b = fig2::tiled_weight(&cfg, k, n, &codes);
        let da = DeviceBuffer::from_host(&ctx, &a).unwrap();
        let db = DeviceBuffer::from_host(&ctx, &b).unwrap();
        let mut dc = DeviceBuffer::filled(&ctx, m * n, f16::NAN).unwrap();
        fig2::matmul_f16_w::launch(&ctx, &cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc)
            .unwrap();
        let c = dc.to_host().unwrap();
        let wv: Vec<f64> = codes.iter().map(|&c| w.decode(c)).collect();
        let mut reference = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                reference[i * n + j] = (0..k).map(|p| a[i * k + p].to_f64() * wv[p * n + j]).sum();
            }
        }
        let err = rel_err(&c, &reference);
        eprintln!("fig2 {cfg}: relative error {err:.2e}");
        assert!(err < 1e-2, "{cfg}: relative error {err}");
    }
}

#[test]
fn fig14_on_gpu() {
    let Some(ctx) = context("fig14_on_gpu") else {
        return;
    };
    let (m, n, k) = (96, 256, 256);
    let mut rng = rand::rng();
    for (bm, bn, bk, stages) in [(16, 64, 16, 2), (32, 128, 32, 3), (64, 128, 32, 4)] {
        let cfg = fig14::matmul_pipelined::Config {
            BM: bm,
            BN: bn,
            BK: bk,
            STAGES: stages,
        };
        let a = fig14::random_f16(&mut rng, m * k);
        let b = fig14::random_f16(&mut rng, k * n);
        let da = DeviceBuffer::from_host(&ctx, &a).unwrap();
        let db = DeviceBuffer::from_host(&ctx, &b).unwrap();
        let mut dc = DeviceBuffer::filled(&ctx, m * n, f16::NAN).unwrap();
        fig14::matmul_pipelined::launch(
            &ctx, &cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc,
        )
        .unwrap();
        let c = dc.to_host().unwrap();
        let mut reference = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                reference[i * n + j] = (0..k)
                    .map(|p| a[i * k + p].to_f64() * b[p * n + j].to_f64())
                    .sum();
            }
        }
        let err = rel_err(&c, &reference);
        eprintln!("fig14 {cfg}: relative error {err:.2e}");
        assert!(err < 1e-2, "{cfg}: relative error {err}");
    }
}

#[test]
fn launch_checks_arguments() {
    let Some(ctx) = context("launch_checks_arguments") else {
        return;
    };
    let cfg = fig14::matmul_pipelined::SPACE[0];
    let (m, n, k) = (32, 128, 64);
    let da = DeviceBuffer::<f16>::zeros(&ctx, m * k - 1).unwrap(); // one element short
    let db = DeviceBuffer::<f16>::zeros(&ctx, k * n).unwrap();
    let mut dc = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    let err = fig14::matmul_pipelined::launch(
        &ctx, &cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc,
    )
    .unwrap_err();
    assert!(matches!(err, KernelError::BadArgument { .. }), "{err}");
    assert!(err.to_string().contains("`a`"), "{err}");
    let not_in_space = fig14::matmul_pipelined::Config {
        BM: 8,
        BN: 64,
        BK: 16,
        STAGES: 2,
    };
    let err = fig14::matmul_pipelined::launch(&ctx, &not_in_space, 1, 1, 1, &db, &db, &mut dc)
        .unwrap_err();
    assert!(matches!(err, KernelError::NotInSpace { .. }), "{err}");
}

/// A programmatic dependent launch sees the whole prior kernel's output: the producer lets its
/// dependent start at once and then runs long (2^21 elements, thousands of steps each), the
/// consumer loads its own input before `wait_prior_grid()` and the producer's output (poisoned
/// with NaN before each producer) after it; every element must be exact, round after round on
/// fresh data. A kernel without the wait is refused as a dependent, naming the option.
#[test]
fn dependent_launch_waits_for_the_prior_kernel() {
    use rand::Rng;
    use tilus::gpu::LaunchOptions;
    let Some(ctx) = context("dependent_launch_waits_for_the_prior_kernel") else {
        return;
    };
    let mut rng = rand::rng();
    let (pc, cc) = (&pdl::pdl_produce::SPACE[0], &pdl::pdl_consume::SPACE[0]);
    let dependent = LaunchOptions {
        stream: None,
        dependent: true,
    };
    let n = 1usize << 21;
    let mut dy = DeviceBuffer::filled(&ctx, n, f32::NAN).unwrap();
    let mut dz = DeviceBuffer::filled(&ctx, n, f32::NAN).unwrap();
    for round in 0..4 {
        let iters = rng.random_range(2000..3000);
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let w: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let dw = DeviceBuffer::from_host(&ctx, &w).unwrap();
        dy.fill(f32::NAN).unwrap();
        dz.fill(f32::NAN).unwrap();
        pdl::pdl_produce::launch(&ctx, pc, n as i32, iters, &dx, &mut dy).unwrap();
        pdl::pdl_consume::launch_with(&ctx, dependent, cc, n as i32, &dw, &dy, &mut dz).unwrap();
        let z = dz.to_host().unwrap();
        for i in 0..n {
            let want = w[i] + pdl::produce_ref(x[i], iters);
            assert_eq!(z[i], want, "round {round}: z[{i}]");
        }
    }
    let dw = DeviceBuffer::filled(&ctx, n, 1.0f32).unwrap();
    let err = pdl::pdl_unsynced::launch_with(
        &ctx,
        dependent,
        &pdl::pdl_unsynced::SPACE[0],
        n as i32,
        &dw,
        &dy,
        &mut dz,
    )
    .unwrap_err();
    assert!(matches!(err, KernelError::BadArgument { .. }), "{err}");
    assert!(err.to_string().contains("`dependent`"), "{err}");
    eprintln!(
        "dependent launch: 4 rounds of 2^21 elements exact; a kernel without the wait refused"
    );
}

/// A `#[kernel]` with `allocate_global` launches with its hidden workspace allocated and zeroed
/// by the one launcher (this used to segfault the host: the entry's workspace parameter was
/// never pushed).
#[test]
fn workspace_kernel_on_gpu() {
    use rand::Rng;
    let Some(ctx) = context("workspace_kernel_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    let cfg = launch_kernels::scratch::SPACE[0];
    for n in [128usize, 1000] {
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut dy = DeviceBuffer::filled(&ctx, n, f32::NAN).unwrap();
        // Twice: the second launch gets a fresh zeroed workspace, not the first one's values.
        for _ in 0..2 {
            launch_kernels::scratch::launch(&ctx, &cfg, n as i32, &dx, &mut dy).unwrap();
            let y = dy.to_host().unwrap();
            for (i, (&xi, &yi)) in x.iter().zip(&y).enumerate() {
                let want = (xi as f64 + 1.0).powi(2);
                assert!(
                    (yi as f64 - want).abs() <= 1e-6 * want.max(1.0),
                    "n = {n}: y[{i}] = {yi}, want {want}"
                );
            }
        }
    }
    eprintln!("workspace kernel: n = 128 and 1000 correct, twice each");
}

/// `lookup` on the GPU, both code paths (the one-`PRMT` 256-byte rows and the guarded read):
/// bit for bit the table's `(code, (5 j + 3) % C)`, 0 past a 128-row table.
#[test]
fn table_lookup_on_gpu() {
    use rand::Rng;
    let Some(ctx) = context("table_lookup_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    for cfg in addressing::table_lookup::SPACE {
        let (c, rows) = (cfg.C as usize, cfg.ROWS as usize);
        let n = 300usize;
        let codes: Vec<u8> = (0..8 * n).map(|_| rng.random()).collect();
        let table: Vec<f32> = (0..rows * c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let dc = DeviceBuffer::from_host(&ctx, &codes).unwrap();
        let dt = DeviceBuffer::from_host(&ctx, &table).unwrap();
        let mut dout = DeviceBuffer::filled(&ctx, 8 * n, f32::NAN).unwrap();
        addressing::table_lookup::launch(&ctx, cfg, n as i32, &dc, &dt, &mut dout).unwrap();
        let out = dout.to_host().unwrap();
        for (e, (&code, &got)) in codes.iter().zip(&out).enumerate() {
            let (row, col) = (code as usize, (5 * (e % 8) + 3) % c);
            let want = if row < rows {
                table[row * c + col]
            } else {
                0.0
            };
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{cfg:?} element {e} (code {code})"
            );
        }
    }
    eprintln!("lookup: 4 configurations exact");
}

/// A rank-3 `lookup` (vectors of 4 halves) on the GPU, both paths, against the table itself.
#[test]
fn table_lookup_rows_on_gpu() {
    use rand::Rng;
    let Some(ctx) = context("table_lookup_rows_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    for cfg in addressing::table_lookup_rows::SPACE {
        let (c, rows) = (cfg.C as usize, cfg.ROWS as usize);
        let n = 300usize;
        let codes: Vec<u8> = (0..8 * n).map(|_| rng.random()).collect();
        let table = random_halves(rows * c * 4);
        let dc = DeviceBuffer::from_host(&ctx, &codes).unwrap();
        let dt = DeviceBuffer::from_host(&ctx, &table).unwrap();
        let mut dout = DeviceBuffer::filled(&ctx, 32 * n, f16::NAN).unwrap();
        addressing::table_lookup_rows::launch(&ctx, cfg, n as i32, &dc, &dt, &mut dout).unwrap();
        let out = dout.to_host().unwrap();
        addressing::check_table_lookup_rows(&format!("{cfg:?}"), &out, &codes, &table, rows, c);
    }
    eprintln!("lookup of vectors: 4 configurations exact");
}

/// `gather_rows` from a register table (warp shuffles) on the GPU, every placement of
/// `warp_rows`' space, against the table itself and the interpreter, output poisoned.
#[test]
fn register_rows_on_gpu() {
    use rand::Rng;
    let Some(ctx) = context("register_rows_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    for cfg in addressing::warp_rows::SPACE {
        let (rows, w) = (32 * cfg.SLOTS as usize, cfg.W as usize);
        let n = 1000usize;
        let codes: Vec<i32> = (0..2 * n)
            .map(|_| rng.random_range(-40..rows as i32 + 40))
            .collect();
        let table = random_halves(rows * w);
        let dc = DeviceBuffer::from_host(&ctx, &codes).unwrap();
        let dt = DeviceBuffer::from_host(&ctx, &table).unwrap();
        let mut dout = DeviceBuffer::filled(&ctx, 2 * n * w, f16::NAN).unwrap();
        addressing::warp_rows::launch(&ctx, cfg, n as i32, &dc, &dt, &mut dout).unwrap();
        let out = dout.to_host().unwrap();
        addressing::check_warp_rows(&format!("{cfg:?}"), &out, &codes, &table, rows, w);
        let mut want = vec![f16::NAN; out.len()];
        addressing::warp_rows::interpret(cfg, n as i32, &codes, &table, &mut want).unwrap();
        assert!(
            out.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{cfg:?}: GPU and interpreter differ"
        );
    }
    eprintln!("rows from register tables: 12 configurations exact");
}

fn random_halves(n: usize) -> Vec<f16> {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-4.0f32..4.0)))
        .collect()
}

/// The vector-copy kernel's assumptions are checked before the launch: `k = 60` is an error
/// naming `k` (it used to launch and poison the context with a misaligned access), a view at a
/// 2-byte offset is an error naming the buffer, and the context keeps working afterwards, with
/// whole buffers, sub-slices, and on another stream.
#[test]
fn vector_assumptions_are_checked_and_the_context_survives() {
    let Some(ctx) = context("vector_assumptions_are_checked_and_the_context_survives") else {
        return;
    };
    let cfg = launch_kernels::copy_rows::SPACE[0];
    let (m, k) = (8usize, 60usize);
    let a = DeviceBuffer::from_host(&ctx, &random_halves(m * k)).unwrap();
    let mut b = DeviceBuffer::filled(&ctx, m * k, f16::NAN).unwrap();
    let err =
        launch_kernels::copy_rows::launch(&ctx, &cfg, m as i32, k as i32, &a, &mut b).unwrap_err();
    assert!(matches!(err, KernelError::BadArgument { .. }), "{err}");
    assert!(err.to_string().contains("k = 60"), "{err}");
    eprintln!("k = 60: {err}");

    // The context still works: a correct launch, then a synchronize that reports no fault.
    let k = 64usize;
    let ha = random_halves(m * k);
    let a = DeviceBuffer::from_host(&ctx, &ha).unwrap();
    let mut b = DeviceBuffer::filled(&ctx, m * k, f16::NAN).unwrap();
    launch_kernels::copy_rows::launch(&ctx, &cfg, m as i32, k as i32, &a, &mut b).unwrap();
    ctx.synchronize().unwrap();
    assert_eq!(b.to_host().unwrap(), ha);

    // Sub-slices: rows 2..6 of a larger buffer into the middle of another (16-byte aligned
    // offsets), on a second stream.
    let big = DeviceBuffer::from_host(&ctx, &random_halves(16 * k)).unwrap();
    let host_big = big.to_host().unwrap();
    let mut out = DeviceBuffer::filled(&ctx, 16 * k, f16::NAN).unwrap();
    let stream = ctx.new_stream().unwrap();
    {
        let src = big.view(2 * k..6 * k).unwrap();
        let mut dst = out.view_mut(8 * k..12 * k).unwrap();
        launch_kernels::copy_rows::launch_on(
            &ctx,
            Some(&stream),
            &cfg,
            4,
            k as i32,
            &src,
            &mut dst,
        )
        .unwrap();
    }
    stream.synchronize().unwrap();
    let got = out.to_host().unwrap();
    assert_eq!(&got[8 * k..12 * k], &host_big[2 * k..6 * k]);
    assert!(
        got[..8 * k].iter().all(|x| x.is_nan()),
        "wrote outside the view"
    );
    assert!(
        got[12 * k..].iter().all(|x| x.is_nan()),
        "wrote outside the view"
    );

    // A view one element (2 bytes) into the buffer breaks the 16-byte alignment: an error
    // naming `a`, no launch.
    let src = big.view(1..1 + 4 * k).unwrap();
    let err = launch_kernels::copy_rows::launch(&ctx, &cfg, 4, k as i32, &src, &mut b).unwrap_err();
    assert!(err.to_string().contains("argument a"), "{err}");
    // A view too short for [m, k]: an error naming `a`.
    let src = big.view(0..4 * k - 8).unwrap();
    let err = launch_kernels::copy_rows::launch(&ctx, &cfg, 4, k as i32, &src, &mut b).unwrap_err();
    assert!(err.to_string().contains("`a`"), "{err}");
    ctx.synchronize().unwrap();
    eprintln!(
        "context healthy after the rejected launches; sub-slice copy on a second stream correct"
    );
}

/// The language features on the GPU, bit for bit against the interpreter: f32 parameters and
/// uncontracted f32 arithmetic, float constants from tile parameters, stepped unrolled loops,
/// tensor reassignment, inlined helpers, and exact scalar operands.
#[test]
fn language_features_match_the_interpreter_on_gpu() {
    use language::{chunk_max, flagged, helpers, scalar_operands, scale_shift};
    use rand::Rng;
    let Some(ctx) = context("language_features_match_the_interpreter_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    let n = 1000;
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let s: f32 = rng.random_range(-2.0..2.0);
    for cfg in scale_shift::SPACE {
        let mut dy = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
        scale_shift::launch(&ctx, cfg, n as i32, s, &dx, &mut dy).unwrap();
        let mut cpu = vec![f32::NAN; n];
        scale_shift::interpret(cfg, n as i32, s, &x, &mut cpu).unwrap();
        let got = dy.to_host().unwrap();
        for i in 0..n {
            assert_eq!(
                got[i].to_bits(),
                cpu[i].to_bits(),
                "scale_shift {cfg} at {i}"
            );
        }
    }
    let (rows, cols) = (7, 500);
    let xm: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-4.0..4.0))
        .collect();
    let dxm = DeviceBuffer::from_host(&ctx, &xm).unwrap();
    for cfg in chunk_max::SPACE {
        let ch = cfg.CH as usize;
        let mut dy = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; rows * ch]).unwrap();
        chunk_max::launch(&ctx, cfg, rows as i32, cols as i32, &dxm, &mut dy).unwrap();
        let mut cpu = vec![f32::NAN; rows * ch];
        chunk_max::interpret(cfg, rows as i32, cols as i32, &xm, &mut cpu).unwrap();
        assert_eq!(dy.to_host().unwrap(), cpu, "chunk_max {cfg}");
    }
    let cfg = &helpers::SPACE[0];
    let mut dhi = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
    let mut dlo = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
    helpers::launch(&ctx, cfg, n as i32, s, &dx, &mut dhi, &mut dlo).unwrap();
    let (mut hi, mut lo) = (vec![f32::NAN; n], vec![f32::NAN; n]);
    helpers::interpret(cfg, n as i32, s, &x, &mut hi, &mut lo).unwrap();
    assert_eq!(dhi.to_host().unwrap(), hi, "helpers hi");
    assert_eq!(dlo.to_host().unwrap(), lo, "helpers lo");
    let big = (1 << 24) + 3;
    let xi: Vec<i32> = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
    let dxi = DeviceBuffer::from_host(&ctx, &xi).unwrap();
    let mut dyi = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; n]).unwrap();
    let mut dyf = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
    let cfg = &scalar_operands::SPACE[0];
    scalar_operands::launch(
        &ctx, cfg, n as i32, big, 0.25, &dxi, &dx, &mut dyi, &mut dyf,
    )
    .unwrap();
    let (mut yi, mut yf) = (vec![i32::MIN; n], vec![f32::NAN; n]);
    scalar_operands::interpret(cfg, n as i32, big, 0.25, &xi, &x, &mut yi, &mut yf).unwrap();
    assert_eq!(dyi.to_host().unwrap(), yi, "scalar_operands i32");
    assert_eq!(dyf.to_host().unwrap(), yf, "scalar_operands f32");
    for negate in [false, true] {
        let mut dy = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
        flagged::launch(&ctx, &flagged::SPACE[0], n as i32, negate, &dx, &mut dy).unwrap();
        let mut cpu = vec![f32::NAN; n];
        flagged::interpret(&flagged::SPACE[0], n as i32, negate, &x, &mut cpu).unwrap();
        assert_eq!(dy.to_host().unwrap(), cpu, "flagged negate={negate}");
    }
}

/// Views of more than 2^31 elements: a view of 4 GiB of u8 as `[65536, 1, 65536]` works, a
/// tile stored at its far end lands in the buffer's last bytes and loads back (offsets are
/// 64-bit); the same bytes as `[2, 32768, 65536]`, whose leading stride passes an i32, are
/// refused before the launch, naming the buffer, and the context stays usable.
#[test]
fn views_past_two_to_the_31_elements() {
    use rand::Rng;
    let Some(ctx) = context("views_past_two_to_the_31_elements") else {
        return;
    };
    let (a, c) = (65536usize, 65536usize);
    let n = a * c;
    let mut big = DeviceBuffer::<u8>::zeros(&ctx, n).unwrap();
    let mut rng = rand::rng();
    let pattern: Vec<u8> = (0..32).map(|_| rng.random_range(1..=255)).collect();
    let src = DeviceBuffer::from_host(&ctx, &pattern).unwrap();
    let cfg = &launch_kernels::far_store::SPACE[0];
    launch_kernels::far_store::launch(&ctx, cfg, a as i32, 1, c as i32, &src, &mut big).unwrap();
    assert_eq!(big.view(n - 32..n).unwrap().to_host().unwrap(), pattern);
    let mut out = DeviceBuffer::<u8>::zeros(&ctx, 32).unwrap();
    let cfg = &launch_kernels::far_load::SPACE[0];
    launch_kernels::far_load::launch(&ctx, cfg, a as i32, 1, c as i32, &big, &mut out).unwrap();
    assert_eq!(out.to_host().unwrap(), pattern);
    // [2, 32768, 65536] needs the same 4 GiB but a leading stride of 2^31 elements.
    let err = launch_kernels::far_load::launch(&ctx, cfg, 2, 32768, 65536, &big, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`big`") && err.contains("more than an i32"),
        "{err}"
    );
    launch_kernels::far_load::launch(&ctx, cfg, a as i32, 1, c as i32, &big, &mut out).unwrap();
    assert_eq!(out.to_host().unwrap(), pattern);
    // The same bytes through an i64 flat offset (past 2^31) split into a row and a column of a
    // `[65536, 65536]` view: the tile the far store wrote, and a poisoned-output read elsewhere.
    let cfg = &launch_kernels::far_load_at::SPACE[0];
    let mut at_out = DeviceBuffer::from_host(&ctx, &[0xA5u8; 32]).unwrap();
    let at = (n - 32) as i64;
    launch_kernels::far_load_at::launch(&ctx, cfg, a as i32, c as i32, at, &big, &mut at_out)
        .unwrap();
    assert_eq!(at_out.to_host().unwrap(), pattern);
    let at = (1i64 << 31) + 32 * rng.random_range(0..1000i64);
    let mut at_out = DeviceBuffer::from_host(&ctx, &[0xA5u8; 32]).unwrap();
    launch_kernels::far_load_at::launch(&ctx, cfg, a as i32, c as i32, at, &big, &mut at_out)
        .unwrap();
    assert_eq!(at_out.to_host().unwrap(), vec![0u8; 32], "zeros at {at}");
}

/// The bit operators on run-time scalars (`&`, `|`, `^`, `<<`, `>>`, an i32 mixed with an
/// i64) on the GPU, against the host's values; the output poisoned before each launch.
#[test]
fn scalar_bit_operators_on_gpu() {
    use language::{scalar_bits, scalar_bits_reference};
    use rand::Rng;
    let Some(ctx) = context("scalar_bit_operators_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    let n = 100;
    for _ in 0..4 {
        let s: i32 = rng.random_range(-1000..1000);
        let w: i64 = rng.random_range(-(1 << 40)..(1 << 40));
        let mut out = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; n]).unwrap();
        scalar_bits::launch(&ctx, &scalar_bits::SPACE[0], n as i32, s, w, &mut out).unwrap();
        assert_eq!(
            out.to_host().unwrap(),
            scalar_bits_reference(n, s, w),
            "s = {s}, w = {w}"
        );
    }
}

/// i64 scalars on the GPU against the interpreter: i64 offsets (in the view, past its end and
/// past 2^32) through `load_global` and `copy_async`, and i64 arithmetic narrowed `as i32`.
/// The interpreter part runs everywhere; the GPU part skips without a GPU.
#[test]
fn i64_scalars_match_the_interpreter_on_gpu() {
    use language::{narrow_wide, wide_offsets};
    use rand::Rng;
    let mut rng = rand::rng();
    let (rows, cols, n) = (5usize, 96usize, 128usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-4.0..4.0))
        .collect();
    let starts = [
        0i64,
        32 * rng.random_range(0..15i64),
        448,
        (1i64 << 32) * 3 + 32,
    ];
    let cfg = &wide_offsets::SPACE[0];
    let mut cpu = Vec::new();
    for &start in &starts {
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
        assert_eq!(y, z, "start={start}");
        assert!(y.iter().all(|v| !v.is_nan()), "start={start}");
        cpu.push(y);
    }
    let xi: Vec<i32> = (0..32).map(|_| rng.random_range(-1000..1000)).collect();
    let (v, k) = (rng.random_range(1i64 << 31..1i64 << 32), 1i32);
    let mut yi = vec![i32::MIN; 32];
    narrow_wide::interpret(&narrow_wide::SPACE[0], v, k, &xi, &mut yi).unwrap();
    let Some(ctx) = context("i64_scalars_match_the_interpreter_on_gpu") else {
        return;
    };
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    for (&start, want) in starts.iter().zip(&cpu) {
        let mut dy = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
        let mut dz = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; n]).unwrap();
        wide_offsets::launch(
            &ctx,
            cfg,
            rows as i32,
            cols as i32,
            n as i32,
            start,
            &dx,
            &mut dy,
            &mut dz,
        )
        .unwrap();
        assert_eq!(&dy.to_host().unwrap(), want, "load_global start={start}");
        assert_eq!(&dz.to_host().unwrap(), want, "copy_async start={start}");
    }
    let dxi = DeviceBuffer::from_host(&ctx, &xi).unwrap();
    let mut dyi = DeviceBuffer::from_host(&ctx, &[i32::MIN; 32]).unwrap();
    narrow_wide::launch(&ctx, &narrow_wide::SPACE[0], v, k, &dxi, &mut dyi).unwrap();
    assert_eq!(dyi.to_host().unwrap(), yi, "narrow_wide v={v}");
}

/// The batched `dot` (one product per warp) on the GPU, on the mma and thread-local: exact
/// small-integer products, bit for bit against the interpreter and the f64 reference, output
/// poisoned.
#[test]
fn batched_dot_matches_the_interpreter_on_gpu() {
    use language::batched_mma;
    use rand::Rng;
    let Some(ctx) = context("batched_dot_matches_the_interpreter_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    for cfg in batched_mma::SPACE {
        let k = 32 * rng.random_range(1..5usize);
        let gen = |rng: &mut rand::rngs::ThreadRng, len: usize| -> Vec<f16> {
            (0..len)
                .map(|_| f16::from_f32(rng.random_range(-8..=8) as f32))
                .collect()
        };
        let (a, b) = (gen(&mut rng, 4 * 16 * k), gen(&mut rng, 4 * k * 16));
        let (da, db) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &b).unwrap(),
        );
        let mut dc = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; 4 * 16 * 16]).unwrap();
        batched_mma::launch(&ctx, cfg, k as i32, &da, &db, &mut dc).unwrap();
        let mut cpu = vec![f32::NAN; 4 * 16 * 16];
        batched_mma::interpret(cfg, k as i32, &a, &b, &mut cpu).unwrap();
        let got = dc.to_host().unwrap();
        assert_eq!(got, cpu, "batched_mma {cfg} k={k}");
        for i in 0..4 {
            for r in 0..16 {
                for j in 0..16 {
                    let want: f64 = (0..k)
                        .map(|kk| {
                            a[(i * 16 + r) * k + kk].to_f64() * b[(i * k + kk) * 16 + j].to_f64()
                        })
                        .sum();
                    assert_eq!(
                        got[(i * 16 + r) * 16 + j] as f64,
                        want,
                        "{cfg} ({i}, {r}, {j})"
                    );
                }
            }
        }
    }
}

/// The fp8 `mma.sync.m16n8k32` on the GPU: integer codes bit for bit against the interpreter
/// and the f64 reference; subnormal codes (the fp8 gemv's weights) within the tensor cores'
/// accumulation precision of it. Output poisoned.
#[test]
fn fp8_fragments_match_the_interpreter_on_gpu() {
    use language::{fp8_mma, fp8_mma_case};
    let Some(ctx) = context("fp8_fragments_match_the_interpreter_on_gpu") else {
        return;
    };
    for tiny in [false, true] {
        let k = 160;
        let (a, bt, reference) = fp8_mma_case(k, tiny);
        let (da, db) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &bt).unwrap(),
        );
        let mut dc = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; 32 * 16]).unwrap();
        fp8_mma::launch(&ctx, &fp8_mma::SPACE[0], k as i32, &da, &db, &mut dc).unwrap();
        let got = dc.to_host().unwrap();
        let mut cpu = vec![f32::NAN; 32 * 16];
        fp8_mma::interpret(&fp8_mma::SPACE[0], k as i32, &a, &bt, &mut cpu).unwrap();
        let dec = |c: u8| tilus::DType::F8E4M3.decode(c as u32);
        for i in 0..32 {
            for j in 0..16 {
                let (g, want) = (got[i * 16 + j] as f64, reference[i * 16 + j]);
                if tiny {
                    let mass: f64 = (0..k)
                        .map(|kk| (dec(a[i * k + kk]) * dec(bt[j * k + kk])).abs())
                        .sum();
                    assert!(
                        (g - want).abs() <= mass * 2f64.powi(-13),
                        "tiny ({i}, {j}): {g} against {want} (mass {mass})"
                    );
                } else {
                    assert_eq!(g, want, "({i}, {j})");
                    assert_eq!(got[i * 16 + j], cpu[i * 16 + j], "({i}, {j})");
                }
            }
        }
    }
}

/// The 8-bit integer `mma.sync.m16n8k32` on the GPU for every signedness pair: the exact
/// product from the f32-magic accumulator, bit for bit against the interpreter. Output poisoned.
#[test]
fn int8_k32_fragments_match_the_interpreter_on_gpu() {
    use language::{int8_mma, int8_mma_case};
    let Some(ctx) = context("int8_k32_fragments_match_the_interpreter_on_gpu") else {
        return;
    };
    for cfg in int8_mma::SPACE.iter() {
        let signed = (cfg.A == tilus::DType::Int(8), cfg.B == tilus::DType::Int(8));
        let k = 160;
        let (a, bt, reference) = int8_mma_case(k, signed);
        let (da, db) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &bt).unwrap(),
        );
        let mut dc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; 32 * 16]).unwrap();
        int8_mma::launch(&ctx, cfg, k as i32, &da, &db, &mut dc).unwrap();
        let got = dc.to_host().unwrap();
        let mut cpu = vec![i32::MIN; 32 * 16];
        int8_mma::interpret(cfg, k as i32, &a, &bt, &mut cpu).unwrap();
        for i in 0..32 * 16 {
            assert_eq!(got[i] as i64, reference[i], "{signed:?} at {i}");
            assert_eq!(got[i], cpu[i], "{signed:?} at {i}");
        }
    }
}

/// The run fragments (`mma_a_k4`/`mma_b_k4`, `..k8`) on the GPU: exact small-integer products,
/// bit for bit against the interpreter and the f64 reference, output poisoned.
#[test]
fn run_fragments_match_the_interpreter_on_gpu() {
    use language::run_mma;
    use rand::Rng;
    let Some(ctx) = context("run_fragments_match_the_interpreter_on_gpu") else {
        return;
    };
    let mut rng = rand::rng();
    for cfg in run_mma::SPACE {
        let k = 8 * cfg.R as usize * rng.random_range(1..6usize);
        let gen = |rng: &mut rand::rngs::ThreadRng, len: usize| -> Vec<f16> {
            (0..len)
                .map(|_| f16::from_f32(rng.random_range(-8..=8) as f32))
                .collect()
        };
        let (a, bt) = (gen(&mut rng, 32 * k), gen(&mut rng, 16 * k));
        let (da, db) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &bt).unwrap(),
        );
        let mut dc = DeviceBuffer::from_host(&ctx, &vec![f32::NAN; 32 * 16]).unwrap();
        run_mma::launch(&ctx, cfg, k as i32, &da, &db, &mut dc).unwrap();
        let mut cpu = vec![f32::NAN; 32 * 16];
        run_mma::interpret(cfg, k as i32, &a, &bt, &mut cpu).unwrap();
        let got = dc.to_host().unwrap();
        assert_eq!(got, cpu, "run_mma {cfg} k={k}");
        for i in 0..32 {
            for j in 0..16 {
                let want: f64 = (0..k)
                    .map(|kk| a[i * k + kk].to_f64() * bt[j * k + kk].to_f64())
                    .sum();
                assert_eq!(got[i * 16 + j] as f64, want, "run_mma {cfg} ({i}, {j})");
            }
        }
    }
}
