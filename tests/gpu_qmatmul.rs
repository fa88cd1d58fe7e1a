//! The quantized matmul on the GPU against the f64 reference, for every weight type.
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns the
//! skip into a failure. Fresh random weights and activations each run; outputs are poisoned with
//! NaN before every launch, so an element the kernel never writes cannot pass.

mod common;

use half::{bf16, f16};
use rand::Rng;
use std::sync::Arc;
use tilus::element::Activation;
use tilus::kernels::qmatmul::{
    build, prepare, weight_types, DeviceWeight, GpuQMatmul, QMatmulConfig, QMatmulMethod,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::runtime::{Context, DeviceBuffer};
use tilus::DType;

fn context(test: &str) -> Option<Arc<Context>> {
    common::gpu_context(test, Context::builder(0))
}

/// One GPU run of `cfg` at `m x n x k` against `A · dequant(W)` in f64; returns the relative
/// error `||out - ref|| / ||ref||`.
fn run_case<T: Activation>(
    ctx: &Context,
    cfg: &QMatmulConfig,
    m: usize,
    n: usize,
    k: usize,
    group: Group,
) -> f64 {
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let q =
        QuantizedWeight::quantize(&w, k, n, cfg.wdtype, group, cfg.adtype, cfg.has_zeros).unwrap();
    let a: Vec<T> = (0..m * k)
        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let kernel = build(cfg).unwrap();
    let gpu = GpuQMatmul::new(&kernel).unwrap();
    gpu.reserve(ctx, m, n).unwrap();
    let weight = DeviceWeight::<T>::upload(ctx, &prepare(&q, cfg).unwrap()).unwrap();
    let a_dev = DeviceBuffer::from_host(ctx, &a).unwrap();
    let mut c_dev = DeviceBuffer::from_host(ctx, &vec![T::from_f32(f32::NAN); m * n]).unwrap();
    gpu.run(ctx, m, &a_dev, &weight, &mut c_dev).unwrap();
    let c = c_dev.to_host().unwrap();

    let deq = q.dequantize();
    let (mut err, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|kk| a[i * k + kk].to_f32() as f64 * deq[kk * n + j])
                .sum();
            let out = c[i * n + j].to_f32() as f64;
            assert!(
                out.is_finite(),
                "{}: c[{i}, {j}] = {out} (unwritten or overflow)",
                cfg.wdtype
            );
            err += (out - r).powi(2);
            norm += r * r;
        }
    }
    (err / norm).sqrt()
}

#[test]
fn every_weight_type_matches_the_reference() {
    let Some(ctx) = context("every_weight_type_matches_the_reference") else {
        return;
    };
    let (n, k) = (512, 512);
    for wdtype in weight_types() {
        let name = wdtype.to_string();
        // quantize() gives unsigned weights zero points (the midpoint), so the kernel needs them.
        let zeros = matches!(wdtype, DType::UInt(_));
        let cfg = QMatmulConfig::for_shape(wdtype, DType::F16, Some(128), zeros, n, k).unwrap();
        for m in [1, 17] {
            let rel = run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(128));
            println!("{name:>7} m={m:<3} rel err {rel:.2e}");
            assert!(rel < 1e-2, "{name} m={m}: relative error {rel}");
        }
    }
}

/// The gemv method (the weight as the mma's A operand, 8 rows per block) for every weight type:
/// m = 1, 5, 8 and 9 (a second row block), f16 and bf16, groups of one k tile and per-channel
/// scales, with and without split-k, several n tiles.
#[test]
fn gemv_every_weight_type_matches_the_reference() {
    let Some(ctx) = context("gemv_every_weight_type_matches_the_reference") else {
        return;
    };
    let (n, k) = (512, 1024);
    for (i, wdtype) in weight_types().into_iter().enumerate() {
        let zeros = matches!(wdtype, DType::UInt(_));
        let adtype = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        let (rows, group) = if i % 3 == 2 {
            (None, Group::PerChannel)
        } else {
            (Some(128), Group::Rows(128))
        };
        let cfg = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            bn: 256,
            bk: 128,
            stages: 3 + i % 2,
            split_k: [1, 2, 4][i % 3],
            ..QMatmulConfig::for_shape(wdtype, adtype, rows, zeros, n, k).unwrap()
        };
        for m in [1, 5, 8, 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, group),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, group),
            };
            println!(
                "gemv {wdtype:>7} {adtype} {group:?} split {} m={m}: rel err {rel:.2e}",
                cfg.split_k
            );
            assert!(
                rel < 1e-2,
                "gemv {wdtype} {adtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The look-up method (`Lut`, one token per block): every integer weight type, groups of 32
/// to 256 rows, 4, 8 and 16 warps, one to four rows per lane set, f16 and bf16, split-k, one
/// and several tokens (a block each), several block columns.
#[test]
fn lut_matches_the_reference() {
    let Some(ctx) = context("lut_matches_the_reference") else {
        return;
    };
    let types = [
        "u1", "u2", "i2", "u3", "i3", "u4", "i4", "u5", "i6", "u8", "i8",
    ];
    let groups = [128, 64, 256, 32];
    for (i, name) in types.into_iter().enumerate() {
        let wdtype: DType = name.parse().unwrap();
        let adtype = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        let planes = wdtype.bits() as usize;
        let group = if groups[i % 4] / 8 * planes > 128 {
            128
        } else {
            groups[i % 4]
        };
        let warps = [8, 4, 16][i % 3];
        let rows = (128 / (group / 8 * planes)).clamp(1, 1 + i % 4);
        let bn = warps * group / 8 * rows;
        // Two blocks to a multiprocessor: ptxas caps the registers at 128 (8 warps) or 256
        // (4 warps); 16 warps stay one block.
        let blocks_per_sm = if warps <= 8 { 1 + i / 3 % 2 } else { 1 };
        let zeros = matches!(wdtype, DType::UInt(_));
        let cfg = QMatmulConfig::default_for(wdtype, adtype, Some(group), zeros).lut(
            bn,
            warps,
            [1, 2, 4][i % 3],
            blocks_per_sm,
        );
        let (n, k) = (2 * bn, 2048);
        for m in [1, 3] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, Group::Rows(group)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(group)),
            };
            println!(
                "lut {wdtype:>3} {adtype} g{group} w{warps} x{} bn{bn} split {} m={m}: rel err {rel:.2e}",
                cfg.blocks_per_sm,
                cfg.split_k
            );
            assert!(
                rel < 1e-2,
                "lut {wdtype} {adtype} m={m}: relative error {rel}"
            );
        }
    }
    // The tuner's tilings, two 8-warp blocks to a multiprocessor: 7 rows per lane set, and
    // the split-k sum written out (14 partials) or unrolled by `#pragma` (20).
    for (name, bn, split, n, k) in [
        ("u1", 896, 4, 1792, 4096),
        ("u2", 512, 14, 1024, 7168),
        ("u1", 1024, 20, 1024, 10240),
    ] {
        let wdtype: DType = name.parse().unwrap();
        let cfg =
            QMatmulConfig::default_for(wdtype, DType::F16, Some(128), true).lut(bn, 8, split, 2);
        let rel = run_case::<f16>(&ctx, &cfg, 1, n, k, Group::Rows(128));
        println!("lut {name} bn{bn} split {split} x2 {n} x {k}: rel err {rel:.2e}");
        assert!(
            rel < 1e-2,
            "lut {name} bn{bn} split {split}: relative error {rel}"
        );
    }
}

/// The integer-mma gemv (`QMatmulMethod::GemvImma`) on the GPU: 1- to 5-bit codes (and
/// f3e1m1's, read as i3), zero points and signed offsets, groups of one and two k tiles and of
/// a tile's fields, split k, f16 and bf16, one and three tokens, against the f64 reference
/// with the output poisoned, within the output type's own rounding.
#[test]
fn gemv_imma_matches_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let Some(ctx) = context("gemv_imma_matches_the_reference") else {
        return;
    };
    // (weight, activations, group, bk, bn, warps, stages, split, k, blocks a multiprocessor)
    let cases = [
        ("u2", "f16", 128, 128, 256, 4, 4, 4, 8192, 1),
        ("i2", "bf16", 256, 128, 256, 4, 3, 2, 4096, 1),
        ("u4", "f16", 128, 64, 128, 4, 4, 4, 8192, 1),
        ("i4", "bf16", 128, 128, 128, 8, 2, 1, 2048, 1),
        ("u1", "f16", 256, 256, 256, 4, 3, 2, 4096, 1),
        // Warps of seven 16-column fragments, the tuner's 256-block tilings of 57344 x 8192.
        ("u2", "f16", 128, 128, 896, 8, 3, 4, 8192, 2),
        // The tuner's first: two k slices, one block a multiprocessor, a 4-stage ring.
        ("i2", "bf16", 128, 128, 896, 8, 4, 2, 8192, 1),
        ("i4", "bf16", 128, 64, 448, 4, 4, 2, 8192, 1),
        // 3 bits in two planes, in the tuner's first tilings.
        ("u3", "f16", 128, 128, 512, 8, 4, 2, 8192, 1),
        ("i3", "bf16", 128, 128, 896, 8, 2, 4, 8192, 2),
        ("i3", "f16", 256, 128, 256, 4, 4, 8, 8192, 1),
        // 5 bits in two planes.
        ("u5", "bf16", 128, 64, 896, 8, 2, 4, 8192, 2),
        ("i5", "f16", 128, 64, 512, 8, 4, 8, 8192, 1),
        // f3e1m1 read as i3.
        ("f3e1m1", "f16", 128, 128, 896, 8, 2, 4, 8192, 2),
        ("f3e1m1", "bf16", 128, 128, 512, 8, 5, 8, 8192, 1),
        // Groups shorter than a tile (runs of a byte's fields): 1 bit in groups of 128 (two a
        // tile, the tuner's first tiling) and 32 (one field), 2 and 4 bits in groups of 64
        // and 32.
        ("u1", "f16", 128, 256, 896, 8, 4, 2, 8192, 1),
        ("u1", "bf16", 32, 256, 256, 4, 3, 8, 8192, 1),
        ("u2", "f16", 64, 128, 512, 8, 4, 2, 8192, 1),
        ("i2", "f16", 32, 128, 256, 4, 4, 8, 8192, 1),
        ("i4", "bf16", 32, 64, 448, 4, 4, 2, 8192, 1),
    ];
    for (name, ad, group, bk, bn, warps, stages, split, k, occupancy) in cases {
        let wdtype: DType = name.parse().unwrap();
        let adtype: DType = ad.parse().unwrap();
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            blocks_per_sm: occupancy,
            ..QMatmulConfig::default_for(
                wdtype,
                adtype,
                Some(group),
                matches!(wdtype, DType::UInt(_)),
            )
        };
        for m in [1, 3] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
                _ => run_case::<f16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
            };
            println!("gemv_imma {name:>3} {adtype} g{group} bk{bk} bn{bn} split {split} m={m}: rel err {rel:.2e}");
            let tol = if adtype == DType::F16 { 5e-4 } else { 4e-3 };
            assert!(
                rel < tol,
                "gemv_imma {name} {adtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The integer-mma gemv with several tokens a block (`bm` 4 to 32, the activations split into
/// two s8 digits by a pre-pass): 2- and 4-bit codes, zero points and signed offsets, groups of
/// tiles and of a tile's fields, split k, f16 and bf16, ragged m (one token, a partial block, several blocks), against the f64
/// reference with the output poisoned, within the output type's own rounding.
#[test]
fn gemv_imma_tokens_match_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let Some(ctx) = context("gemv_imma_tokens_match_the_reference") else {
        return;
    };
    // (weight, activations, group, bk, bn, warps, stages, split, k, tokens a block)
    let cases = [
        ("u2", "f16", 128, 128, 512, 8, 4, 2, 8192, 16),
        ("i2", "bf16", 128, 128, 256, 4, 4, 4, 4096, 8),
        ("u4", "f16", 128, 64, 256, 8, 4, 1, 2048, 32),
        ("i4", "bf16", 256, 64, 512, 8, 3, 2, 4096, 16),
        ("i4", "f16", 128, 64, 448, 4, 4, 2, 8192, 16),
        // Groups shorter than a tile (runs of a byte's fields).
        ("u2", "f16", 64, 128, 512, 8, 4, 2, 8192, 4),
        ("i2", "bf16", 32, 128, 256, 4, 4, 4, 4096, 8),
        ("i4", "f16", 32, 64, 448, 4, 4, 2, 8192, 4),
    ];
    for (name, ad, group, bk, bn, warps, stages, split, k, bm) in cases {
        let wdtype: DType = name.parse().unwrap();
        let adtype: DType = ad.parse().unwrap();
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            ..QMatmulConfig::default_for(
                wdtype,
                adtype,
                Some(group),
                matches!(wdtype, DType::UInt(_)),
            )
        };
        for m in [1, bm - 1, 2 * bm + 1, 33] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
                _ => run_case::<f16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
            };
            println!("gemv_imma bm{bm} {name:>3} {adtype} g{group} bn{bn} split {split} m={m}: rel err {rel:.2e}");
            let tol = if adtype == DType::F16 { 5e-4 } else { 4e-3 };
            assert!(
                rel < tol,
                "gemv_imma bm{bm} {name} {adtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The integer warpgroup gemv (`QMatmulMethod::GemvIgmma`, sm_90a): the pre-pass's digits on
/// `wgmma .s32.u8.s8` with the weight as register A, 2- and 4-bit codes, zero points and signed
/// offsets, 8 to 64 tokens a block, one and two warpgroups, fields of 32 to 128 rows, groups of
/// one and two tiles, split k, f16 and bf16, ragged m, against the f64 reference with the
/// output poisoned.
#[test]
fn gemv_igmma_matches_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let Some(ctx) = context("gemv_igmma_matches_the_reference") else {
        return;
    };
    if !ctx.arch().starts_with("sm_90") {
        println!("skipped: the integer warpgroup gemv needs sm_90a");
        return;
    }
    // (weight, activations, group, bk, bn, warps, stages, split, k, tokens a block)
    let cases = [
        ("u2", "f16", 128, 128, 128, 8, 4, 1, 8192, 64),
        ("i2", "bf16", 256, 128, 256, 8, 3, 2, 4096, 32),
        ("u4", "f16", 128, 128, 128, 4, 4, 4, 8192, 16),
        ("i4", "bf16", 256, 256, 64, 4, 3, 1, 2304, 8),
        ("u2", "bf16", 256, 256, 512, 8, 4, 2, 4096, 16),
        ("i4", "f16", 128, 128, 128, 8, 5, 1, 1152, 64),
    ];
    for (name, ad, group, bk, bn, warps, stages, split, k, bm) in cases {
        let wdtype: DType = name.parse().unwrap();
        let adtype: DType = ad.parse().unwrap();
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvIgmma,
            bm,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            ..QMatmulConfig::default_for(
                wdtype,
                adtype,
                Some(group),
                matches!(wdtype, DType::UInt(_)),
            )
        };
        for m in [1, bm - 1, 2 * bm + 1, 33] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
                _ => run_case::<f16>(&ctx, &cfg, m, 2 * bn, k, Group::Rows(group)),
            };
            println!("gemv_igmma bm{bm} {name:>3} {adtype} g{group} bk{bk} bn{bn} w{warps} split {split} k={k} m={m}: rel err {rel:.2e}");
            let tol = if adtype == DType::F16 { 5e-4 } else { 4e-3 };
            assert!(
                rel < tol,
                "gemv_igmma bm{bm} {name} {adtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The gemv method with several token tiles per block (`bm` 16, 32 and 64), as the tuner
/// tries it for 9 to 64 rows: every weight type, ragged m (a partial tile, whole blocks, a
/// second row block), f16 and bf16, grouped and per-channel scales, split-k.
#[test]
fn gemv_token_tiles_match_the_reference() {
    let Some(ctx) = context("gemv_token_tiles_match_the_reference") else {
        return;
    };
    let (n, k) = (512, 1024);
    for (i, wdtype) in weight_types().into_iter().enumerate() {
        let zeros = matches!(wdtype, DType::UInt(_));
        let adtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        let (rows, group) = if i % 4 == 3 {
            (None, Group::PerChannel)
        } else {
            (Some(128), Group::Rows(128))
        };
        let bm = [16, 32, 64][i % 3];
        let cfg = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm,
            // bm = 64 holds 8 token tiles of accumulators: one weight fragment per warp.
            bn: if bm == 64 { 64 } else { 128 },
            bk: 128,
            stages: 3 + i % 2,
            split_k: [1, 2, 4, 1][i % 4],
            ..QMatmulConfig::for_shape(wdtype, adtype, rows, zeros, n, k).unwrap()
        };
        for m in [3, bm, bm + 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, group),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, group),
            };
            println!(
                "gemv bm{bm} {wdtype:>7} {adtype} {group:?} split {} m={m}: rel err {rel:.2e}",
                cfg.split_k
            );
            assert!(
                rel < 1e-2,
                "gemv bm{bm} {wdtype} {adtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The warpgroup gemv (`GemvWgmma`, sm_90a only): every weight type, 8 to 64 tokens per block,
/// ragged m, f16 and bf16, grouped and per-channel scales, one and two warpgroups of one, two
/// or four 64-column tiles each, split-k; the copy engine's ring (up to 256 columns) and the
/// cp.async one (512).
#[test]
fn gemv_wgmma_matches_the_reference() {
    let Some(ctx) = context("gemv_wgmma_matches_the_reference") else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        println!(
            "skipped: the warpgroup MMA needs sm_90a, this device is {}",
            ctx.arch()
        );
        return;
    }
    let (n, k) = (512, 1024);
    for (i, wdtype) in weight_types().into_iter().enumerate() {
        let zeros = matches!(wdtype, DType::UInt(_));
        let adtype = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        let (rows, group) = if i % 4 == 3 {
            (None, Group::PerChannel)
        } else {
            (Some(128), Group::Rows(128))
        };
        let bm = [8, 16, 32, 64][i % 4];
        let warps = if i % 3 == 1 { 8 } else { 4 };
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            // 64 output columns per warpgroup tile: 1, 2 or 4 tiles per warpgroup (256 columns
            // at most, so that 8-bit weights fit the stages in shared memory).
            bn: 64 * [4, 2][(i / 4) % 2].max(warps / 4),
            bk: 64,
            warps,
            stages: 4 + i % 3,
            split_k: [1, 2, 4][i % 3],
            ..QMatmulConfig::for_shape(wdtype, adtype, rows, zeros, n, k).unwrap()
        };
        for m in [1, bm, bm + 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, group),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, group),
            };
            println!(
                "gemv-wgmma bm{bm} w{warps} {wdtype:>7} {adtype} {group:?} split {} m={m}: rel err {rel:.2e}",
                cfg.split_k
            );
            assert!(
                rel < 1e-2,
                "gemv-wgmma bm{bm} {wdtype} {adtype} m={m}: relative error {rel}"
            );
        }
    }
    // Tall token tiles (prefill): 128 and 256 rows per block, several blocks along m, the
    // last one ragged; every third weight type.
    for (i, wdtype) in weight_types().into_iter().enumerate().step_by(3) {
        let zeros = matches!(wdtype, DType::UInt(_));
        let adtype = if i % 2 == 0 { DType::BF16 } else { DType::F16 };
        let bm = [128, 256][i % 2];
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn: 128,
            bk: 64,
            warps: 8,
            stages: 4,
            split_k: 1 + i % 2,
            ..QMatmulConfig::for_shape(wdtype, adtype, Some(128), zeros, n, k).unwrap()
        };
        for m in [bm - 3, 2 * bm + 37] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
            };
            println!(
                "gemv-wgmma tall bm{bm} {wdtype:>7} {adtype} split {} m={m}: rel err {rel:.2e}",
                cfg.split_k
            );
            assert!(
                rel < 1e-2,
                "gemv-wgmma bm{bm} {wdtype} {adtype} m={m}: relative error {rel}"
            );
        }
    }
    // Row blocks in bands (about 16 MB of activations each): at k = 8192 a band holds 4 blocks
    // of 256 rows, so 1317 rows make a band of 4 and a ragged one of 2.
    let cfg = QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm: 256,
        bn: 128,
        bk: 64,
        warps: 8,
        stages: 5,
        ..QMatmulConfig::for_shape(DType::Int(4), DType::F16, Some(128), false, 256, 8192).unwrap()
    };
    let rel = run_case::<f16>(&ctx, &cfg, 1317, 256, 8192, Group::Rows(128));
    println!("gemv-wgmma bands bm256 i4 f16 m=1317 k=8192: rel err {rel:.2e}");
    assert!(rel < 1e-2, "gemv-wgmma bands: relative error {rel}");
    // Tiles of up to 256 columns are filled by the copy engine; wider ones by cp.async.
    for (wdtype, adtype) in [(DType::UInt(2), DType::F16), (DType::Int(4), DType::BF16)] {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm: 16,
            bn: 512,
            bk: 64,
            warps: 8,
            stages: 4,
            ..QMatmulConfig::for_shape(
                wdtype,
                adtype,
                Some(128),
                matches!(wdtype, DType::UInt(_)),
                n,
                k,
            )
            .unwrap()
        };
        for m in [1, 25] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
            };
            println!("gemv-wgmma cp.async bn512 {wdtype} {adtype} m={m}: rel err {rel:.2e}");
            assert!(
                rel < 1e-2,
                "gemv-wgmma bn512 {wdtype} m={m}: relative error {rel}"
            );
        }
    }
    // Warp-specialized (a producer warpgroup fills the ring): one and two consumer
    // warpgroups, one and two blocks a multiprocessor, odd and even k tiles.
    for (wdtype, adtype, bm, bn, warps, occupancy, stages, kk) in [
        (DType::UInt(2), DType::F16, 32, 256, 8, 2, 4, k),
        (DType::Int(4), DType::BF16, 64, 256, 8, 1, 8, k),
        (DType::UInt(4), DType::F16, 16, 128, 4, 2, 3, k - 64),
        (DType::Int(8), DType::BF16, 64, 128, 4, 1, 5, k),
    ] {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            stages,
            blocks_per_sm: occupancy,
            specialize: true,
            ..QMatmulConfig::for_shape(
                wdtype,
                adtype,
                Some(64),
                matches!(wdtype, DType::UInt(_)),
                n,
                kk,
            )
            .unwrap()
        };
        for m in [1, bm, bm + 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, kk, Group::Rows(64)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, kk, Group::Rows(64)),
            };
            println!(
                "gemv-wgmma ws bm{bm} bn{bn} w{warps} o{occupancy} {wdtype} {adtype} k={kk} m={m}: rel err {rel:.2e}"
            );
            assert!(
                rel < 1e-2,
                "gemv-wgmma ws {wdtype} m={m}: relative error {rel}"
            );
        }
    }
    // Stream-k: workers sharing the iterations unevenly (shares end inside column tiles).
    for (wdtype, adtype, bm, bn, warps, stream_k) in [
        (DType::UInt(2), DType::F16, 16, 128, 4, 7),
        (DType::Int(4), DType::BF16, 32, 256, 8, 5),
        // Tall tiles, more workers than k tiles per column tile.
        (DType::Int(4), DType::F16, 256, 128, 8, 11),
        (DType::UInt(4), DType::BF16, 128, 128, 8, 24),
    ] {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            stages: 5,
            stream_k,
            ..QMatmulConfig::for_shape(
                wdtype,
                adtype,
                Some(128),
                matches!(wdtype, DType::UInt(_)),
                n,
                k,
            )
            .unwrap()
        };
        for m in [1, bm + 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
            };
            println!("gemv-wgmma stream {stream_k} {wdtype} {adtype} m={m}: rel err {rel:.2e}");
            assert!(
                rel < 1e-2,
                "gemv-wgmma stream {wdtype} m={m}: relative error {rel}"
            );
        }
    }
}

/// The warpgroup gemv with two k tiles a ring stage (`stage_tiles = 2`, on stream-k workers
/// whose shares end inside column tiles) and with several plain (not specialized) blocks a
/// multiprocessor (stream-k, split-k, per-channel scales): groups of 64, 128 and 256 rows,
/// zero points, 1 to 8 bits, odd stage counts of k, ragged m.
#[test]
fn gemv_wgmma_two_tiles_a_stage_match_the_reference() {
    let Some(ctx) = context("gemv_wgmma_two_tiles_a_stage_match_the_reference") else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        println!(
            "skipped: the warpgroup MMA needs sm_90a, this device is {}",
            ctx.arch()
        );
        return;
    }
    let n = 512;
    // (weight, activation, group rows, bm, bn, warps, stages, split, stream-k, blocks/SM,
    //  tiles a stage, k)
    let cases = [
        (
            DType::Int(4),
            DType::F16,
            Some(128),
            32,
            256,
            8,
            4,
            1,
            6,
            1,
            2,
            1024,
        ),
        (
            DType::UInt(2),
            DType::BF16,
            Some(128),
            64,
            256,
            8,
            3,
            1,
            3,
            1,
            2,
            1024,
        ),
        (
            DType::UInt(1),
            DType::F16,
            Some(256),
            16,
            128,
            4,
            3,
            1,
            9,
            2,
            2,
            1280,
        ),
        (
            DType::Int(8),
            DType::BF16,
            Some(128),
            32,
            128,
            8,
            3,
            1,
            4,
            1,
            2,
            896,
        ),
        (
            DType::UInt(4),
            DType::F16,
            Some(128),
            32,
            256,
            8,
            4,
            1,
            7,
            2,
            2,
            1024,
        ),
        (
            DType::Int(3),
            DType::BF16,
            Some(128),
            64,
            128,
            4,
            3,
            1,
            5,
            3,
            2,
            1152,
        ),
        (
            DType::Int(4),
            DType::F16,
            Some(128),
            128,
            128,
            8,
            3,
            1,
            11,
            1,
            2,
            1024,
        ),
        (
            DType::UInt(2),
            DType::F16,
            Some(128),
            16,
            256,
            8,
            3,
            1,
            13,
            1,
            2,
            1024,
        ),
        // The tall tile the tuner tries second from 65 tokens (session 68): 128 x 128, two
        // stream-k workers a multiprocessor.
        (
            DType::UInt(4),
            DType::BF16,
            Some(128),
            128,
            128,
            8,
            5,
            1,
            11,
            2,
            1,
            1024,
        ),
        // One tile a stage, plain blocks sharing a multiprocessor.
        (
            DType::Int(4),
            DType::BF16,
            Some(128),
            64,
            128,
            4,
            3,
            1,
            9,
            3,
            1,
            1024,
        ),
        (
            DType::UInt(2),
            DType::F16,
            Some(64),
            32,
            128,
            4,
            6,
            2,
            0,
            4,
            1,
            1024,
        ),
        (
            DType::UInt(3),
            DType::BF16,
            None,
            32,
            128,
            4,
            4,
            2,
            0,
            2,
            1,
            1024,
        ),
    ];
    for (wdtype, adtype, rows, bm, bn, warps, stages, split_k, stream_k, occupancy, tiles, k) in
        cases
    {
        let group = rows.map_or(Group::PerChannel, Group::Rows);
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            stages,
            split_k,
            stream_k,
            blocks_per_sm: occupancy,
            stage_tiles: tiles,
            ..QMatmulConfig::for_shape(wdtype, adtype, rows, matches!(wdtype, DType::UInt(_)), n, k)
                .unwrap()
        };
        for m in [1, bm, bm + 9] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, group),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, group),
            };
            println!(
                "gemv-wgmma kt{tiles} bm{bm} bn{bn} w{warps} o{occupancy} split {split_k} stream {stream_k} {wdtype} {adtype} {group:?} k={k} m={m}: rel err {rel:.2e}"
            );
            assert!(
                rel < 1e-2,
                "gemv-wgmma kt{tiles} {wdtype} {adtype} k={k} m={m}: relative error {rel}"
            );
        }
    }
    // The tuner's first three candidates at 16, 32 and 64 tokens (two tiles a stage lead
    // from 9 rows up), at the bucket's size and 7 rows less.
    for wdtype in [DType::Int(4), DType::UInt(2)] {
        for m in [16, 32, 64] {
            let zeros = matches!(wdtype, DType::UInt(_));
            for cfg in tilus::kernels::qmatmul::tune::candidates_up_to(
                wdtype,
                DType::F16,
                Some(128),
                m,
                n,
                1024,
                3,
            )
            .unwrap()
            {
                assert_eq!(cfg.has_zeros, zeros);
                for rows in [m, m - 7] {
                    let rel = run_case::<f16>(&ctx, &cfg, rows, n, 1024, Group::Rows(128));
                    println!("tuned {wdtype} {cfg:?} m={rows}: rel err {rel:.2e}");
                    assert!(rel < 1e-2, "tuned {wdtype} m={rows} {cfg:?}: {rel}");
                }
            }
        }
    }
}

#[test]
fn bf16_zero_points_split_k_and_ragged_m() {
    let Some(ctx) = context("bf16_zero_points_split_k_and_ragged_m") else {
        return;
    };
    let (n, k) = (512, 1024);
    for (name, adtype, zeros, split_k, group) in [
        ("u4", DType::BF16, true, 1, Group::Rows(128)),
        ("i4", DType::F16, false, 4, Group::Rows(128)),
        ("u4", DType::F16, true, 2, Group::Rows(32)),
        ("i8", DType::F16, false, 1, Group::PerChannel),
        // Per-channel zero points, folded into the accumulator, with split-k.
        ("u2", DType::BF16, true, 2, Group::PerChannel),
        ("f6e3m2", DType::BF16, false, 2, Group::Rows(64)),
    ] {
        let wdtype: DType = name.parse().unwrap();
        let rows = match group {
            Group::Rows(r) => Some(r),
            Group::PerChannel => None,
        };
        let mut cfg = QMatmulConfig::for_shape(wdtype, adtype, rows, zeros, n, k).unwrap();
        cfg.split_k = split_k;
        for m in [3, 33, 100] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, group),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, group),
            };
            println!("{name} {adtype} zeros={zeros} split_k={split_k} {group:?} m={m}: {rel:.2e}");
            assert!(rel < 1e-2, "{name} {adtype} m={m}: relative error {rel}");
        }
    }
}

/// The decode tiles the tuner tries (wide and long tiles, 8 warps, split-k over whole scale
/// groups) and the prefill method (dequantize, then cuBLAS), on f16 and bf16.
#[test]
fn tuned_tiles_and_dequantize_then_gemm() {
    let Some(ctx) = context("tuned_tiles_and_dequantize_then_gemm") else {
        return;
    };
    let (n, k) = (1024, 1024);
    for (name, adtype, method, bn_wide, bk, warps, split_k) in [
        ("i4", DType::F16, QMatmulMethod::Fused, 4, 128, 8, 2),
        ("u2", DType::BF16, QMatmulMethod::Fused, 2, 128, 4, 4),
        ("i8", DType::F16, QMatmulMethod::Fused, 2, 64, 8, 1),
        (
            "i4",
            DType::F16,
            QMatmulMethod::DequantizeThenGemm,
            1,
            64,
            4,
            1,
        ),
        (
            "u3",
            DType::BF16,
            QMatmulMethod::DequantizeThenGemm,
            1,
            64,
            4,
            1,
        ),
        (
            "f6e3m2",
            DType::F16,
            QMatmulMethod::DequantizeThenGemm,
            1,
            64,
            4,
            1,
        ),
    ] {
        let wdtype: DType = name.parse().unwrap();
        let zeros = matches!(wdtype, DType::UInt(_));
        let base = QMatmulConfig::default_for(wdtype, adtype, Some(128), zeros);
        let cfg = QMatmulConfig {
            bn: base.bn * bn_wide,
            bk,
            warps,
            split_k,
            method,
            ..base
        };
        for m in [1, 17, 130] {
            let rel = match adtype {
                DType::BF16 => run_case::<bf16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
                _ => run_case::<f16>(&ctx, &cfg, m, n, k, Group::Rows(128)),
            };
            println!("{name} {adtype} {cfg:?} m={m}: {rel:.2e}");
            assert!(rel < 1e-2, "{name} {method:?} m={m}: relative error {rel}");
        }
    }
}

#[test]
fn bad_launch_arguments_are_named() {
    let Some(ctx) = context("bad_launch_arguments_are_named") else {
        return;
    };
    let (m, n, k) = (4, 256, 512);
    let cfg = QMatmulConfig::for_shape(DType::Int(4), DType::F16, Some(128), false, n, k).unwrap();
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let q = QuantizedWeight::quantize(&w, k, n, cfg.wdtype, Group::Rows(128), DType::F16, false)
        .unwrap();
    let gpu = GpuQMatmul::new(&build(&cfg).unwrap()).unwrap();
    let weight = DeviceWeight::<f16>::upload(&ctx, &prepare(&q, &cfg).unwrap()).unwrap();
    let a = DeviceBuffer::<f16>::zeros(&ctx, m * k - 1).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n).unwrap();
    let err = gpu
        .run(&ctx, m, &a, &weight, &mut c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`a`"), "{err}");
    let a = DeviceBuffer::<f16>::zeros(&ctx, m * k).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, m * n + 1).unwrap();
    let err = gpu
        .run(&ctx, m, &a, &weight, &mut c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`c`"), "{err}");
    let mut c = DeviceBuffer::<bf16>::zeros(&ctx, m * n).unwrap();
    let a16 = DeviceBuffer::<bf16>::zeros(&ctx, m * k).unwrap();
    let wb = DeviceWeight::<bf16> {
        k,
        n,
        b: DeviceBuffer::zeros(&ctx, 1).unwrap(),
        scales: DeviceBuffer::zeros(&ctx, 1).unwrap(),
        zeros: None,
    };
    let err = gpu.run(&ctx, m, &a16, &wb, &mut c).unwrap_err().to_string();
    assert!(err.contains("`a`"), "{err}");
}

/// `||out - ref|| / ||ref||` of `c` (m x n, all finite) against `a · deq` in f64.
fn rel_error<T: Activation>(
    what: &str,
    a: &[T],
    deq: &[f64],
    c: &[T],
    m: usize,
    n: usize,
    k: usize,
) -> f64 {
    let (mut err, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|kk| a[i * k + kk].to_f32() as f64 * deq[kk * n + j])
                .sum();
            let out = c[i * n + j].to_f32() as f64;
            assert!(out.is_finite(), "{what}: c[{i}, {j}] = {out}");
            err += (out - r).powi(2);
            norm += r * r;
        }
    }
    (err / norm).sqrt()
}

/// Split-k in one launch (the last block of each output tile sums the partials, then resets
/// its semaphore): the fused and gemv programs, splits 2, 4 and 8, ragged `m` (1, 3, 9, 16
/// through one object reserved for 16 rows), each `m` launched twice back to back on the same
/// stream with different activations and no synchronization between (the second launch finds
/// the semaphores the first reset), then once more with the first activations: bit for bit the
/// first result, whichever blocks arrived last (the partials are summed in split order).
#[test]
fn single_launch_split_k_back_to_back_and_ragged_m() {
    let Some(ctx) = context("single_launch_split_k_back_to_back_and_ragged_m") else {
        return;
    };
    let (n, k) = (1024, 2048);
    let mut rng = rand::rng();
    let base = QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(128), false);
    let u4 = QMatmulConfig::default_for(DType::UInt(4), DType::F16, Some(128), true);
    let mut cases = Vec::new();
    for split_k in [2, 4, 8] {
        cases.push(QMatmulConfig {
            bk: 128,
            split_k,
            ..base
        });
        cases.push(QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            bn: 256,
            bk: 128,
            split_k,
            ..u4
        });
    }
    for cfg in cases {
        let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let q = QuantizedWeight::quantize(
            &w,
            k,
            n,
            cfg.wdtype,
            Group::Rows(128),
            cfg.adtype,
            cfg.has_zeros,
        )
        .unwrap();
        let deq = q.dequantize();
        let gpu = GpuQMatmul::new(&build(&cfg).unwrap()).unwrap();
        gpu.reserve(&ctx, 16, n).unwrap();
        assert_eq!(gpu.reserved_rows(), Some(16));
        let weight = DeviceWeight::<f16>::upload(&ctx, &prepare(&q, &cfg).unwrap()).unwrap();
        for m in [1, 3, 9, 16] {
            let what = format!("{:?} split {} m={m}", cfg.method, cfg.split_k);
            let mut acts = Vec::new();
            for _ in 0..2 {
                let a: Vec<f16> = (0..m * k)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                acts.push(a);
            }
            let dev: Vec<DeviceBuffer<f16>> = acts
                .iter()
                .map(|a| DeviceBuffer::from_host(&ctx, a).unwrap())
                .collect();
            let poison = vec![f16::NAN; m * n];
            let mut outs: Vec<DeviceBuffer<f16>> = (0..3)
                .map(|_| DeviceBuffer::from_host(&ctx, &poison).unwrap())
                .collect();
            // Three launches queued back to back, no host synchronization in between.
            for (i, c) in outs.iter_mut().enumerate() {
                gpu.run(&ctx, m, &dev[i % 2], &weight, c).unwrap();
            }
            let host: Vec<Vec<f16>> = outs.iter().map(|c| c.to_host().unwrap()).collect();
            for (i, c) in host.iter().take(2).enumerate() {
                let rel = rel_error(&what, &acts[i], &deq, c, m, n, k);
                println!("{what} launch {i}: rel err {rel:.2e}");
                assert!(rel < 1e-2, "{what} launch {i}: relative error {rel}");
            }
            let same = host[0]
                .iter()
                .zip(&host[2])
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{what}: the same input gave another result");
        }
    }
}

/// Persistent workers on the one-token integer-mma gemv (`stream_k` blocks claiming units of
/// a column tile and a chunk of k from a counter): 1-, 2- and 4-bit codes, groups of tiles and
/// within a tile, one and two blocks a multiprocessor, fewer workers than multiprocessors and
/// a grid of two a multiprocessor, two workers for 64 units. Each case runs three times back to back on one stream with
/// no synchronization (each launch finds the counters the one before reset), against the f64
/// reference with the outputs poisoned, and the third launch, on the first one's activations,
/// must give its bits again: the chunks of a column are added in chunk order whichever block
/// took them.
#[test]
fn gemv_imma_persistent_back_to_back_matches_the_reference() {
    let Some(ctx) = context("gemv_imma_persistent_back_to_back_matches_the_reference") else {
        return;
    };
    let mut rng = rand::rng();
    // (weight, activations, group, bk, bn, warps, stages, chunks, workers, a multiprocessor,
    // column tiles)
    let cases = [
        ("u2", "f16", 128, 128, 896, 8, 3, 8, 264, 2, 12),
        ("u1", "f16", 128, 256, 896, 8, 4, 4, 132, 1, 12),
        ("i4", "bf16", 128, 64, 512, 8, 3, 4, 264, 2, 16),
        ("i2", "f16", 64, 128, 256, 4, 4, 8, 264, 2, 24),
        ("u4", "bf16", 128, 64, 128, 4, 3, 2, 100, 1, 40),
        // 64 units for 2 workers: each counts its partials in batches of at most 32.
        ("u2", "f16", 128, 128, 128, 4, 3, 8, 2, 1, 8),
    ];
    let k = 4096;
    for (name, ad, group, bk, bn, warps, stages, chunks, workers, occupancy, tiles) in cases {
        let wdtype: DType = name.parse().unwrap();
        let adtype: DType = ad.parse().unwrap();
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk,
            warps,
            stages,
            split_k: chunks,
            stream_k: workers,
            blocks_per_sm: occupancy,
            ..QMatmulConfig::default_for(
                wdtype,
                adtype,
                Some(group),
                matches!(wdtype, DType::UInt(_)),
            )
        };
        let n = tiles * bn;
        let what = format!("{name} {ad} g{group} bn{bn} chunks {chunks} workers {workers}");
        let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let q = QuantizedWeight::quantize(
            &w,
            k,
            n,
            cfg.wdtype,
            Group::Rows(group),
            cfg.adtype,
            cfg.has_zeros,
        )
        .unwrap();
        let deq = q.dequantize();
        let gpu = GpuQMatmul::new(&build(&cfg).unwrap()).unwrap();
        gpu.reserve(&ctx, 1, n).unwrap();
        fn three<T: Activation>(
            ctx: &Context,
            gpu: &GpuQMatmul,
            q: &QuantizedWeight,
            cfg: &QMatmulConfig,
            deq: &[f64],
            what: &str,
        ) {
            let (k, n) = (q.k, q.n);
            let mut rng = rand::rng();
            let weight = DeviceWeight::<T>::upload(ctx, &prepare(q, cfg).unwrap()).unwrap();
            let acts: Vec<Vec<T>> = (0..2)
                .map(|_| {
                    (0..k)
                        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
                        .collect()
                })
                .collect();
            let dev: Vec<DeviceBuffer<T>> = acts
                .iter()
                .map(|a| DeviceBuffer::from_host(ctx, a).unwrap())
                .collect();
            let poison = vec![T::from_f32(f32::NAN); n];
            let mut outs: Vec<DeviceBuffer<T>> = (0..3)
                .map(|_| DeviceBuffer::from_host(ctx, &poison).unwrap())
                .collect();
            for (i, c) in outs.iter_mut().enumerate() {
                gpu.run(ctx, 1, &dev[i % 2], &weight, c).unwrap();
            }
            let host: Vec<Vec<T>> = outs.iter().map(|c| c.to_host().unwrap()).collect();
            let tol = if T::DTYPE == DType::F16 { 5e-4 } else { 4e-3 };
            for (i, c) in host.iter().take(2).enumerate() {
                let rel = rel_error(what, &acts[i], deq, c, 1, n, k);
                println!("persistent {what} launch {i}: rel err {rel:.2e}");
                assert!(rel < tol, "{what} launch {i}: relative error {rel}");
            }
            let same = host[0]
                .iter()
                .zip(&host[2])
                .all(|(x, y)| x.to_f32().to_bits() == y.to_f32().to_bits());
            assert!(same, "{what}: the same input gave another result");
        }
        match adtype {
            DType::BF16 => three::<bf16>(&ctx, &gpu, &q, &cfg, &deq, &what),
            _ => three::<f16>(&ctx, &gpu, &q, &cfg, &deq, &what),
        }
    }
}

/// A split-k run needs its buffers reserved first, for enough rows of the weight's columns:
/// errors name `m` (no reservation, too many rows) or `n`; without split-k nothing is needed.
#[test]
fn split_k_buffers_must_be_reserved() {
    let Some(ctx) = context("split_k_buffers_must_be_reserved") else {
        return;
    };
    let (n, k) = (256, 512);
    let cfg = QMatmulConfig {
        split_k: 2,
        ..QMatmulConfig::for_shape(DType::Int(4), DType::F16, Some(128), false, n, k).unwrap()
    };
    let mut rng = rand::rng();
    let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let q = QuantizedWeight::quantize(&w, k, n, cfg.wdtype, Group::Rows(128), DType::F16, false)
        .unwrap();
    let weight = DeviceWeight::<f16>::upload(&ctx, &prepare(&q, &cfg).unwrap()).unwrap();
    let a = DeviceBuffer::<f16>::zeros(&ctx, 5 * k).unwrap();
    let mut c = DeviceBuffer::<f16>::zeros(&ctx, 5 * n).unwrap();
    let gpu = GpuQMatmul::new(&build(&cfg).unwrap()).unwrap();
    assert_eq!(gpu.reserved_rows(), None);
    let e = gpu
        .run(&ctx, 5, &a, &weight, &mut c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `m`") && e.contains("reserve"), "{e}");
    gpu.reserve(&ctx, 4, n).unwrap();
    let e = gpu
        .run(&ctx, 5, &a, &weight, &mut c)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argument `m`") && e.contains("5 rows exceed the 4"),
        "{e}"
    );
    gpu.reserve(&ctx, 4, 2 * n).unwrap();
    let a4 = DeviceBuffer::<f16>::zeros(&ctx, 4 * k).unwrap();
    let mut c4 = DeviceBuffer::<f16>::zeros(&ctx, 4 * n).unwrap();
    let e = gpu
        .run(&ctx, 4, &a4, &weight, &mut c4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `n`"), "{e}");
    gpu.reserve(&ctx, 8, n).unwrap();
    gpu.run(&ctx, 5, &a, &weight, &mut c).unwrap();
    ctx.synchronize().unwrap();
    // No split: runs without a reservation.
    let one = QMatmulConfig { split_k: 1, ..cfg };
    let gpu = GpuQMatmul::new(&build(&one).unwrap()).unwrap();
    gpu.run(&ctx, 5, &a, &weight, &mut c).unwrap();
    ctx.synchronize().unwrap();
}

/// The gemvs launched as programmatic dependents (`run_with(.., true)`): chains of two layers,
/// the second reading the first's output, with k split in 4 (its partials and semaphores
/// written after the wait). For the one-token integer mma, the look-up kernel and the gemv
/// (one token and a ragged 3) as the second layer, queued with no host synchronization: the
/// first layer, the second as its dependent, the second again as its own dependent, and once
/// more as an ordinary launch; every output poisoned with NaN first. The second layer's blocks
/// start while the first runs, so a read of its input before the wait would see NaN: the
/// outputs must match the f64 reference of the first layer's output, and be the same bits as
/// the ordinary launch. The fused pipeline, which cannot overlap, launches in order when asked.
#[test]
fn dependent_launch_waits_for_the_kernel_before() {
    let Some(ctx) = context("dependent_launch_waits_for_the_kernel_before") else {
        return;
    };
    let (k1, n1, n2) = (8192, 8192, 1024);
    let u = |wd: &str| QMatmulConfig::default_for(wd.parse().unwrap(), DType::F16, Some(128), true);
    let imma = |wd: &str, bk, bn| QMatmulConfig {
        method: QMatmulMethod::GemvImma,
        bm: 1,
        bn,
        bk,
        warps: 4,
        stages: 4,
        split_k: 4,
        ..u(wd)
    };
    let layer = |cfg: &QMatmulConfig, k: usize, n: usize| {
        let mut rng = rand::rng();
        let w: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let q = QuantizedWeight::quantize(&w, k, n, cfg.wdtype, Group::Rows(128), DType::F16, true)
            .unwrap();
        let gpu = GpuQMatmul::new(&build(cfg).unwrap()).unwrap();
        gpu.reserve(&ctx, 3, n).unwrap();
        let dev = DeviceWeight::<f16>::upload(&ctx, &prepare(&q, cfg).unwrap()).unwrap();
        (gpu, dev, q.dequantize())
    };
    let (first, w1, deq1) = layer(&imma("u2", 128, 256), k1, n1);
    let gemv = QMatmulConfig {
        method: QMatmulMethod::Gemv,
        bm: 8,
        bn: 256,
        bk: 128,
        stages: 3,
        split_k: 4,
        ..u("u4")
    };
    let fused = QMatmulConfig {
        split_k: 4,
        ..u("u4")
    };
    let mut rng = rand::rng();
    for (what, cfg, m) in [
        ("integer mma", imma("u4", 64, 128), 1),
        ("look-up", u("u1").lut(256, 8, 4, 1), 1),
        ("gemv", gemv, 1),
        ("gemv", gemv, 3),
        ("fused", fused, 3),
    ] {
        let what = format!("{what} m={m}");
        let (second, w2, deq2) = layer(&cfg, n1, n2);
        assert_eq!(
            second.takes_dependent(),
            cfg.method != QMatmulMethod::Fused,
            "{what}"
        );
        let a: Vec<f16> = (0..m * k1)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let a_dev = DeviceBuffer::from_host(&ctx, &a).unwrap();
        let mut h = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n1]).unwrap();
        let mut outs: Vec<DeviceBuffer<f16>> = (0..3)
            .map(|_| DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n2]).unwrap())
            .collect();
        first.run(&ctx, m, &a_dev, &w1, &mut h).unwrap();
        for (i, y) in outs.iter_mut().enumerate() {
            second.run_with(&ctx, m, &h, &w2, y, i < 2).unwrap();
        }
        let hidden = h.to_host().unwrap();
        let rel = rel_error(&what, &a, &deq1, &hidden, m, n1, k1);
        assert!(rel < 5e-4, "{what}: first layer: relative error {rel}");
        let host: Vec<Vec<f16>> = outs.iter().map(|y| y.to_host().unwrap()).collect();
        for (i, y) in host.iter().enumerate() {
            let rel = rel_error(&what, &hidden, &deq2, y, m, n2, n1);
            println!("dependent chain, {what}, second layer launch {i}: rel err {rel:.2e}");
            assert!(
                rel < 5e-4,
                "{what}: second layer launch {i}: relative error {rel}"
            );
            let same = y
                .iter()
                .zip(&host[2])
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(
                same,
                "{what}: launch {i} gave other bits than the ordinary launch"
            );
        }
    }
}
