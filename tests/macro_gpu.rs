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
