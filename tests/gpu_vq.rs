//! VQ-GEMV on the GPU (issue 18): `GpuVqLinear`'s codebook-centric kernel (the default cache,
//! the other copy count, k split in four, rings of 3 and 2) and the naive GC kernel, for GPTVQ-2,
//! AQLM-3 and QuiP#-4 (the E8P lattice, 8 copies of its table and one) at ragged m (1, 3, 16,
//! 33),
//! against the interpreter running the same kernel on the same random inputs (within one f16
//! ulp: the GPU's mma sums in another order) and an f64 reference of the dequantized weight
//! (relative error below 1e-2); outputs poisoned (NaN) before each launch.
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns the
//! skip into a failure. Run with `cargo test --release --test gpu_vq -- --nocapture`.

mod common;

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tilus::kernels::vq::{VqCache, VqLinear, VqPrefill};
use tilus::runtime::{Context, DeviceBuffer};
use tilus::vq::{VqConfig, VqWeight};

/// The weight formats and shapes the direct kernel and prefill's path are checked on.
const FORMATS: [(VqConfig, usize, usize); 4] = [
    (VqConfig::GPTVQ_2, 512, 1024),
    (VqConfig::AQLM_2X8, 256, 1024),
    (VqConfig::AQLM_3, 256, 1024),
    (VqConfig::QUIP_4, 512, 1024),
];

fn reference(w: &VqWeight, x: &[f16], m: usize) -> Vec<f64> {
    let d = w.dequantize();
    let (n, k) = (w.n, w.k);
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k)
                .map(|c| x[i * k + c].to_f64() * d[j * k + c] as f64)
                .sum();
        }
    }
    y
}

/// A GPU output against the f64 reference (relative error below 1e-2 of the larger of the
/// value and the reference's rms, no poison left) and, when given, the interpreter's output of
/// the same kernel: within two f16 ulps and `1e-3` of the rms (the f32 sums' order; table
/// entries whose f16 rounding tips apart, about 1.5e-5 rms each, where a wrong look-up is about
/// 3e-2 rms).
fn check_output(tag: &str, got: &[f16], want: &[f64], cpu: Option<&[f16]>) {
    let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
    for (i, g) in got.iter().enumerate() {
        let gv = g.to_f64();
        assert!(gv.is_finite(), "{tag}: y[{i}] = {gv} (poison left?)");
        let err = (gv - want[i]).abs() / want[i].abs().max(rms);
        assert!(
            err < 1e-2,
            "{tag}: y[{i}] = {gv}, reference {} (rel err {err})",
            want[i]
        );
        if let Some(cpu) = cpu {
            let c = cpu[i].to_f64();
            let ulp = f16::from_f64(c.abs()).to_f64().max(6.1e-5) * 2f64.powi(-10);
            assert!(
                (gv - c).abs() <= 2.0 * ulp + 1e-3 * rms,
                "{tag}: y[{i}] = {gv}, interpreter {c}"
            );
        }
    }
}

#[test]
fn gpu_vq_gemv_matches_interpreter_and_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_vq_gemv_matches_interpreter_and_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x6e_0018);
    for (config, n, k) in FORMATS {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let layer = VqLinear::new(w.clone()).unwrap();
        let default = layer.cache();
        // The other copy count: 16 or one for vectors of 4, 8 or one for vectors of 8 where
        // they fit (the E8P table, AQLM-2x8's one codebook; not AQLM-3's 4096 entries).
        let copies = if config.vector_size == 4 { 16 } else { 8 };
        let other = VqCache {
            replicas: copies + 1 - default.replicas,
        };
        let other = if layer.with_cache(other).is_ok() {
            other
        } else {
            default
        };
        for (ci, cache) in [default, other, default].into_iter().enumerate() {
            // Rings of 3, 2 and 3 stages; k split in four (up to m = 8 in one launch, the last
            // block of a tile adding the partials in split order; above by atomics and the
            // finalize kernel) with the second and third, the second with its buffers
            // reserved ahead.
            let split = if ci == 0 { 1 } else { 4 };
            let layer = VqLinear::new(w.clone())
                .unwrap()
                .with_stages(3 - ci % 2)
                .unwrap()
                .with_cache(cache)
                .unwrap()
                .with_split(split)
                .unwrap();
            // The third runs the transposed product on 16 tokens per block at every m, the
            // others the layer's choice (for vectors of 4 the paired product up to m = 4, then
            // transposed on 8 tokens up to m = 8, else y = x · Wᵀ).
            let layer = if ci == 2 {
                layer.with_product(2).unwrap()
            } else {
                layer
            };
            let gpu = layer.to_gpu(&ctx).unwrap();
            if ci == 1 {
                gpu.reserve(33).unwrap();
            }
            for m in [1, 3, 6, 16, 33] {
                let x: Vec<f16> = (0..m * k)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
                let want = reference(&w, &x, m);
                let cpu = layer.forward_cpu(&x, m).unwrap();
                for naive in [false, true] {
                    let tag = format!(
                        "{} {n}x{k} m={m} {cache:?} split={split} product={} naive={naive}",
                        config.name,
                        layer.config(m).TR
                    );
                    let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    gpu.forward_into(&xd, m, &mut y, naive).unwrap();
                    let got = y.to_host().unwrap();
                    if (split > 1 || layer.lut_tiling(m).is_some()) && !naive {
                        // A second launch finds the semaphores reset (and the atomics' sum
                        // zeroed by vq_finalize): the ordered sum gives the same bits, the
                        // atomic one the same values up to the order of its additions.
                        let mut again =
                            DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                        gpu.forward_into(&xd, m, &mut again, naive).unwrap();
                        let again = again.to_host().unwrap();
                        // (One token of AQLM-3 runs the tables, whose sums are atomics.)
                        if layer.config(m).ORDERED == 1 && layer.lut_tiling(m).is_none() {
                            let bits =
                                |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&again), bits(&got), "{tag}");
                        } else {
                            // Within two f16 ulps of the first, or of the largest output
                            // where a value cancels (the atomics add the partials in another
                            // order; a sum left from the first launch would double every value).
                            let top = got.iter().map(|v| v.to_f64().abs()).fold(0.0, f64::max);
                            for (i, (a, g)) in again.iter().zip(&got).enumerate() {
                                let (a, g) = (a.to_f64(), g.to_f64());
                                let ulp = f16::from_f64(g.abs().max(top * 2f64.powi(-8)))
                                    .to_f64()
                                    .max(6.1e-5)
                                    * 2f64.powi(-10);
                                assert!(
                                    (a - g).abs() <= 2.0 * ulp,
                                    "{tag}: y[{i}] {g}, then {a} in a second launch"
                                );
                            }
                        }
                    }
                    // The interpreter's output of the cached kernel, within one f16 ulp and
                    // the f32 summation order.
                    check_output(&tag, &got, &want, Some(&cpu));
                }
            }
        }
    }
}

/// The paired product (`with_product(3)`, vectors of 4) on the GPU: GPTVQ-2 and a format with
/// one codebook and two stages with per-channel scales, at 1 to 5 tokens, 16 copies and one,
/// whole k and k split in four (the ordered partials: a second launch gives the same bits),
/// against the f64 reference and the interpreter; outputs poisoned (NaN) before each launch.
#[test]
fn gpu_vq_paired_product_matches_interpreter_and_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_vq_paired_product_matches_interpreter_and_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x6e_0318);
    let one_rvq = VqConfig {
        name: "one-rvq4",
        scope: tilus::vq::CodebookScope::Matrix,
        residuals: 2,
        channel_scale: true,
        ..VqConfig::GPTVQ_2
    };
    for (config, n, k) in [(VqConfig::GPTVQ_2, 512, 1024), (one_rvq, 256, 1024)] {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        for (replicas, split) in [(16, 1), (16, 4), (1, 4)] {
            let layer = VqLinear::new(w.clone())
                .unwrap()
                .with_cache(VqCache { replicas })
                .unwrap()
                .with_split(split)
                .unwrap()
                .with_product(3)
                .unwrap();
            let gpu = layer.to_gpu(&ctx).unwrap();
            for m in [1, 3, 4, 5] {
                let tag = format!(
                    "{} {n}x{k} m={m} copies {replicas} split {split}",
                    config.name
                );
                assert_eq!(layer.config(m).TR, 3, "{tag}");
                let x: Vec<f16> = (0..m * k)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
                let want = reference(&w, &x, m);
                let cpu = layer.forward_cpu(&x, m).unwrap();
                let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                gpu.forward_into(&xd, m, &mut y, false).unwrap();
                let got = y.to_host().unwrap();
                let mut again = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                gpu.forward_into(&xd, m, &mut again, false).unwrap();
                let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&again.to_host().unwrap()), bits(&got), "{tag}: again");
                check_output(&tag, &got, &want, Some(&cpu));
            }
        }
    }
}

#[test]
fn gpu_vq_rejects_bad_buffers() {
    let Some(ctx) = common::gpu_context("gpu_vq_rejects_bad_buffers", Context::builder(0)) else {
        return;
    };
    let w = VqWeight::random(VqConfig::GPTVQ_2, 256, 256, 1, false).unwrap();
    let gpu = VqLinear::new(w).unwrap().to_gpu(&ctx).unwrap();
    let x = DeviceBuffer::<f16>::zeros(&ctx, 2 * 256).unwrap();
    let mut y = DeviceBuffer::<f16>::zeros(&ctx, 3).unwrap();
    let e = gpu
        .forward_into(&x, 2, &mut y, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`y`"), "{e}");
    let e = gpu.forward(&x, 3).err().unwrap().to_string();
    assert!(e.contains("`x`"), "{e}");
    let e = gpu.reserve(0).unwrap_err().to_string();
    assert!(e.contains("`m`"), "{e}");
}

/// Prefill's path (`GpuVqLinear::forward_dense_into`): the dense weight written by
/// `vq_dequant` into a larger shared buffer (poisoned; the values past `n·k` stay untouched)
/// equals the interpreter's bit for bit (the same f32 sum and product), and cuBLAS's GEMM on it
/// matches the f64 reference at ragged m (33, 257; outputs poisoned) for GPTVQ-2, AQLM-2x8,
/// AQLM-3 and QuiP#-4; a buffer shorter than `n·k` is refused by name. The layer's own
/// forward takes the path from its `with_prefill_from` token count on (33 tokens: the direct
/// kernel, nothing added to the shared `VqPrefill`; 257: the path, its dense weight grown to
/// the largest layer), and matches the reference both ways.
#[test]
fn gpu_vq_dense_prefill_matches_interpreter_and_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_vq_dense_prefill_matches_interpreter_and_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let blas = tilus::runtime::Cublas::new(&ctx).unwrap();
    let prefill = VqPrefill::new(&ctx);
    let mut largest = 0;
    let mut rng = StdRng::seed_from_u64(0xde05_0018);
    for (config, n, k) in FORMATS {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let layer = VqLinear::new(w.clone())
            .unwrap()
            .with_prefill_from(40)
            .unwrap()
            .with_dense_from(0);
        assert!(!layer.takes_dense(33) && layer.takes_dense(257) && !layer.takes_fused(257));
        let gpu = layer.to_gpu(&ctx).unwrap().with_prefill(&prefill).unwrap();
        let extra = 7;
        let mut dense = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; n * k + extra]).unwrap();
        gpu.dense_into(&mut dense).unwrap();
        let got = dense.to_host().unwrap();
        let want = layer.dense_cpu().unwrap();
        for (i, (g, c)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                c.to_bits(),
                "{}: w[{i}] = {g}, interpreter {c}",
                config.name
            );
        }
        assert!(
            got[n * k..].iter().all(|v| v.is_nan()),
            "{}: past n·k",
            config.name
        );
        for m in [33, 257] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_dense_into(&xd, m, &mut y, &mut dense, &blas)
                .unwrap();
            let want = reference(&w, &x, m);
            let tag = format!("{} {n}x{k} m={m} dense", config.name);
            check_output(&tag, &y.to_host().unwrap(), &want, None);
            // The layer's choice: the direct kernel below 40 tokens, the path from there.
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_into(&xd, m, &mut y, false).unwrap();
            let tag = format!("{} {n}x{k} m={m} forward_into", config.name);
            check_output(&tag, &y.to_host().unwrap(), &want, None);
            if m == 33 {
                assert_eq!(prefill.bytes(), largest, "{tag}: the direct kernel's m");
            } else {
                largest = largest.max(2 * n * k);
                assert_eq!(
                    prefill.bytes(),
                    largest,
                    "{tag}: grown to the largest layer"
                );
            }
        }
        let mut short = DeviceBuffer::<f16>::zeros(&ctx, n * k - 1).unwrap();
        let e = gpu.dense_into(&mut short).unwrap_err().to_string();
        assert!(e.contains("`w`"), "{e}");
    }
}

/// The fused VQ-GEMM on the GPU at every block height it takes, against the f64 reference and
/// the interpreter (the same f32 sums up to their order: two f16 ulps), ragged token counts
/// (33, 257), outputs poisoned; the layer's forward takes it from `with_prefill_from` tokens on, and
/// `reserve` uploads its codes ahead. QuiP#-4 (no fused GEMM) keeps the dense path.
#[test]
fn gpu_vq_fused_gemm_matches_interpreter_and_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_vq_fused_gemm_matches_interpreter_and_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for (config, n, k) in FORMATS {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let layer = VqLinear::new(w.clone())
            .unwrap()
            .with_prefill_from(40)
            .unwrap()
            .with_dense_from(usize::MAX);
        let gpu = layer.to_gpu(&ctx).unwrap();
        if config.e8p {
            assert!(!layer.takes_fused(257), "{}", config.name);
            let e = layer.gemm_config(257, None).unwrap_err().to_string();
            assert!(e.contains("`weight`"), "{e}");
            continue;
        }
        assert!(!layer.takes_fused(33) && layer.takes_fused(40));
        gpu.reserve(300).unwrap();
        for m in [33, 257] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let want = reference(&w, &x, m);
            for bm in [64, 128, 256] {
                if layer.gemm_config(m, Some(bm)).is_err() {
                    continue;
                }
                let cpu = layer.forward_cpu_gemm(&x, m, Some(bm)).unwrap();
                let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                gpu.forward_gemm_into(&xd, m, &mut y, Some(bm)).unwrap();
                let tag = format!("{} {n}x{k} m={m} bm={bm} seed {seed}", config.name);
                check_output(&tag, &y.to_host().unwrap(), &want, Some(&cpu));
            }
            // The layer's choice: the direct kernel at 33 tokens, the fused GEMM at 257.
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_into(&xd, m, &mut y, false).unwrap();
            let tag = format!("{} {n}x{k} m={m} forward_into seed {seed}", config.name);
            check_output(&tag, &y.to_host().unwrap(), &want, None);
        }
        assert_eq!(gpu.prefill_handle().bytes(), 0, "no dense weight made");
    }
}

/// The three-tier codebook cache (`vq_gemv_cached`) on the GPU at every point of its tuning
/// space (entries in registers by warp shuffles, in shared memory, and from global memory)
/// for 1 and 3 tokens, against the f64 reference and the interpreter, outputs poisoned; then
/// the autotuner over the same points picks one of them. QuiP#-4 is refused by name.
#[test]
fn gpu_vq_cached_gemv_matches_interpreter_and_reference() {
    use tilus::kernels::vq::cache::{CacheTiers, CachedWeight};
    let Some(ctx) = common::gpu_context(
        "gpu_vq_cached_gemv_matches_interpreter_and_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for (config, n, k) in FORMATS {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let rule = CacheTiers::for_kernel(config);
        let Ok(cw) = CachedWeight::new(&w, rule) else {
            assert!(config.e8p, "{}", config.name);
            continue;
        };
        let base = cw.to_gpu(&ctx).unwrap();
        let points = CacheTiers::candidates(config);
        assert!(points.len() >= 4, "{}: {points:?}", config.name);
        for m in [1, 3] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let want = reference(&w, &x, m);
            for &t in &points {
                let gpu = base.with_tiers(t).unwrap();
                let cpu = gpu.host.forward_cpu(&x, m).unwrap();
                let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                gpu.forward_into(&xd, m, &mut y).unwrap();
                let tag = format!("{} {n}x{k} m={m} {t} seed {seed}", config.name);
                check_output(&tag, &y.to_host().unwrap(), &want, Some(&cpu));
            }
        }
        let (best, outcome) = tilus::kernels::vq::tune::tune_tiers(&ctx, &cw, 1).unwrap();
        assert!(points.contains(&best), "{}: {best}", config.name);
        assert_eq!(outcome.record.candidates.len(), points.len());
        eprintln!(
            "{}: cached GEMV exact on {} tierings; tuned {best} ({:.1} us)",
            config.name,
            points.len(),
            outcome.median_us
        );
    }
}

/// One token by tables on the GPU (`tilus::kernels::vq::lut`): AQLM-3 at 2048 x 4096 and a
/// one-stage 256-entry format with the rule's tiling (8-warp blocks on one table, two per
/// multiprocessor, at these sizes) and with rings of two tables in 4- and 16-warp blocks,
/// reserved ahead and not, against the f64 reference and the interpreter; outputs poisoned, and
/// each layer run twice (the sum left zero by the finalize step).
#[test]
fn gpu_vq_lut_one_token_matches_reference() {
    use tilus::kernels::vq::lut::LutTiling;
    let Some(ctx) = common::gpu_context(
        "gpu_vq_lut_one_token_matches_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let one_stage = VqConfig {
        name: "vq8x256",
        log2_entries: 8,
        residuals: 1,
        channel_scale: false,
        ..VqConfig::AQLM_3
    };
    for (config, n, k) in [(VqConfig::AQLM_3, 2048, 4096), (one_stage, 1024, 2048)] {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let rule = VqLinear::new(w.clone()).unwrap();
        let tiled = |warps, tables| {
            rule.clone()
                .with_lut_tiling(LutTiling {
                    warps,
                    rs: 2,
                    per: 2,
                    tables,
                })
                .unwrap()
        };
        let layers = [rule.clone(), tiled(4, 2), tiled(16, 2)];
        for (li, layer) in layers.into_iter().enumerate() {
            let tiling = layer.lut_tiling(1).expect("one token takes the tables");
            let gpu = layer.to_gpu(&ctx).unwrap();
            if li > 0 {
                gpu.reserve(1).unwrap();
            }
            let x: Vec<f16> = (0..k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let want = reference(&w, &x, 1);
            let cpu = layer.forward_cpu(&x, 1).unwrap();
            for run in 0..2 {
                let tag = format!(
                    "{} {n}x{k} {tiling:?} run {run} seed {seed:#x}",
                    config.name
                );
                let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; n]).unwrap();
                gpu.forward_into(&xd, 1, &mut y, false).unwrap();
                // The interpreter's tables and sums: the same up to the order of the atomics'
                // f32 additions, one f16 rounding, and the table entries whose f16 rounding the
                // two f32 dot products (tensor cores and interpreter) tip apart.
                check_output(&tag, &y.to_host().unwrap(), &want, Some(&cpu));
            }
        }
    }
}

/// Layers of different shapes sharing one table scratch (`VqLutScratch`): the scratch grows to
/// the largest layer, one forward after another of either layer matches the f64 reference
/// (outputs poisoned; the shared sum left zero by each), a layer without a table path takes
/// the scratch as a no-op, and a scratch of another context is refused naming `scratch`. The
/// direct kernel's codes reach the device only with the first forward (or reserve) of more
/// than one token, and those forwards match the reference too.
#[test]
fn gpu_vq_lut_layers_share_one_scratch() {
    use tilus::kernels::vq::VqLutScratch;
    let Some(ctx) = common::gpu_context(
        "gpu_vq_lut_layers_share_one_scratch",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let scratch = VqLutScratch::new(&ctx);
    assert_eq!(scratch.bytes(), 0);
    // Table bytes (chunks · entries · 8 f16) and sum bytes of an AQLM-3 layer.
    let need = |n: usize, k: usize| k / 8 * 2 / 8 * 4096 * 8 * 2 + n * 4;
    let mut layers = Vec::new();
    for (n, k) in [(1024, 2048), (2048, 4096)] {
        let w = VqWeight::random(VqConfig::AQLM_3, n, k, rng.random(), true).unwrap();
        let host = VqLinear::new(w.clone()).unwrap();
        assert!(host.lut_tiling(1).is_some(), "{n}x{k} takes the tables");
        let gpu = host
            .to_gpu(&ctx)
            .unwrap()
            .with_lut_scratch(&scratch)
            .unwrap();
        layers.push((w, gpu, n, k));
    }
    let mut high = 0;
    for (step, li) in [0, 1, 0, 1, 1, 0].into_iter().enumerate() {
        let (w, gpu, n, k) = &layers[li];
        let x: Vec<f16> = (0..*k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; *n]).unwrap();
        gpu.forward_into(&xd, 1, &mut y, false).unwrap();
        let want = reference(w, &x, 1);
        let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
        for (i, g) in y.to_host().unwrap().iter().enumerate() {
            let g = g.to_f64();
            let err = (g - want[i]).abs() / want[i].abs().max(rms);
            assert!(
                g.is_finite() && err < 1e-2,
                "step {step}, layer {n}x{k}, seed {seed:#x}: y[{i}] = {g}, reference {}",
                want[i]
            );
        }
        high = high.max(need(*n, *k));
        assert_eq!(
            scratch.bytes(),
            high,
            "step {step}: the largest layer's so far"
        );
    }
    // One token at a time, only the tables' codes are on the device (3 n k / 8 bytes of
    // 12-bit codes); a forward or a reserve of more tokens uploads the direct kernel's.
    for (li, (w, gpu, n, k)) in layers.iter().enumerate() {
        let tables = 3 * n * k / 8;
        assert_eq!(gpu.code_bytes_on_device(), tables, "{n}x{k}");
        let m = 3 + li;
        if li == 1 {
            gpu.reserve(m).unwrap();
            assert!(gpu.code_bytes_on_device() > tables, "{n}x{k}: reserve({m})");
        }
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
        let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
        gpu.forward_into(&xd, m, &mut y, false).unwrap();
        assert!(
            gpu.code_bytes_on_device() > tables,
            "{n}x{k}: forward of {m}"
        );
        let want = reference(w, &x, m);
        let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
        for (i, g) in y.to_host().unwrap().iter().enumerate() {
            let g = g.to_f64();
            let err = (g - want[i]).abs() / want[i].abs().max(rms);
            assert!(
                g.is_finite() && err < 1e-2,
                "{n}x{k}, m = {m}, seed {seed:#x}: y[{i}] = {g}, reference {}",
                want[i]
            );
        }
    }
    let gptvq = VqWeight::random(VqConfig::GPTVQ_2, 256, 256, rng.random(), true).unwrap();
    let gptvq = VqLinear::new(gptvq).unwrap().to_gpu(&ctx).unwrap();
    assert!(
        gptvq.code_bytes_on_device() > 0,
        "no table path: the direct codes at once"
    );
    let gptvq = gptvq.with_lut_scratch(&scratch).unwrap();
    assert!(gptvq.lut_scratch_handle().is_none());
    let other = Context::builder(0)
        .own_stream(true)
        .no_disk_cache()
        .build()
        .unwrap();
    let foreign = VqLutScratch::new(&other);
    let (_, gpu, _, _) = layers.pop().unwrap();
    let e = gpu.with_lut_scratch(&foreign).err().unwrap().to_string();
    assert!(
        e.contains("`scratch`") && e.contains("another context"),
        "{e}"
    );
}

/// `tune` (the direct kernel's knobs, `tilus::kernels::vq::tune`) on small GPTVQ-2 and AQLM-2x8
/// layers at 3 and 16 tokens: every candidate point is measured or fails with a reason, the
/// winner is the fastest measured point, the tuned layer carries its knobs and matches the f64
/// reference (output poisoned), and a second call finds the winner remembered; m = 0 and
/// m > 2^20 are refused naming `m` before anything is allocated.
#[test]
fn gpu_vq_tune_picks_the_fastest_point_and_matches_reference() {
    use tilus::kernels::vq::tune::{candidates, tune};
    let Some(ctx) = common::gpu_context(
        "gpu_vq_tune_picks_the_fastest_point_and_matches_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x7e_0018);
    for (config, n, k) in [
        (VqConfig::GPTVQ_2, 512, 1024),
        (VqConfig::AQLM_2X8, 512, 1024),
    ] {
        let w = VqWeight::random(config, n, k, rng.random(), true).unwrap();
        let layer = VqLinear::new(w.clone()).unwrap();
        for m in [3, 16] {
            let points = candidates(&layer, m);
            assert!(points.len() > 4, "{}: {points:?}", config.name);
            let (tuned, best, outcome) = tune(&ctx, &layer, m).unwrap();
            let tag = format!("{} {n}x{k} m={m} tuned {best}", config.name);
            assert_eq!(points[outcome.index], best, "{tag}");
            common::fresh_fastest(&outcome, None, &tag);
            let cfg = tuned.config(m);
            assert_eq!(
                (
                    tuned.cache().replicas,
                    tuned.warps(),
                    tuned.stages(),
                    cfg.SPLIT as usize,
                    cfg.TR as usize
                ),
                (
                    best.replicas,
                    best.warps,
                    best.stages,
                    best.split,
                    best.product
                ),
                "{tag}"
            );
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let want = reference(&w, &x, m);
            let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
            let gpu = tuned.to_gpu(&ctx).unwrap();
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_into(&xd, m, &mut y, false).unwrap();
            for (i, g) in y.to_host().unwrap().iter().enumerate() {
                let err = (g.to_f64() - want[i]).abs() / want[i].abs().max(rms);
                assert!(err < 1e-2, "{tag}: y[{i}] = {g}, reference {}", want[i]);
            }
            let (_, again, second) = tune(&ctx, &layer, m).unwrap();
            assert!(second.reused(), "{tag}: not remembered");
            assert_eq!(again, best, "{tag}");
        }
        for m in [0, (1 << 20) + 1] {
            let e = match tune(&ctx, &layer, m) {
                Ok(_) => panic!("{}: m = {m} tuned", config.name),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("`m`"), "{}: m = {m}: {e}", config.name);
        }
    }
}
