//! The wgmma GEMM (`tilus::kernels::gemm`) on the GPU: every configuration of f16 and bf16 at
//! ragged shapes (m = 33, 257, 4097; n and k not multiples of the tiles) against an f64
//! reference of the rounded inputs, outputs poisoned (NaN) before each launch; cuBLAS
//! (`gemm_nt`, the same `c = a · bᵀ`) within the same tolerance; a `k` that breaks the 16-byte
//! rows is a launch error naming it, and the context stays usable. The 4-bit-weight GEMM likewise
//! against an f64 product with its dequantized weight.
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns the
//! skip into a failure. Run with `cargo test --release --test gpu_gemm -- --nocapture`.
//!
//! The RS form of wgmma (`a` in registers, `tests/kernels/wgmma_rs.rs`): every configuration, f16
//! and bf16, against f64 and the interpreter on the same random inputs. The copy engine's store
//! (`tests/kernels/tma_store.rs`) against the interpreter, at ragged shapes, outputs poisoned
//! past their views too.

mod common;

#[allow(dead_code)]
#[path = "kernels/tma_store.rs"]
mod tma_store_kernels;
#[allow(dead_code)]
#[path = "kernels/wgmma_rs.rs"]
mod wgmma_rs_kernels;

use half::{bf16, f16};
use rand::Rng;
use tilus::kernels::gemm::w4::{gemm_w4_f16, gemm_w4t_f16, W4Weight, W4tWeight};
use tilus::kernels::gemm::{gemm_bf16, gemm_f16, gemm_tma_bf16, gemm_tma_f16};
use tilus::runtime::{Context, Cublas, DeviceBuffer};

fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let col = &b[j * k..(j + 1) * k];
            c[i * n + j] = row.iter().zip(col).map(|(x, y)| x * y).sum();
        }
    }
    c
}

fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    if got.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// `a [m, k]` and `b [n, k]` of dtype `$t`, uniform in [-1, 1), and `a · bᵀ` in f64 from the
/// rounded values.
macro_rules! random_case {
    ($t:ty, $rng:expr, $m:expr, $n:expr, $k:expr) => {{
        let (rng, m, n, k) = ($rng, $m, $n, $k);
        let a: Vec<$t> = (0..m * k)
            .map(|_| <$t>::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let b: Vec<$t> = (0..n * k)
            .map(|_| <$t>::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let want = reference(
            &a.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            &b.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            m,
            n,
            k,
        );
        (a, b, want)
    }};
}

const SHAPES: [(usize, usize, usize); 3] = [(33, 136, 200), (257, 520, 1024), (4097, 264, 256)];

macro_rules! check_dtype {
    ($ctx:expr, $t:ty, $kernel:ident, $tol:expr) => {{
        let ctx = $ctx;
        let blas = Cublas::new(ctx).unwrap();
        let mut rng = rand::rng();
        for (m, n, k) in SHAPES {
            let (a, b, want) = random_case!($t, &mut rng, m, n, k);
            let (da, db) = (
                DeviceBuffer::from_host(ctx, &a).unwrap(),
                DeviceBuffer::from_host(ctx, &b).unwrap(),
            );
            for cfg in $kernel::SPACE {
                let mut dc = DeviceBuffer::from_host(ctx, &vec![<$t>::NAN; m * n]).unwrap();
                $kernel::launch(ctx, cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc)
                    .unwrap_or_else(|e| panic!("{cfg} {m}x{n}x{k}: {e}"));
                let got: Vec<f64> = dc.to_host().unwrap().iter().map(|x| x.to_f64()).collect();
                let e = rel_err(&got, &want);
                assert!(
                    e < $tol,
                    "{} {cfg} {m}x{n}x{k}: relative error {e}",
                    stringify!($t)
                );
                eprintln!(
                    "{} {cfg} {m}x{n}x{k}: ok, relative error {e:.2e}",
                    stringify!($t)
                );
            }
            let mut dc = DeviceBuffer::from_host(ctx, &vec![<$t>::NAN; m * n]).unwrap();
            blas.gemm_nt(m, n, k, &da, &db, &mut dc).unwrap();
            let got: Vec<f64> = dc.to_host().unwrap().iter().map(|x| x.to_f64()).collect();
            let e = rel_err(&got, &want);
            assert!(e < $tol, "cuBLAS gemm_nt {m}x{n}x{k}: relative error {e}");
        }
    }};
}

#[test]
fn gpu_wgmma_gemm_matches_f64_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_wgmma_gemm_matches_f64_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!(
            "SKIPPED gpu_wgmma_gemm_matches_f64_reference: wgmma needs sm_90a, the device is {}",
            ctx.arch()
        );
        return;
    }
    check_dtype!(&ctx, f16, gemm_f16, 5e-3);
    check_dtype!(&ctx, bf16, gemm_bf16, 2e-2);

    // k = 100: rows of 200 bytes break the 16-byte copies; a clear error names `k`, nothing
    // launches, and the context still works.
    let (m, n, k) = (64, 128, 100);
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    let e = gemm_f16::launch(
        &ctx,
        &gemm_f16::SPACE[0],
        m as i32,
        n as i32,
        k as i32,
        &a,
        &b,
        &mut c,
    )
    .expect_err("k = 100 must be refused");
    assert!(e.to_string().contains('k'), "{e}");
    eprintln!("k = 100 refused: {e}");
    let k = 128;
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    gemm_f16::launch(
        &ctx,
        &gemm_f16::SPACE[0],
        m as i32,
        n as i32,
        k as i32,
        &a,
        &b,
        &mut c,
    )
    .unwrap();
    assert!(c.to_host().unwrap().iter().all(|x| x.to_f32() == 128.0));
}

/// The copy-engine GEMM: tensor maps encoded at launch, boxes past `m` and `n` zero-filled,
/// stores masked; a `k` whose rows are not 16-byte multiples is refused before the launch,
/// naming the argument, and the context still works.
#[test]
fn gpu_tma_gemm_matches_f64_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_tma_gemm_matches_f64_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!(
            "SKIPPED gpu_tma_gemm_matches_f64_reference: wgmma needs sm_90a, the device is {}",
            ctx.arch()
        );
        return;
    }
    check_dtype!(&ctx, f16, gemm_tma_f16, 5e-3);
    check_dtype!(&ctx, bf16, gemm_tma_bf16, 2e-2);

    let (m, n, k) = (64, 128, 100);
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    let cfg = &gemm_tma_f16::SPACE[0];
    let e = gemm_tma_f16::launch(&ctx, cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
        .expect_err("k = 100 must be refused");
    assert!(e.to_string().contains("`a`"), "{e}");
    eprintln!("k = 100 refused: {e}");
    let k = 136;
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    gemm_tma_f16::launch(&ctx, cfg, m as i32, n as i32, k as i32, &a, &b, &mut c).unwrap();
    assert!(c.to_host().unwrap().iter().all(|x| x.to_f32() == 136.0));
}

/// The persistent GEMM on the device's multiprocessors, on 5 workers (many tiles a block,
/// the ring running across tile boundaries) and on 0 (run as one): within f16 (bf16) rounding of f64 at ragged `m`,
/// the output poisoned, and bit for bit the one-tile-per-block kernel of the same tile (both
/// issue the same wgmmas per tile). An `n` whose rows are not whole 16-byte units is refused
/// naming `c` (the output's tensor map), and the context still works.
#[test]
fn gpu_persistent_gemm_matches_f64_and_the_one_tile_kernel() {
    use tilus::kernels::gemm::{gemm_persistent_bf16, gemm_persistent_f16};
    let test = "gpu_persistent_gemm_matches_f64_and_the_one_tile_kernel";
    let Some(ctx) = common::gpu_context(test, Context::builder(0).no_disk_cache()) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!(
            "SKIPPED {test}: wgmma needs sm_90a, the device is {}",
            ctx.arch()
        );
        return;
    }
    let sms = ctx.device().multiprocessors as i32;
    macro_rules! check {
        ($t:ty, $kernel:ident, $one_tile:ident, $tol:expr) => {{
            let mut rng = rand::rng();
            for (m, n, k) in SHAPES {
                let (a, b, want) = random_case!($t, &mut rng, m, n, k);
                let (da, db) = (
                    DeviceBuffer::from_host(&ctx, &a).unwrap(),
                    DeviceBuffer::from_host(&ctx, &b).unwrap(),
                );
                let (mi, ni, ki) = (m as i32, n as i32, k as i32);
                for cfg in $kernel::SPACE {
                    let one = $one_tile::SPACE
                        .iter()
                        .find(|c| c.BM == cfg.BM && c.BN == cfg.BN && c.STAGES == cfg.STAGES)
                        .unwrap();
                    let mut dc = DeviceBuffer::from_host(&ctx, &vec![<$t>::NAN; m * n]).unwrap();
                    $one_tile::launch(&ctx, one, mi, ni, ki, &da, &db, &mut dc).unwrap();
                    let one_tile = dc.to_host().unwrap();
                    for workers in [sms, 5, 0] {
                        let mut dc =
                            DeviceBuffer::from_host(&ctx, &vec![<$t>::NAN; m * n]).unwrap();
                        $kernel::launch(&ctx, cfg, mi, ni, ki, workers, &da, &db, &mut dc)
                            .unwrap_or_else(|e| panic!("{cfg} {m}x{n}x{k}: {e}"));
                        let host = dc.to_host().unwrap();
                        let got: Vec<f64> = host.iter().map(|x| x.to_f64()).collect();
                        let e = rel_err(&got, &want);
                        let what =
                            format!("{} {cfg} {m}x{n}x{k}, {workers} workers", stringify!($t));
                        assert!(e < $tol, "{what}: relative error {e}");
                        let same = host
                            .iter()
                            .zip(&one_tile)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(same, "{what}: differs from {one}");
                        eprintln!("{what}: ok, relative error {e:.2e}, as {one}");
                    }
                }
            }
        }};
    }
    check!(f16, gemm_persistent_f16, gemm_tma_f16, 5e-3);
    check!(bf16, gemm_persistent_bf16, gemm_tma_bf16, 2e-2);

    // Rows of 100 outputs are 200 bytes: not a tensor map's row.
    let (m, n, k) = (64, 100, 136);
    let a = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    let cfg = &gemm_persistent_f16::SPACE[0];
    let (mi, ki) = (m as i32, k as i32);
    let e = gemm_persistent_f16::launch(&ctx, cfg, mi, n as i32, ki, sms, &a, &b, &mut c)
        .expect_err("n = 100 must be refused");
    assert!(e.to_string().contains("`c`"), "{e}");
    eprintln!("n = 100 refused: {e}");
    let n = 104;
    let b = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; n * k]).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    gemm_persistent_f16::launch(&ctx, cfg, mi, n as i32, ki, sms, &a, &b, &mut c).unwrap();
    assert!(c.to_host().unwrap().iter().all(|x| x.to_f32() == 136.0));
}

/// The warp-specialized persistent GEMM (`specialize!`: a producer warpgroup with 40
/// registers, two consumer warpgroups with 232) on every configuration, on the device's
/// multiprocessors, on 5 workers and on 0 (run as one): within f16 (bf16) rounding of f64 at
/// ragged `m`, the output poisoned, and bit for bit the persistent kernel of the same tile
/// (both issue the same wgmmas per tile). A run that hung in `setmaxnreg` or a barrier would
/// never return: the test finishing is part of the check.
#[test]
fn gpu_warp_specialized_gemm_matches_f64_and_the_persistent_kernel() {
    use tilus::kernels::gemm::{
        gemm_persistent_bf16, gemm_persistent_f16, gemm_ws_bf16, gemm_ws_f16,
    };
    let test = "gpu_warp_specialized_gemm_matches_f64_and_the_persistent_kernel";
    let Some(ctx) = common::gpu_context(test, Context::builder(0).no_disk_cache()) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!(
            "SKIPPED {test}: wgmma needs sm_90a, the device is {}",
            ctx.arch()
        );
        return;
    }
    let sms = ctx.device().multiprocessors as i32;
    macro_rules! check {
        ($t:ty, $kernel:ident, $persistent:ident, $tol:expr) => {{
            let mut rng = rand::rng();
            for (m, n, k) in SHAPES {
                let (a, b, want) = random_case!($t, &mut rng, m, n, k);
                let (da, db) = (
                    DeviceBuffer::from_host(&ctx, &a).unwrap(),
                    DeviceBuffer::from_host(&ctx, &b).unwrap(),
                );
                let (mi, ni, ki) = (m as i32, n as i32, k as i32);
                for cfg in $kernel::SPACE {
                    let same = $persistent::SPACE
                        .iter()
                        .find(|c| c.to_string() == cfg.to_string())
                        .unwrap();
                    let mut dc = DeviceBuffer::from_host(&ctx, &vec![<$t>::NAN; m * n]).unwrap();
                    $persistent::launch(&ctx, same, mi, ni, ki, sms, &da, &db, &mut dc).unwrap();
                    let reference = dc.to_host().unwrap();
                    for workers in [sms, 5, 0] {
                        let mut dc =
                            DeviceBuffer::from_host(&ctx, &vec![<$t>::NAN; m * n]).unwrap();
                        $kernel::launch(&ctx, cfg, mi, ni, ki, workers, &da, &db, &mut dc)
                            .unwrap_or_else(|e| panic!("{cfg} {m}x{n}x{k}: {e}"));
                        let host = dc.to_host().unwrap();
                        let got: Vec<f64> = host.iter().map(|x| x.to_f64()).collect();
                        let e = rel_err(&got, &want);
                        let what =
                            format!("{} {cfg} {m}x{n}x{k}, {workers} workers", stringify!($t));
                        assert!(e < $tol, "{what}: relative error {e}");
                        let bits = host
                            .iter()
                            .zip(&reference)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(bits, "{what}: differs from the persistent {same}");
                        eprintln!("{what}: ok, relative error {e:.2e}, as the persistent kernel");
                    }
                }
            }
        }};
    }
    check!(f16, gemm_ws_f16, gemm_persistent_f16, 5e-3);
    check!(bf16, gemm_ws_bf16, gemm_persistent_bf16, 2e-2);
}

/// The 8-bit copy-engine GEMMs: i8 exactly against an i64 reference at ragged shapes (every
/// configuration, output poisoned with `i32::MIN`, rows and columns of -128 for the largest
/// sums), fp8 e4m3 and e5m2 against f64 within f16's rounding (output poisoned with NaN); a `k`
/// whose rows are not 16-byte multiples is refused naming `a`, and the context still works.
#[test]
fn gpu_eight_bit_gemms_match_their_references() {
    use tilus::kernels::gemm::{gemm_tma_e4m3, gemm_tma_e5m2, gemm_tma_i8};
    use tilus::DType;
    let Some(ctx) = common::gpu_context(
        "gpu_eight_bit_gemms_match_their_references",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_eight_bit_gemms_match_their_references: wgmma needs sm_90a");
        return;
    }
    let mut rng = rand::rng();
    for (m, n, k) in [(33, 136, 208), (257, 520, 1024), (4097, 264, 272)] {
        let mut a: Vec<i8> = (0..m * k).map(|_| rng.random_range(-128..=127)).collect();
        let mut b: Vec<i8> = (0..n * k).map(|_| rng.random_range(-128..=127)).collect();
        a[..k].fill(-128);
        b[(n - 1) * k..].fill(-128);
        let want: Vec<i64> = (0..m * n)
            .map(|ij| {
                let (row, col) = (&a[ij / n * k..][..k], &b[ij % n * k..][..k]);
                row.iter()
                    .zip(col)
                    .map(|(&x, &y)| x as i64 * y as i64)
                    .sum()
            })
            .collect();
        let (da, db) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &b).unwrap(),
        );
        for cfg in gemm_tma_i8::SPACE {
            let mut dc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
            gemm_tma_i8::launch(&ctx, cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc)
                .unwrap_or_else(|e| panic!("i8 {cfg} {m}x{n}x{k}: {e}"));
            let got = dc.to_host().unwrap();
            for (ij, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g as i64,
                    w,
                    "i8 {cfg} {m}x{n}x{k}: c[{}, {}]",
                    ij / n,
                    ij % n
                );
            }
            eprintln!("i8 {cfg} {m}x{n}x{k}: exact");
        }
        for dtype in [DType::F8E4M3, DType::F8E5M2] {
            let mut codes = |len| -> Vec<u8> {
                (0..len)
                    .map(|_| dtype.encode(rng.random_range(-2.0f32..2.0)).unwrap() as u8)
                    .collect()
            };
            let (a, b) = (codes(m * k), codes(n * k));
            let dec =
                |v: &[u8]| -> Vec<f64> { v.iter().map(|&x| dtype.decode(x as u32)).collect() };
            let want = reference(&dec(&a), &dec(&b), m, n, k);
            let (da, db) = (
                DeviceBuffer::from_host(&ctx, &a).unwrap(),
                DeviceBuffer::from_host(&ctx, &b).unwrap(),
            );
            for i in [0, 3] {
                let mut dc = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                let (mi, ni, ki) = (m as i32, n as i32, k as i32);
                let (cfg, r) = if dtype == DType::F8E4M3 {
                    let cfg = &gemm_tma_e4m3::SPACE[i];
                    let r = gemm_tma_e4m3::launch(&ctx, cfg, mi, ni, ki, &da, &db, &mut dc);
                    (cfg.to_string(), r)
                } else {
                    let cfg = &gemm_tma_e5m2::SPACE[i];
                    let r = gemm_tma_e5m2::launch(&ctx, cfg, mi, ni, ki, &da, &db, &mut dc);
                    (cfg.to_string(), r)
                };
                r.unwrap_or_else(|e| panic!("{dtype} {cfg} {m}x{n}x{k}: {e}"));
                let got: Vec<f64> = dc.to_host().unwrap().iter().map(|x| x.to_f64()).collect();
                let e = rel_err(&got, &want);
                assert!(e < 3e-3, "{dtype} {cfg} {m}x{n}x{k}: relative error {e}");
                eprintln!("{dtype} {cfg} {m}x{n}x{k}: ok, relative error {e:.2e}");
            }
        }
    }
    // k = 200: rows of 200 bytes break the copy engine's 16-byte rows.
    let (m, n, k) = (64, 128, 200);
    let a = DeviceBuffer::from_host(&ctx, &vec![1i8; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![1i8; n * k]).unwrap();
    let mut c = DeviceBuffer::<i32>::zeros(&ctx, m * n).unwrap();
    let cfg = &gemm_tma_i8::SPACE[0];
    let e = gemm_tma_i8::launch(&ctx, cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
        .expect_err("k = 200 must be refused");
    assert!(e.to_string().contains("`a`"), "{e}");
    eprintln!("k = 200 refused: {e}");
    let k = 144;
    let a = DeviceBuffer::from_host(&ctx, &vec![1i8; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&ctx, &vec![-1i8; n * k]).unwrap();
    gemm_tma_i8::launch(&ctx, cfg, m as i32, n as i32, k as i32, &a, &b, &mut c).unwrap();
    assert!(c.to_host().unwrap().iter().all(|&x| x == -144));
}

#[test]
fn gpu_w4_gemm_matches_f64_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_w4_gemm_matches_f64_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_w4_gemm_matches_f64_reference: wgmma needs sm_90a");
        return;
    }
    let mut rng = rand::rng();
    for (m, n, k, group) in [
        (33, 264, 512, 128),
        (257, 520, 1024, 128),
        (4097, 136, 256, 64),
        (33, 384, 320, 64),
        (257, 256, 1024, 64),
        (4097, 128, 256, 128),
    ] {
        let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let q = W4Weight::quantize(&w, n, k, group).unwrap();
        let wd: Vec<f64> = q.dequantize().iter().map(|&x| x as f64).collect();
        let a: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let want = reference(&af, &wd, m, n, k);
        let (da, dw, ds) = (
            DeviceBuffer::from_host(&ctx, &a).unwrap(),
            DeviceBuffer::from_host(&ctx, &q.codes).unwrap(),
            DeviceBuffer::from_host(&ctx, &q.scales).unwrap(),
        );
        for cfg in gemm_w4_f16::SPACE {
            let mut dc = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gemm_w4_f16::launch(
                &ctx,
                cfg,
                m as i32,
                n as i32,
                k as i32,
                group as i32,
                &da,
                &dw,
                &ds,
                &mut dc,
            )
            .unwrap_or_else(|e| panic!("{cfg} {m}x{n}x{k}: {e}"));
            let got: Vec<f64> = dc.to_host().unwrap().iter().map(|x| x.to_f64()).collect();
            let e = rel_err(&got, &want);
            assert!(
                e < 5e-3,
                "w4 {cfg} {m}x{n}x{k} g{group}: relative error {e}"
            );
            eprintln!("w4 {cfg} {m}x{n}x{k} g{group}: ok, relative error {e:.2e}");
        }
        // The weight as wgmma's register operand (n a multiple of its 128-row blocks).
        if n % 128 != 0 {
            continue;
        }
        let t = W4tWeight::from_w4(&q, 128).unwrap();
        let (tw, ts) = (
            DeviceBuffer::from_host(&ctx, &t.codes).unwrap(),
            DeviceBuffer::from_host(&ctx, &t.scales).unwrap(),
        );
        for cfg in gemm_w4t_f16::SPACE {
            let mut dc = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            let (mi, ni, ki, gi) = (m as i32, n as i32, k as i32, group as i32);
            gemm_w4t_f16::launch(&ctx, cfg, mi, ni, ki, gi, &da, &tw, &ts, &mut dc)
                .unwrap_or_else(|e| panic!("{cfg} {m}x{n}x{k}: {e}"));
            let got: Vec<f64> = dc.to_host().unwrap().iter().map(|x| x.to_f64()).collect();
            let e = rel_err(&got, &want);
            assert!(
                e < 5e-3,
                "w4t {cfg} {m}x{n}x{k} g{group}: relative error {e}"
            );
            eprintln!("w4t {cfg} {m}x{n}x{k} g{group}: ok, relative error {e:.2e}");
        }
    }
}

/// The RS kernels on the interpreter, always, and on the GPU when `ctx` is one (sm_90a): both
/// against f64, on the same random inputs, outputs poisoned.
macro_rules! check_rs {
    ($ctx:expr, $t:ty, $kernel:ident) => {{
        let ctx: Option<&std::sync::Arc<Context>> = $ctx;
        let mut rng = rand::rng();
        let mut rnd =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let (w, x, c0) = (rnd(128 * 64), rnd(128 * 64), rnd(128 * 128));
        let w: Vec<$t> = w.iter().map(|&v| <$t>::from_f32(v)).collect();
        let x: Vec<$t> = x.iter().map(|&v| <$t>::from_f32(v)).collect();
        let want = wgmma_rs_kernels::wgmma_rs_reference(
            &w.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &c0.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        );
        let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
        let name = stringify!($t);
        for cfg in wgmma_rs_kernels::$kernel::SPACE {
            let mut interp = vec![f32::NAN; 128 * 128];
            wgmma_rs_kernels::$kernel::interpret(cfg, &w, &x, &c0, &mut interp)
                .unwrap_or_else(|e| panic!("{cfg}: interpreter: {e}"));
            for (i, (&r, &wv)) in interp.iter().zip(&want).enumerate() {
                // Two dots, each an exact sum rounded once to f32.
                let e = ((r as f64) - wv).abs() / scale;
                assert!(e < 1e-6, "{name} {cfg}: interpreter c[{i}] = {r}, f64 {wv}");
            }
            let Some(ctx) = ctx else { continue };
            let (dw, dx, dc0) = (
                DeviceBuffer::from_host(ctx, &w).unwrap(),
                DeviceBuffer::from_host(ctx, &x).unwrap(),
                DeviceBuffer::from_host(ctx, &c0).unwrap(),
            );
            let mut dc = DeviceBuffer::from_host(ctx, &vec![f32::NAN; 128 * 128]).unwrap();
            wgmma_rs_kernels::$kernel::launch(ctx, cfg, &dw, &dx, &dc0, &mut dc)
                .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            let got = dc.to_host().unwrap();
            // The tensor cores accumulate in f32 in their own order.
            let mut worst = 0.0f64;
            for (i, ((&g, &r), &wv)) in got.iter().zip(&interp).zip(&want).enumerate() {
                let e = ((g as f64) - wv).abs() / scale;
                assert!(
                    g.is_finite() && e < 1e-4,
                    "{name} {cfg}: c[{}, {}] = {g}, f64 {wv}, interpreter {r}",
                    i / 128,
                    i % 128
                );
                worst = worst.max(e);
            }
            eprintln!("rs {name} {cfg}: ok on the GPU, max relative error {worst:.2e}");
        }
    }};
}

#[test]
fn gpu_wgmma_register_a_matches_f64_and_the_interpreter() {
    let test = "gpu_wgmma_register_a_matches_f64_and_the_interpreter";
    // The interpreter part runs everywhere; the GPU part needs sm_90a.
    let ctx = common::gpu_context(test, Context::builder(0).no_disk_cache()).filter(|ctx| {
        let ok = ctx.arch() == "sm_90a";
        if !ok {
            eprintln!(
                "SKIPPED {test} on the GPU: wgmma needs sm_90a, the device is {}",
                ctx.arch()
            );
        }
        ok
    });
    check_rs!(ctx.as_ref(), f16, wgmma_rs_f16);
    check_rs!(ctx.as_ref(), bf16, wgmma_rs_bf16);
    check_rs!(ctx.as_ref(), f16, wgmma_rs_split_n);
    // u8 weights against i8 activations (`.s32.u8.s8`), from `c0` and from a fresh zero tile:
    // exact, so the GPU must match the i64 reference bit for bit.
    let mut rng = rand::rng();
    let w: Vec<u8> = (0..128 * 128).map(|_| rng.random()).collect();
    let x: Vec<i8> = (0..128 * 128).map(|_| rng.random()).collect();
    let c0: Vec<i32> = (0..128 * 128)
        .map(|_| rng.random_range(-1 << 20..1 << 20))
        .collect();
    let want = wgmma_rs_kernels::wgmma_rs_u8s8_reference(&w, &x, &c0);
    for cfg in wgmma_rs_kernels::wgmma_rs_u8s8::SPACE {
        let mut interp = vec![i32::MIN; 128 * 128];
        wgmma_rs_kernels::wgmma_rs_u8s8::interpret(cfg, &w, &x, &c0, &mut interp)
            .unwrap_or_else(|e| panic!("{cfg}: interpreter: {e}"));
        assert_eq!(interp, want, "u8 x s8 {cfg}: interpreter");
        let Some(ctx) = ctx.as_ref() else { continue };
        let (dw, dx, dc0) = (
            DeviceBuffer::from_host(ctx, &w).unwrap(),
            DeviceBuffer::from_host(ctx, &x).unwrap(),
            DeviceBuffer::from_host(ctx, &c0).unwrap(),
        );
        let mut dc = DeviceBuffer::from_host(ctx, &vec![i32::MIN; 128 * 128]).unwrap();
        wgmma_rs_kernels::wgmma_rs_u8s8::launch(ctx, cfg, &dw, &dx, &dc0, &mut dc)
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let got = dc.to_host().unwrap();
        let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        assert_eq!(
            wrong,
            0,
            "u8 x s8 {cfg}: {wrong} of {} outputs differ",
            want.len()
        );
        eprintln!("rs u8 x s8 {cfg}: exact on the GPU");
    }
}

/// `tma_store`, unswizzled and swizzled, at ragged shapes: bit for bit the interpreter (`y` the
/// input tile, `z` twice it, written from the same shared tile after the first store read it),
/// and the poisoned element past each view untouched.
#[test]
fn gpu_tma_store_matches_the_interpreter() {
    use tma_store_kernels::{tma_store_plain, tma_store_swizzled};
    let test = "gpu_tma_store_matches_the_interpreter";
    let Some(ctx) = common::gpu_context(test, Context::builder(0).no_disk_cache()) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!(
            "SKIPPED {test}: the copy engine needs sm_90a, the device is {}",
            ctx.arch()
        );
        return;
    }
    let mut rng = rand::rng();
    // Row pitches a multiple of 16 bytes (the tensor map's rule), tiles cut in both dimensions.
    for (m, n) in [(16usize, 64usize), (33, 104), (257, 4104), (4097, 72)] {
        let x: Vec<f16> = (0..m * n)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let poison = f16::from_f32(-777.0);
        let (mut wy, mut wz) = (vec![poison; m * n + 1], vec![poison; m * n + 1]);
        tma_store_plain::interpret(
            &tma_store_plain::SPACE[0],
            m as i32,
            n as i32,
            &x,
            &mut wy,
            &mut wz,
        )
        .unwrap();
        let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
        for swizzled in [false, true] {
            let mut dy = DeviceBuffer::from_host(&ctx, &vec![poison; m * n + 1]).unwrap();
            let mut dz = DeviceBuffer::from_host(&ctx, &vec![poison; m * n + 1]).unwrap();
            let (mi, ni) = (m as i32, n as i32);
            if swizzled {
                let cfg = &tma_store_swizzled::SPACE[0];
                tma_store_swizzled::launch(&ctx, cfg, mi, ni, &dx, &mut dy, &mut dz)
            } else {
                tma_store_plain::launch(
                    &ctx,
                    &tma_store_plain::SPACE[0],
                    mi,
                    ni,
                    &dx,
                    &mut dy,
                    &mut dz,
                )
            }
            .unwrap_or_else(|e| panic!("{m}x{n} swizzled={swizzled}: {e}"));
            let (y, z) = (dy.to_host().unwrap(), dz.to_host().unwrap());
            for (what, got, want) in [("y", &y, &wy), ("z", &z, &wz)] {
                if let Some(i) = (0..=m * n).find(|&i| got[i] != want[i]) {
                    panic!(
                        "{m}x{n} swizzled={swizzled}: {what}[{i}] = {}, interpreter {}",
                        got[i], want[i]
                    );
                }
            }
            eprintln!("tma_store {m}x{n} swizzled={swizzled}: ok");
        }
    }
    // Rows of 100 f16 break the copy engine's 16-byte rule: an error naming the view's buffer,
    // and the context still works.
    let (m, n) = (8usize, 100usize);
    let dx = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * n]).unwrap();
    let mut dy = DeviceBuffer::from_host(&ctx, &vec![f16::ZERO; m * n]).unwrap();
    let mut dz = DeviceBuffer::from_host(&ctx, &vec![f16::ZERO; m * n]).unwrap();
    let cfg = &tma_store_plain::SPACE[0];
    let e = tma_store_plain::launch(&ctx, cfg, m as i32, n as i32, &dx, &mut dy, &mut dz)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`y`") && e.contains("16"), "{e}");
    let n = 64;
    let dx = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; m * n]).unwrap();
    let mut dy = DeviceBuffer::from_host(&ctx, &vec![f16::ZERO; m * n]).unwrap();
    let mut dz = DeviceBuffer::from_host(&ctx, &vec![f16::ZERO; m * n]).unwrap();
    tma_store_plain::launch(&ctx, cfg, m as i32, n as i32, &dx, &mut dy, &mut dz).unwrap();
    assert!(dz
        .to_host()
        .unwrap()
        .iter()
        .all(|&v| v == f16::from_f32(2.0)));
}
