//! APT-LLM on the GPU: `GpuAptLinear` (the activation quantizer and the bit-serial GEMM on the
//! 1-bit tensor cores) against the interpreter and an exact i64 reference: activation planes,
//! row sums and scales bit for bit, the i32 bipolar products exactly, the f16 output within one
//! f16 ulp of the f64 reference; the fused and the popc decode kernels bit for bit the two
//! launches; the codes on the integer warpgroup MMA (sm_90a) bit for bit the 1-bit GEMM. Every
//! bench width, at m = 1, 3, 5 (decode), 64, ragged m and m = 300 (the integer-MMA path).
//!
//! Skips with a printed reason when this machine cannot run CUDA; `TILUS_REQUIRE_GPU=1` turns the
//! skip into a failure. Run with `cargo test --release --test gpu_apt -- --nocapture`.

mod common;

use half::f16;
use rand::Rng;
use tilus::apt::matrix::{bipolar_products, ScaleRule};
use tilus::apt::AptMatrix;
use tilus::kernels::apt::linear::AptActivations;
use tilus::kernels::apt::{AptLinear, GpuAptLinear};
use tilus::runtime::{Context, DeviceBuffer};

/// Random activations for `m` tokens on the device, their planes from the quantizer, and what
/// the 1-bit GEMM makes of them: the output (poisoned before the launch, checked finite) and
/// the exact products.
struct OneBitGemm {
    x: DeviceBuffer<f16>,
    act: AptActivations,
    y: Vec<f16>,
    acc: Vec<i32>,
}

fn one_bit_gemm(gpu: &GpuAptLinear, m: usize, rng: &mut impl Rng, tag: &str) -> OneBitGemm {
    let (ctx, (n, k)) = (gpu.context(), (gpu.host().n(), gpu.host().k()));
    let x: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect();
    let x = DeviceBuffer::from_host(ctx, &x).unwrap();
    let mut act = AptActivations::new(gpu, m).unwrap();
    gpu.quantize_into(&x, &mut act).unwrap();
    let mut y = DeviceBuffer::from_host(ctx, &vec![f16::NAN; m * n]).unwrap();
    let mut acc = DeviceBuffer::from_host(ctx, &vec![i32::MIN; m * n]).unwrap();
    gpu.gemm_into(&act, &mut y, Some(&mut acc)).unwrap();
    let (y, acc) = (y.to_host().unwrap(), acc.to_host().unwrap());
    assert!(
        y.iter().all(|v| v.is_finite()),
        "{tag}: the 1-bit GEMM left NaN"
    );
    OneBitGemm { x, act, y, acc }
}

#[test]
fn gpu_apt_linear_matches_reference() {
    let Some(ctx) = common::gpu_context(
        "gpu_apt_linear_matches_reference",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    for (w, a) in tilus::kernels::apt::bench::WIDTHS {
        for (m, n, k) in [
            (1, 256, 1024),
            (5, 64, 1536),
            (64, 128, 2048),
            (37, 64, 768),
            (100, 256, 1024),
            (3, 128, 4096),
            (1, 40, 1280),
            // The integer-MMA GEMM at a ragged m past IGMMA_MIN_M.
            (300, 264, 1024),
        ] {
            let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
            let gpu = layer.to_gpu(&ctx).unwrap();
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let mut act = AptActivations::new(&gpu, m).unwrap();
            gpu.quantize_into(&xd, &mut act).unwrap();
            // The quantizer: bit for bit the host's (and so the interpreter's).
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let aq = AptMatrix::quantize(&xf, m, k, a, ScaleRule::Max).unwrap();
            let tag = format!("W{w}A{a} m={m} n={n} k={k}");
            assert_eq!(
                act.planes.to_host().unwrap(),
                aq.planes().unwrap(),
                "{tag}: planes"
            );
            assert_eq!(act.sums.to_host().unwrap(), aq.row_sums(), "{tag}: sums");
            let sc: Vec<u32> = act
                .scales
                .to_host()
                .unwrap()
                .iter()
                .map(|s| s.to_bits())
                .collect();
            let want_sc: Vec<u32> = aq.scales().iter().map(|s| s.to_bits()).collect();
            assert_eq!(sc, want_sc, "{tag}: scales");
            // The GEMM, outputs poisoned.
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            let mut acc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
            gpu.gemm_into(&act, &mut y, Some(&mut acc)).unwrap();
            let (y, acc) = (y.to_host().unwrap(), acc.to_host().unwrap());
            let want = bipolar_products(&aq, layer.weight());
            for i in 0..m * n {
                assert_eq!(acc[i] as i64, want[i], "{tag}: product {i}");
                let r = aq.scales()[i / n] as f64
                    * layer.weight().scales()[i % n] as f64
                    * want[i] as f64;
                let ulp = f16::from_f64(r).to_f64().abs().max(6.1e-5) * 2f64.powi(-10);
                assert!(
                    (y[i].to_f64() - r).abs() <= ulp,
                    "{tag}: y[{i}] = {} vs {r}",
                    y[i]
                );
            }
            // The interpreter gives the same bits, and the allocating forward the same output.
            let (yc, accc) = layer.forward_cpu_acc(&x, m).unwrap();
            assert_eq!(acc, accc, "{tag}: GPU vs interpreter products");
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y), bits(&yc), "{tag}: GPU vs interpreter output");
            let y2 = gpu.forward(&xd, m).unwrap().to_host().unwrap();
            if layer.gemv_config(m, false).is_some() {
                // The fused decode kernel: the same bits as the two launches.
                let mut yf = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                let mut af = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                gpu.forward_fused(&xd, m, &mut yf, Some(&mut af)).unwrap();
                assert_eq!(af.to_host().unwrap(), acc, "{tag}: fused products");
                assert_eq!(
                    bits(&yf.to_host().unwrap()),
                    bits(&y),
                    "{tag}: fused output"
                );
                // Both split counts (`forward_fused_with`; the layer itself does not split): the same
                // bits, twice in a row (the semaphores are left zero).
                let steps = k / (layer.gemv_config(m, false).unwrap().KT as usize * 256);
                for split in [1usize, 4].into_iter().filter(|s| steps.is_multiple_of(*s)) {
                    for round in 0..2 {
                        let mut ys = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                        gpu.forward_fused_with(&xd, m, &mut ys, (None, Some(split as i32)))
                            .unwrap();
                        assert_eq!(
                            bits(&ys.to_host().unwrap()),
                            bits(&y),
                            "{tag}: fused split {split} round {round}"
                        );
                    }
                }
            }
            // The popc decode kernel (any m): the same bits, with tilings of 16-, 8- and 4-byte
            // loads, one to four rows per warp (n = 40 leaves a partial group), blocks walking
            // one or several row groups.
            if m <= 5 {
                for (warps, rows, vec, per_sm, stages, qsplit) in [
                    (4, 4, 4, 2, 0, 1),
                    (8, 2, 2, 1, 4, 2),
                    (4, 1, 1, 3, 2, 1),
                    (16, 2, 4, 1, 0, 4),
                ] {
                    let tiles = tilus::kernels::apt::PopcTiles {
                        warps,
                        rows,
                        vec,
                        per_sm,
                        stages,
                        qsplit,
                    };
                    let mut yp = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    let mut ap = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                    gpu.forward_popc(&xd, m, &mut yp, Some(&mut ap), Some(tiles))
                        .unwrap();
                    assert_eq!(ap.to_host().unwrap(), acc, "{tag} {tiles:?}: popc products");
                    assert_eq!(
                        bits(&yp.to_host().unwrap()),
                        bits(&y),
                        "{tag} {tiles:?}: popc output"
                    );
                }
            }
            // The planes on the 1-bit warpgroup MMA (sm_90a, any m): the 1-bit GEMM's products
            // and bits with one and two warpgroups and the rule's columns and half of them
            // (where two stages of eight activation planes fit), and 112 columns, a width that
            // is no power of two (seven 16-column fragments a warpgroup); it refuses code bytes.
            if ctx.arch() == "sm_90a" {
                let rule = layer.bgmma_config(m, false);
                for (bm, bn, wgn) in [
                    (64, rule.BN, 1),
                    (128, (rule.BN / 2).max(8), 1),
                    (64, 2 * rule.BN, 2),
                    (64, 112, 2),
                ] {
                    let Some(cfg) = layer.bgmma_tiles(bm, bn, wgn, false) else {
                        continue;
                    };
                    let mut yb = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    let mut ab = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                    gpu.gemm_bgmma_with(&act, &mut yb, Some(&mut ab), cfg, true)
                        .unwrap();
                    let tiles = format!("BM={bm} BN={bn} WGN={wgn}");
                    assert_eq!(ab.to_host().unwrap(), acc, "{tag} {tiles}: bgmma products");
                    assert_eq!(
                        bits(&yb.to_host().unwrap()),
                        bits(&y),
                        "{tag} {tiles}: bgmma output"
                    );
                }
                let codes = AptActivations::with_codes(&gpu, m, true).unwrap();
                let mut yb = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                let e = gpu
                    .gemm_bgmma_into(&codes, &mut yb, None)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("argument `act`"), "{e}");
            }
            // The codes on the integer warpgroup MMA (sm_90a): the quantizer's code bytes are
            // the host's, and both tilings give the 1-bit GEMM's products and bits.
            if ctx.arch() == "sm_90a" && m >= 16 {
                let mut codes = AptActivations::with_codes(&gpu, m, true).unwrap();
                gpu.quantize_into(&xd, &mut codes).unwrap();
                let bytes: Vec<u8> = codes
                    .planes
                    .to_host()
                    .unwrap()
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                assert_eq!(bytes, aq.codes(), "{tag}: activation codes");
                assert_eq!(codes.sums.to_host().unwrap(), aq.row_sums(), "{tag}: sums");
                for (bm, bn) in [(64, 128), (128, 256)] {
                    let cfg = tilus::kernels::apt::kernel::apt_gemm_igmma::Config {
                        BM: bm,
                        BN: bn,
                        ..layer.igmma_config(m, false)
                    };
                    let mut yi = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    let mut ai = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                    gpu.gemm_igmma_with(&codes, &mut yi, Some(&mut ai), cfg, true)
                        .unwrap();
                    assert_eq!(ai.to_host().unwrap(), acc, "{tag} BM={bm}: igmma products");
                    assert_eq!(
                        bits(&yi.to_host().unwrap()),
                        bits(&y),
                        "{tag} BM={bm}: igmma output"
                    );
                }
                // Each GEMM refuses the other's activations, naming `act`.
                let mut yi = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                let e = gpu
                    .gemm_into(&codes, &mut yi, None)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("argument `act`"), "{e}");
                let e = gpu
                    .gemm_igmma_into(&act, &mut yi, None)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("argument `act`"), "{e}");
            }
            assert_eq!(bits(&y2), bits(&y), "{tag}: forward");
            eprintln!("{tag}: ok");
        }
    }
}

/// The layer's forward on the warpgroup MMAs, at a shape too large for the interpreter: the
/// same bits as the quantizer and the 1-bit GEMM on the GPU (its output poisoned), twice. At
/// 333 tokens W3A4 takes the integer MMA (`AptPath::Igmma`, past the rule's tokens, plane pairs
/// and blocks) and W2A2 the 1-bit one; at one token both take the popc kernel.
#[test]
fn gpu_apt_forward_takes_the_warpgroup_mma() {
    use tilus::kernels::apt::AptPath;
    let Some(ctx) = common::gpu_context(
        "gpu_apt_forward_takes_the_warpgroup_mma",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_apt_forward_takes_the_warpgroup_mma: wgmma needs sm_90a");
        return;
    }
    let mut rng = rand::rng();
    let (n, k) = (10240, 2048);
    for (w, a) in [(2, 2), (3, 4)] {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let gpu = layer.to_gpu(&ctx).unwrap();
        let few_pairs = w * a <= 4;
        for m in [333, 1] {
            let path = gpu.path(m);
            let want = match (m, few_pairs) {
                (1, _) => matches!(path, AptPath::Popc(_)),
                (_, true) => matches!(path, AptPath::Bgmma(_)),
                _ => matches!(path, AptPath::Igmma(_)),
            };
            assert!(want, "W{w}A{a} m={m}: {path:?}");
            let OneBitGemm { x: xd, y, .. } =
                one_bit_gemm(&gpu, m, &mut rng, &format!("W{w}A{a} m={m}"));
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for round in 0..2 {
                let yf = gpu.forward(&xd, m).unwrap().to_host().unwrap();
                assert_eq!(bits(&yf), bits(&y), "W{w}A{a} m={m} round {round}: forward");
            }
            eprintln!("W{w}A{a} m={m} n={n} k={k}: forward on {path:?} ok");
        }
    }
}

/// `forward_into` on the layer's own buffers: 333, 1, 64 and again 333 tokens on one layer
/// (the quantized activations grown, then lent to smaller forwards, then reused), each output
/// poisoned first, give the 1-bit GEMM's bits on every path the sizes take (the warpgroup MMAs
/// on sm_90a, else the quantizer and the 1-bit GEMM; popc at one token); an output or input of
/// the wrong length is an error naming it, and leaves the output as it was.
#[test]
fn gpu_apt_forward_into_reuses_its_buffers() {
    let Some(ctx) = common::gpu_context(
        "gpu_apt_forward_into_reuses_its_buffers",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (n, k) = (1024, 2048);
    for (w, a) in [(2, 2), (3, 4)] {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let gpu = AptLinear::new(&weight, k, n, w, a, None)
            .unwrap()
            .to_gpu(&ctx)
            .unwrap();
        for m in [333, 1, 64, 333] {
            let tag = format!("W{w}A{a} m={m} on {:?}", gpu.path(m));
            let one = one_bit_gemm(&gpu, m, &mut rng, &tag);
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_into(&one.x, m, &mut y).unwrap();
            assert_eq!(bits(&y.to_host().unwrap()), bits(&one.y), "{tag}");
            eprintln!("{tag}: forward_into ok");
        }
        let x = DeviceBuffer::from_host(&ctx, &vec![f16::ONE; 2 * k]).unwrap();
        let mut short = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; 2 * n - 1]).unwrap();
        let e = gpu.forward_into(&x, 2, &mut short).unwrap_err().to_string();
        assert!(e.contains("`y`"), "{e}");
        let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; 3 * n]).unwrap();
        let e = gpu.forward_into(&x, 3, &mut y).unwrap_err().to_string();
        assert!(e.contains("`x`"), "{e}");
        assert!(y.to_host().unwrap().iter().all(|v| v.is_nan()), "y changed");
    }
}

/// The popc decode kernel on a layer with many more row groups than blocks (each block walks
/// several groups, the last one partial): the same products and bits as the quantizer and the
/// GEMM, for every bench width, outputs poisoned, twice in a row; the prologue's token in one
/// or two register chunks and in chunks read twice (k = 8192 with 128-word chunks, 32-word ones),
/// and 32-byte loads a lane (`vec` 8).
#[test]
fn gpu_apt_popc_walks_row_groups() {
    let Some(ctx) = common::gpu_context(
        "gpu_apt_popc_walks_row_groups",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for ((w, a), (n, k)) in tilus::kernels::apt::bench::WIDTHS
        .into_iter()
        .flat_map(|wa| [(wa, (8232, 1280)), (wa, (1032, 8192))])
    {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let gpu = layer.to_gpu(&ctx).unwrap();
        for m in [1, 2] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let mut act = AptActivations::new(&gpu, m).unwrap();
            gpu.quantize_into(&xd, &mut act).unwrap();
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            let mut acc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
            gpu.gemm_into(&act, &mut y, Some(&mut acc)).unwrap();
            let (y, acc) = (y.to_host().unwrap(), acc.to_host().unwrap());
            assert!(acc.iter().any(|&v| v != 0));
            for (warps, rows, vec, per_sm, stages, qsplit) in [
                (4, 1, 4, 1, 0, 1),
                (8, 2, 4, 2, 4, 2),
                (16, 2, 4, 1, 0, 4),
                (8, 4, 8, 1, 0, 1),
                (4, 1, 1, 1, 0, 4),
            ] {
                let tiles = tilus::kernels::apt::PopcTiles {
                    warps,
                    rows,
                    vec,
                    per_sm,
                    stages,
                    qsplit,
                };
                let tag = format!("W{w}A{a} m={m} {tiles:?}");
                for round in 0..2 {
                    let mut yp = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    let mut ap = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                    gpu.forward_popc(&xd, m, &mut yp, Some(&mut ap), Some(tiles))
                        .unwrap();
                    assert_eq!(ap.to_host().unwrap(), acc, "{tag} round {round}: products");
                    assert_eq!(
                        bits(&yp.to_host().unwrap()),
                        bits(&y),
                        "{tag} round {round}: output"
                    );
                }
            }
            eprintln!("W{w}A{a} m={m} n={n} k={k}: popc ok");
        }
    }
}

/// The integer-mma decode kernel on the GPU computes the unfused path's exact products and
/// output bits (the GEMM on the 1-bit mma, launched separately): every width it takes, one and
/// two tokens, the rule's tiles and others (one and two fragments a field, rings of 2 to 4,
/// 2 to 8 warps, k whole and split in 3 slices; the rule splits 1024 x 8192 in 7), outputs
/// poisoned before each launch, twice each (the second launch reuses the uploaded bytes and
/// finds the split's semaphores left zero).
#[test]
fn gpu_apt_imma_decode_matches_the_gemm() {
    use tilus::kernels::apt::imma::fields_per_byte;
    use tilus::kernels::apt::ImmaTiles;
    let Some(ctx) = common::gpu_context(
        "gpu_apt_imma_decode_matches_the_gemm",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for ((w, a), (n, k)) in [(1, 2), (2, 2), (3, 4), (4, 4), (5, 3), (2, 7)]
        .into_iter()
        .flat_map(|wa| [(wa, (8192, 1280)), (wa, (1024, 8192))])
    {
        let p = fields_per_byte(w).unwrap();
        // Two k32 fragments a field where they divide k.
        let wide = if k % (64 * p as usize) == 0 {
            64 * p
        } else {
            32 * p
        };
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let gpu = layer.to_gpu(&ctx).unwrap();
        let rule = layer.imma_tiles().expect("the rule serves the layer");
        for m in [1, 2] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let xd = DeviceBuffer::from_host(&ctx, &x).unwrap();
            let mut act = AptActivations::new(&gpu, m).unwrap();
            gpu.quantize_into(&xd, &mut act).unwrap();
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            let mut acc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
            gpu.gemm_into(&act, &mut y, Some(&mut acc)).unwrap();
            let (y, acc) = (y.to_host().unwrap(), acc.to_host().unwrap());
            assert!(acc.iter().any(|&v| v != 0));
            for tiles in [
                rule,
                ImmaTiles {
                    bn: 128,
                    bk: 32 * p,
                    warps: 8,
                    stages: 4,
                    split: 1,
                },
                ImmaTiles {
                    bn: 64,
                    bk: wide,
                    warps: 2,
                    stages: 2,
                    split: 1,
                },
                ImmaTiles {
                    bn: 64,
                    bk: 32 * p,
                    warps: 4,
                    stages: 3,
                    split: 3,
                },
            ] {
                let tag = format!("W{w}A{a} m={m} {n}x{k} {tiles:?}");
                for round in 0..2 {
                    let mut yi = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                    let mut ai = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                    gpu.forward_imma(&xd, m, &mut yi, Some(&mut ai), Some(tiles))
                        .unwrap_or_else(|e| panic!("{tag}: {e}"));
                    assert_eq!(ai.to_host().unwrap(), acc, "{tag} round {round}: products");
                    assert_eq!(
                        bits(&yi.to_host().unwrap()),
                        bits(&y),
                        "{tag} round {round}: outputs"
                    );
                }
            }
        }
    }
}

/// One token takes the integer-mma decode kernel (`AptPath::Imma`) on sm_90a where its rule
/// fills the machine: 3-bit layers of 57344 outputs (448-column blocks over all of k), of 8192
/// (256 columns, k in 4 slices), 2-bit ones on k = 16384 (split likewise), and 4-bit ones in
/// the rule's tiles; `forward` gives
/// the 1-bit GEMM's output bits there, twice (the second forward reuses the uploaded bytes, and
/// the split's semaphores must have been left zero).
#[test]
fn gpu_apt_imma_is_the_one_token_path_of_its_rule() {
    use tilus::kernels::apt::linear::{one_token_rule, DecodeTiles};
    use tilus::kernels::apt::AptPath;
    let Some(ctx) = common::gpu_context(
        "gpu_apt_imma_is_the_one_token_path_of_its_rule",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_apt_imma_is_the_one_token_path_of_its_rule: the rule is sm_90a's");
        return;
    }
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (w, a, n, k, tiles) in [
        (3, 4, 57344, 1280, (448, 1)),
        (3, 2, 57344, 1280, (448, 1)),
        (3, 4, 8192, 4096, (256, 4)),
        (2, 2, 8192, 16384, (256, 4)),
        // 4-bit weights (session 57's rule), in whatever tiles the rule gives.
        (4, 4, 57344, 1280, (0, 0)),
        (4, 4, 8192, 4096, (0, 0)),
    ] {
        let tiles = if tiles == (0, 0) {
            match one_token_rule(n, k, w, a) {
                DecodeTiles::Imma(t) => (t.bn, t.split),
                DecodeTiles::Popc(_) => panic!("W{w}A{a} {n}x{k}: the rule takes popc"),
            }
        } else {
            tiles
        };
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let gpu = layer.to_gpu(&ctx).unwrap();
        let tag = format!("W{w}A{a} {n}x{k}");
        assert!(
            matches!(gpu.path(1), AptPath::Imma(t) if (t.bn, t.split) == tiles),
            "{tag}: {:?}",
            gpu.path(1)
        );
        let one = one_bit_gemm(&gpu, 1, &mut rng, &tag);
        for round in 0..2 {
            let y = gpu.forward(&one.x, 1).unwrap();
            assert_eq!(
                bits(&y.to_host().unwrap()),
                bits(&one.y),
                "{tag} round {round}"
            );
        }
        eprintln!("{tag}: forward on {:?} ok", gpu.path(1));
    }
}

/// The one-token tuner (`kernels::apt::tune`) times its points on the GPU, popc and
/// integer-mma ones (the latter on the 8192-row layer, split ones among them), and keeps the
/// fastest; the tuned layer's one-token forward takes that kernel and those tiles and gives the
/// 1-bit GEMM's bits (outputs poisoned); a second call finds the winner remembered and launches
/// nothing.
#[test]
fn gpu_apt_decode_tune_picks_the_fastest_point() {
    use tilus::kernels::apt::tune::{candidates, tune};
    use tilus::kernels::apt::{AptPath, DecodeTiles};
    let Some(ctx) = common::gpu_context(
        "gpu_apt_decode_tune_picks_the_fastest_point",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (w, a, n, k) in [(2, 2, 4104, 4096), (3, 4, 1032, 8192), (3, 4, 8192, 4096)] {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let points = candidates(n, k, w, a);
        assert_eq!(
            points.iter().any(|t| matches!(t, DecodeTiles::Imma(_))),
            n == 8192,
            "{points:?}"
        );
        let (gpu, best, outcome) = tune(layer.to_gpu(&ctx).unwrap()).unwrap();
        let tag = format!("W{w}A{a} {n}x{k} tuned {best}");
        assert_eq!(points[outcome.index], best, "{tag}");
        let timed = common::fresh_fastest(&outcome, Some(points.len()), &tag);
        assert_eq!(gpu.path(1), AptPath::from(best), "{tag}");
        let one = one_bit_gemm(&gpu, 1, &mut rng, &tag);
        let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; n]).unwrap();
        let mut acc = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; n]).unwrap();
        match best {
            DecodeTiles::Popc(_) => gpu.forward_popc(&one.x, 1, &mut y, Some(&mut acc), None),
            DecodeTiles::Imma(t) => gpu.forward_imma(&one.x, 1, &mut y, Some(&mut acc), Some(t)),
        }
        .unwrap();
        assert_eq!(acc.to_host().unwrap(), one.acc, "{tag}: products");
        assert_eq!(bits(&y.to_host().unwrap()), bits(&one.y), "{tag}: output");
        assert_eq!(
            bits(&gpu.forward(&one.x, 1).unwrap().to_host().unwrap()),
            bits(&one.y),
            "{tag}: forward"
        );
        let (_, again, outcome) = tune(gpu).unwrap();
        assert!(outcome.reused() && again == best, "{tag}: not remembered");
        eprintln!(
            "{tag}: {:.1} us of {} points",
            outcome.median_us,
            timed.len()
        );
    }
}

/// The batch tuner (`tune_batch`, sm_90a) at ragged token counts: every point is timed, the
/// winner is the fastest and becomes the path of every token count of its bucket (not of the
/// next bucket), the tuner remembers it, and the forward on every point of the space gives the
/// 1-bit GEMM's bits (outputs poisoned first): W2A2 at 33 tokens (the 1-bit warpgroup MMA and
/// the integer one's two blocks) and W3A4 at 257 (128-row blocks among them).
#[test]
fn gpu_apt_batch_tune_picks_the_fastest_point() {
    use tilus::kernels::apt::tune::{batch_candidates, tune_batch};
    let Some(ctx) = common::gpu_context(
        "gpu_apt_batch_tune_picks_the_fastest_point",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_apt_batch_tune_picks_the_fastest_point: wgmma needs sm_90a");
        return;
    }
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (w, a, m, n, k) in [(2, 2, 33, 4104, 4096), (3, 4, 257, 2056, 2048)] {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let points = batch_candidates(&layer, m);
        let (gpu, best, outcome) = tune_batch(layer.to_gpu(&ctx).unwrap(), m).unwrap();
        let tag = format!("W{w}A{a} {n}x{k} m={m} tuned {best:?}");
        assert_eq!(points[outcome.index], best, "{tag}");
        let timed = common::fresh_fastest(&outcome, Some(points.len()), &tag);
        let bucket = m.next_power_of_two();
        assert_eq!(gpu.path(m), best, "{tag}");
        assert_eq!(gpu.path(bucket), best, "{tag}: the bucket's top");
        assert_eq!(
            gpu.path(2 * bucket),
            layer.path(2 * bucket),
            "{tag}: next bucket"
        );
        // Seven tokens more: the same bucket and the same space of points.
        assert_eq!(batch_candidates(&layer, m + 7), points, "{tag}");
        let (gpu_again, again, outcome) = tune_batch(gpu, m + 7).unwrap();
        assert!(outcome.reused() && again == best, "{tag}: not remembered");
        let mut gpu = gpu_again;
        let one = one_bit_gemm(&gpu, m, &mut rng, &tag);
        for &p in &points {
            gpu = gpu.with_batch(m, p).unwrap();
            let mut y = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            gpu.forward_into(&one.x, m, &mut y).unwrap();
            assert_eq!(bits(&y.to_host().unwrap()), bits(&one.y), "{tag}: {p:?}");
        }
        eprintln!(
            "{tag}: {:.1} us of {} points",
            outcome.median_us,
            timed.len()
        );
    }
}

/// The planes on the 1-bit warpgroup MMA at ragged shapes (tile rows past `m` and columns past
/// `n` read the next plane's rows), outputs poisoned: the 1-bit GEMM's products and bits for
/// W2A2 and W3A4, twice (the ring's phases start over each launch). Small enough for
/// compute-sanitizer.
#[test]
fn gpu_apt_bgmma_matches_the_one_bit_gemm() {
    let Some(ctx) = common::gpu_context(
        "gpu_apt_bgmma_matches_the_one_bit_gemm",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    if ctx.arch() != "sm_90a" {
        eprintln!("SKIPPED gpu_apt_bgmma_matches_the_one_bit_gemm: wgmma needs sm_90a");
        return;
    }
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // The last two take the rule's widest tilings: two warpgroups of 32 columns of 12 plane
    // pairs, of 128 columns of 2.
    for ((w, a), (m, n, k)) in [
        ((2, 2), (70, 200, 5376)),
        ((3, 4), (130, 72, 1280)),
        ((3, 4), (16, 8192, 1280)),
        ((1, 2), (40, 16384, 768)),
    ] {
        let weight: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let cfg = layer.bgmma_config(m, false);
        if n >= 8192 {
            assert_eq!(
                (cfg.BN, cfg.WGN),
                (if w == 3 { 64 } else { 256 }, 2),
                "W{w}A{a}"
            );
        }
        let gpu = layer.to_gpu(&ctx).unwrap();
        let OneBitGemm {
            x: xd,
            mut act,
            y,
            acc,
        } = one_bit_gemm(&gpu, m, &mut rng, &format!("W{w}A{a}"));
        // The layer's forward (the rule's tiles on sm_90a): the same bits.
        let yf = gpu.forward(&xd, m).unwrap().to_host().unwrap();
        assert_eq!(bits(&yf), bits(&y), "W{w}A{a}: forward");
        // Round 0 the rule's tiles with the outputs through the copy engine where a warpgroup
        // has 16 columns (whatever the rule picks for the width), round 1 the threads storing.
        let boxed = tilus::kernels::apt::linear::bgmma_store_box(&cfg);
        for round in 0..2 {
            let mut yb = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
            let mut ab = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
            let cfg = tilus::kernels::apt::kernel::apt_gemm_bgmma::Config {
                STORE_BOX: if round == 0 { boxed } else { 0 },
                ..cfg
            };
            gpu.gemm_bgmma_with(&act, &mut yb, Some(&mut ab), cfg, false)
                .unwrap();
            assert_eq!(
                ab.to_host().unwrap(),
                acc,
                "W{w}A{a} round {round}: products"
            );
            assert_eq!(
                bits(&yb.to_host().unwrap()),
                bits(&y),
                "W{w}A{a} round {round}: output"
            );
        }
        // Columns that are not a power of two (a wave of 132 blocks on 14336 columns is 112
        // each): 56 a warpgroup (the threads store), 48 (boxes of 16 through the copy engine).
        for (bm, bn, wgn) in [(64, 112, 2), (64, 96, 2)] {
            let Some(cfg) = layer.bgmma_tiles(bm, bn, wgn, false) else {
                continue;
            };
            let boxed = tilus::kernels::apt::linear::bgmma_store_box(&cfg);
            for store_box in [0, boxed] {
                let cfg = tilus::kernels::apt::kernel::apt_gemm_bgmma::Config {
                    STORE_BOX: store_box,
                    ..cfg
                };
                let mut yb = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                let mut ab = DeviceBuffer::from_host(&ctx, &vec![i32::MIN; m * n]).unwrap();
                gpu.gemm_bgmma_with(&act, &mut yb, Some(&mut ab), cfg, false)
                    .unwrap();
                assert_eq!(ab.to_host().unwrap(), acc, "W{w}A{a} {cfg}: products");
                assert_eq!(
                    bits(&yb.to_host().unwrap()),
                    bits(&y),
                    "W{w}A{a} {cfg}: output"
                );
            }
        }
        // The GEMM launched as the quantizer's dependent, right behind it, on activations that
        // held another input's planes: a read before the quantizer's end would give (some of)
        // that input's outputs.
        let OneBitGemm { x: x2d, y: y2, .. } =
            one_bit_gemm(&gpu, m, &mut rng, &format!("W{w}A{a}, a second input"));
        assert_ne!(bits(&y2), bits(&y), "W{w}A{a}: two inputs, one output");
        for round in 0..3 {
            for (input, want) in [(&xd, &y), (&x2d, &y2)] {
                // Poisoned before the quantizer: nothing comes between the two launches.
                let mut yb = DeviceBuffer::from_host(&ctx, &vec![f16::NAN; m * n]).unwrap();
                gpu.quantize_into(input, &mut act).unwrap();
                gpu.gemm_bgmma_into(&act, &mut yb, None).unwrap();
                assert_eq!(
                    bits(&yb.to_host().unwrap()),
                    bits(want),
                    "W{w}A{a} round {round}: dependent GEMM behind the quantizer"
                );
            }
        }
    }
}

/// The weight re-layout on the GPU (`apt_split_planes`): random codes of every width into the
/// host's planes and row sums bit for bit, with a ragged last chunk of words.
#[test]
fn gpu_apt_split_planes_matches_the_host() {
    use tilus::kernels::apt::relayout::{split_planes_cpu, split_planes_gpu};
    let Some(ctx) = common::gpu_context(
        "gpu_apt_split_planes_matches_the_host",
        Context::builder(0).no_disk_cache(),
    ) else {
        return;
    };
    let mut rng = rand::rng();
    let (rows, k) = (37, 4096 + 1280);
    for bits in 1..=8u32 {
        let codes: Vec<u8> = (0..rows * k)
            .map(|_| rng.random_range(0..1u32 << bits) as u8)
            .collect();
        let (want_planes, want_sums) = split_planes_cpu(&codes, rows, k, bits).unwrap();
        let codes_d = DeviceBuffer::from_host(&ctx, &codes).unwrap();
        for round in 0..2 {
            let (planes, sums) = split_planes_gpu(&ctx, &codes_d, rows, k, bits).unwrap();
            assert_eq!(
                planes.to_host().unwrap(),
                want_planes,
                "{bits} bits round {round}"
            );
            assert_eq!(
                sums.to_host().unwrap(),
                want_sums,
                "{bits} bits round {round}"
            );
        }
    }
}
