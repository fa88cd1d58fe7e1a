//! The row-wise kernels on the GPU against the CPU interpreter (the oracle, itself checked
//! against f64 references in `rowwise.rs`), on the same fresh random inputs, with outputs
//! poisoned before the launch: every kernel, f16 and bf16, row lengths from 1 to 8192 with
//! ragged tails. Float outputs may differ by the math functions' documented bounds and the
//! order of the f32 sums: relative 4e-3 (f16) or 3e-2 (bf16) of the element plus a quarter of
//! the row's largest magnitude; indices and the residual update are exact.
//!
//! Skips with a printed reason when this machine cannot run CUDA (`TILUS_REQUIRE_GPU=1` fails).
//! On the GPU machine: `cargo test --release --test gpu_rowwise -- --nocapture`.

mod common;

use half::{bf16, f16};
use rand::Rng;
use std::sync::Arc;
use tilus::kernels::rowwise::{self, programs, row_config, RowElement};
use tilus::runtime::{Context, DeviceBuffer};

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

/// (rows, n): one element, a ragged scalar row, a ragged vector row, and full capacities.
const SHAPES: [(usize, usize); 6] = [(5, 1), (5, 7), (33, 1000), (4, 4096), (3, 8192), (2, 8191)];

fn random<T: RowElement>(len: usize, lo: f64, hi: f64) -> Vec<T> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| T::from_f64(rng.random_range(lo..hi)))
        .collect()
}

/// Every element of `gpu` within `rel · (|cpu| + row scale / 4)` of `cpu`.
fn assert_close(what: &str, gpu: &[f64], cpu: &[f64], n: usize, rel: f64) {
    assert_eq!(gpu.len(), cpu.len(), "{what}");
    for (r, (g, c)) in gpu.chunks(n).zip(cpu.chunks(n)).enumerate() {
        let scale = c.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for j in 0..n {
            let d = (g[j] - c[j]).abs();
            assert!(
                d.is_finite() && d <= rel * (c[j].abs() + 0.25 * scale) + 1e-6,
                "{what}: ({r}, {j}) gpu {} cpu {}",
                g[j],
                c[j]
            );
        }
    }
}

macro_rules! check_type {
    ($name:ident, $t:ty, $rel:expr, $softmax:ident, $rms:ident, $add_rms:ident, $ln:ident, $argmax:ident, $silu:ident, $rotary:ident) => {
        fn $name(ctx: &Context) {
            let f = |v: &[$t]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
            for &(rows, n) in &SHAPES {
                let what = |k: &str| format!("{k} {} {rows}x{n}", stringify!($t));
                let (bn, v) = row_config("test", n).unwrap();
                let (r32, n32) = (rows as i32, n as i32);
                let x = random::<$t>(rows * n, -4.0, 4.0);
                let res = random::<$t>(rows * n, -4.0, 4.0);
                let w = random::<$t>(n, 0.5, 1.5);
                let b = random::<$t>(n, -1.0, 1.0);
                let dx = DeviceBuffer::from_host(ctx, &x).unwrap();
                let dw = DeviceBuffer::from_host(ctx, &w).unwrap();
                let db = DeviceBuffer::from_host(ctx, &b).unwrap();
                let poison = vec![<$t>::NAN; rows * n];

                let mut dy = DeviceBuffer::from_host(ctx, &poison).unwrap();
                rowwise::softmax(ctx, rows, n, &dx, &mut dy).unwrap();
                let mut cpu = poison.clone();
                let cfg = programs::$softmax::Config { BN: bn, V: v };
                programs::$softmax::interpret(&cfg, r32, n32, &x, &mut cpu).unwrap();
                assert_close(
                    &what("softmax"),
                    &f(&dy.to_host().unwrap()),
                    &f(&cpu),
                    n,
                    $rel,
                );

                let mut dy = DeviceBuffer::from_host(ctx, &poison).unwrap();
                rowwise::rms_norm(ctx, rows, n, 1e-6, &dx, &dw, &mut dy).unwrap();
                let mut cpu = poison.clone();
                let cfg = programs::$rms::Config { BN: bn, V: v };
                programs::$rms::interpret(&cfg, r32, n32, 1e-6, &x, &w, &mut cpu).unwrap();
                assert_close(
                    &what("rmsnorm"),
                    &f(&dy.to_host().unwrap()),
                    &f(&cpu),
                    n,
                    $rel,
                );

                let mut dxa = DeviceBuffer::from_host(ctx, &x).unwrap();
                let mut dra = DeviceBuffer::from_host(ctx, &res).unwrap();
                rowwise::add_rms_norm(ctx, rows, n, 1e-6, &mut dxa, &mut dra, &dw).unwrap();
                let (mut xa, mut ra) = (x.clone(), res.clone());
                let cfg = programs::$add_rms::Config { BN: bn, V: v };
                programs::$add_rms::interpret(&cfg, r32, n32, 1e-6, &mut xa, &mut ra, &w).unwrap();
                let bits = |v: &[$t]| v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>();
                assert_eq!(
                    bits(&dra.to_host().unwrap()),
                    bits(&ra),
                    "{}",
                    what("residual")
                );
                assert_close(
                    &what("add_rmsnorm"),
                    &f(&dxa.to_host().unwrap()),
                    &f(&xa),
                    n,
                    $rel,
                );

                if n > 1 {
                    let mut dy = DeviceBuffer::from_host(ctx, &poison).unwrap();
                    rowwise::layer_norm(ctx, rows, n, 1e-5, &dx, &dw, &db, &mut dy).unwrap();
                    let mut cpu = poison.clone();
                    let cfg = programs::$ln::Config { BN: bn, V: v };
                    programs::$ln::interpret(&cfg, r32, n32, 1e-5, &x, &w, &b, &mut cpu).unwrap();
                    assert_close(
                        &what("layernorm"),
                        &f(&dy.to_host().unwrap()),
                        &f(&cpu),
                        n,
                        $rel,
                    );
                }

                let mut di = DeviceBuffer::from_host(ctx, &vec![-7i32; rows]).unwrap();
                rowwise::argmax(ctx, rows, n, &dx, &mut di).unwrap();
                let mut cpu = vec![-7i32; rows];
                let cfg = programs::$argmax::Config { BN: bn, V: v };
                programs::$argmax::interpret(&cfg, r32, n32, &x, &mut cpu).unwrap();
                assert_eq!(di.to_host().unwrap(), cpu, "{}", what("argmax"));

                if n % 2 == 0 {
                    let d = n / 2;
                    let mut dy = DeviceBuffer::from_host(ctx, &poison[..rows * d]).unwrap();
                    rowwise::silu_and_mul(ctx, rows, d, &dx, &mut dy).unwrap();
                    let mut cpu = poison[..rows * d].to_vec();
                    // The reference: one run per thread (the host API takes more; the math
                    // is elementwise, so the results agree).
                    let cfg = programs::$silu::Config {
                        V: if d % 8 == 0 { 8 } else { 1 },
                        U: 1,
                    };
                    programs::$silu::interpret(&cfg, r32, d as i32, &x, &mut cpu).unwrap();
                    assert_close(
                        &what("silu_and_mul"),
                        &f(&dy.to_host().unwrap()),
                        &f(&cpu),
                        d,
                        $rel,
                    );
                }

                for hd in [64usize, 128] {
                    if n % hd != 0 {
                        continue;
                    }
                    let cos = random::<$t>(rows * hd / 2, -1.0, 1.0);
                    let sin = random::<$t>(rows * hd / 2, -1.0, 1.0);
                    let mut dq = DeviceBuffer::from_host(ctx, &x).unwrap();
                    let dc = DeviceBuffer::from_host(ctx, &cos).unwrap();
                    let ds = DeviceBuffer::from_host(ctx, &sin).unwrap();
                    rowwise::rotary(ctx, rows, n / hd, hd, &mut dq, &dc, &ds).unwrap();
                    let mut cpu = x.clone();
                    let cfg = programs::$rotary::Config { HD: hd as i32 };
                    programs::$rotary::interpret(&cfg, r32, (n / hd) as i32, &mut cpu, &cos, &sin)
                        .unwrap();
                    assert_close(
                        &what("rotary"),
                        &f(&dq.to_host().unwrap()),
                        &f(&cpu),
                        n,
                        $rel,
                    );
                }
            }
        }
    };
}

check_type!(
    check_f16,
    f16,
    4e-3,
    softmax_f16,
    rms_norm_f16,
    add_rms_norm_f16,
    layer_norm_f16,
    argmax_f16,
    silu_and_mul_f16,
    rotary_f16
);
check_type!(
    check_bf16,
    bf16,
    3e-2,
    softmax_bf16,
    rms_norm_bf16,
    add_rms_norm_bf16,
    layer_norm_bf16,
    argmax_bf16,
    silu_and_mul_bf16,
    rotary_bf16
);

#[test]
fn rowwise_kernels_match_the_interpreter_f16() {
    if let Some(ctx) = context("rowwise_kernels_match_the_interpreter_f16") {
        check_f16(&ctx);
    }
}

#[test]
fn rowwise_kernels_match_the_interpreter_bf16() {
    if let Some(ctx) = context("rowwise_kernels_match_the_interpreter_bf16") {
        check_bf16(&ctx);
    }
}

/// Shapes the kernels do not take are errors naming the argument, before any launch.
#[test]
fn bad_shapes_are_errors() {
    let Some(ctx) = context("bad_shapes_are_errors") else {
        return;
    };
    let x = DeviceBuffer::from_host(&ctx, &[f16::ONE; 16]).unwrap();
    let mut y = DeviceBuffer::<f16>::zeros(&ctx, 16).unwrap();
    let e = rowwise::rms_norm(&ctx, 1, 9000, 1e-6, &x, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n = 9000"), "{e}");
    // Softmax takes long rows; buffers too small for them are named.
    let e = rowwise::softmax(&ctx, 1, 9000, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`x` holds 32 bytes"), "{e}");
    // The buffers are too small for 4 rows of 16: the launch checks name the argument.
    let e = rowwise::softmax(&ctx, 4, 16, &x, &mut y)
        .unwrap_err()
        .to_string();
    assert!(e.contains('x') || e.contains('y'), "{e}");
    let e = rowwise::rotary(&ctx, 1, 1, 96, &mut y, &x, &x)
        .unwrap_err()
        .to_string();
    assert!(e.contains("head_dim = 96"), "{e}");
}

/// Rows longer than 8192 go through the chunked softmax with an online maximum.
#[test]
fn long_rows_softmax_matches_the_interpreter() {
    let Some(ctx) = context("long_rows_softmax_matches_the_interpreter") else {
        return;
    };
    for (rows, n) in [(3, 20000), (2, 8192 * 3)] {
        let x = random::<f16>(rows * n, -8.0, 8.0);
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let poison = vec![f16::NAN; rows * n];
        let mut dy = DeviceBuffer::from_host(&ctx, &poison).unwrap();
        rowwise::softmax(&ctx, rows, n, &dx, &mut dy).unwrap();
        let mut cpu = poison.clone();
        let cfg = programs::softmax_long_f16::Config {
            V: if n % 8 == 0 { 8 } else { 1 },
        };
        programs::softmax_long_f16::interpret(&cfg, rows as i32, n as i32, &x, &mut cpu).unwrap();
        let f = |v: &[f16]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
        assert_close(
            &format!("softmax {rows}x{n}"),
            &f(&dy.to_host().unwrap()),
            &f(&cpu),
            n,
            4e-3,
        );
    }
}
