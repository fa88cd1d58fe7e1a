//! The bit-serial WxAy GEMM (`#[kernel]` `apt_gemm`) on the interpreter: random f32 weights and
//! activations quantized on the host, the integer products exactly equal to an i64 reference
//! of the quantized operands, the f16 output within f16 rounding of an f64 reference.

use half::f16;
use rand::Rng;
use tilus::apt::matrix::{bipolar_products, ScaleRule};
use tilus::apt::AptMatrix;
use tilus::kernels::apt::kernel::apt_gemm;

fn random(len: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

#[allow(clippy::too_many_arguments)]
fn check(wbits: u32, abits: u32, tiles: [i32; 6], m: usize, n: usize, k: usize) {
    let [wm, wn, fm, fn_, kt, stages] = tiles;
    let cfg = apt_gemm::Config {
        WBITS: wbits as i32,
        ABITS: abits as i32,
        WM: wm,
        WN: wn,
        FM: fm,
        FN: fn_,
        KT: kt,
        STAGES: stages,
        STORE_ACC: 1,
    };
    let a = AptMatrix::quantize(&random(m * k), m, k, abits, ScaleRule::Max).unwrap();
    let w = AptMatrix::quantize(&random(n * k), n, k, wbits, ScaleRule::Max).unwrap();
    let mut y = vec![f16::NAN; m * n];
    let mut acc = vec![i32::MIN; m * n];
    apt_gemm::interpret(
        &cfg,
        m as i32,
        n as i32,
        k as i32,
        &a.planes().unwrap(),
        &w.planes().unwrap(),
        &a.row_sums(),
        a.scales(),
        &w.row_sums(),
        w.scales(),
        &mut y,
        &mut acc,
    )
    .unwrap_or_else(|e| panic!("{cfg}: {e}"));
    let want = bipolar_products(&a, &w);
    for (i, (&got, &want)) in acc.iter().zip(&want).enumerate() {
        assert_eq!(got as i64, want, "{cfg} m={m} n={n} k={k}: product at {i}");
    }
    assert!(want.iter().any(|&v| v != 0));
    // f16 output: the f64 value sa·sw·D rounded once to f16 (the kernel's f32 products add
    // at most 2 f32 roundings: 2^-23 relative), so within one f16 ulp.
    for i in 0..m {
        for j in 0..n {
            let r = a.scales()[i] as f64 * w.scales()[j] as f64 * want[i * n + j] as f64;
            let g = y[i * n + j].to_f64();
            let ulp = f16::from_f64(r).to_f64().abs().max(6.1e-5) * 2f64.powi(-10);
            assert!(
                (g - r).abs() <= ulp,
                "{cfg}: y[{i}, {j}] = {g}, reference {r}"
            );
        }
    }
}

#[test]
fn w2a2_matches_reference() {
    check(2, 2, [1, 2, 1, 2, 1, 0], 16, 32, 512);
    // A ragged m (rows past m masked), several blocks, two k tiles per step.
    check(2, 2, [2, 2, 1, 2, 2, 0], 37, 64, 1024);
    // The cp.async ring: fewer steps than stages, and more.
    check(2, 2, [2, 2, 2, 2, 1, 3], 70, 64, 512);
    check(2, 2, [2, 2, 1, 2, 2, 3], 37, 64, 2560);
    // One warp along m holding every token (the m = 64 tiling), four stages, six steps.
    check(2, 2, [1, 4, 4, 2, 2, 4], 50, 128, 3072);
}

#[test]
fn other_widths_match_reference() {
    for (w, a) in [(1, 2), (3, 4), (4, 4), (2, 8), (1, 1)] {
        check(w, a, [1, 2, 1, 2, 1, 0], 5, 32, 512);
        check(w, a, [2, 1, 1, 1, 1, 3], 40, 16, 1024);
    }
}

/// The activation quantizer kernel gives the host quantizer's planes, row sums and scales
/// exactly, for rows shorter and longer than one chunk, a zero row, and (with three rows) a row
/// of every integer in `-max..=max`: scale 1, so half the values sit exactly on a boundary of
/// the levels (`t / 2` an integer) and the rest on a level.
#[test]
fn activation_quantizer_matches_host() {
    use tilus::kernels::apt::kernel::apt_quantize_act;
    let mut rng = rand::rng();
    for (abits, warps, one, m, k) in [
        (2, 1, 1, 3, 256),
        (4, 4, 0, 2, 1024 + 4096),
        (3, 1, 0, 2, 1536),
        (8, 4, 1, 2, 4096 - 64),
        (4, 4, 1, 3, 2048),
    ] {
        let cfg = apt_quantize_act::Config {
            ABITS: abits,
            WARPS: warps,
            ONE_PASS: one,
            CODES: 0,
        };
        let mut x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-3.0f32..3.0)))
            .collect();
        // Row 1 all zero: the smallest scale, never a division by zero.
        for v in &mut x[k..2 * k] {
            *v = f16::ZERO;
        }
        if m == 3 {
            let max = (1i32 << abits) - 1;
            for (i, v) in x[..k].iter_mut().enumerate() {
                *v = f16::from_f32((i as i32 % (2 * max + 1) - max) as f32);
            }
        }
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let host = AptMatrix::quantize(&xf, m, k, abits as u32, ScaleRule::Max).unwrap();
        let mut planes = vec![0xdead_beefu32; abits as usize * m * k / 32];
        let mut sums = vec![i32::MIN; m];
        let mut scales = vec![f32::NAN; m];
        apt_quantize_act::interpret(
            &cfg,
            m as i32,
            k as i32,
            &x,
            &mut planes,
            &mut sums,
            &mut scales,
        )
        .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        assert_eq!(planes, host.planes().unwrap(), "{cfg} m={m} k={k}: planes");
        assert_eq!(sums, host.row_sums(), "{cfg}: row sums");
        let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&scales), bits(host.scales()), "{cfg}: scales");
    }
}

/// `AptLinear::forward_cpu`: the exact products against an i64 reference built from the host
/// quantizer's activations and the layer's weight, the f16 output within one f16 ulp.
#[test]
fn apt_linear_forward_cpu_matches_reference() {
    use tilus::kernels::apt::AptLinear;
    let mut rng = rand::rng();
    for (w, a, m, n, k) in [(2, 2, 3, 64, 512), (1, 2, 1, 32, 256), (3, 4, 20, 48, 768)] {
        let weight = random(k * n);
        let layer = AptLinear::new(&weight, k, n, w, a, None).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect();
        let (y, acc) = layer.forward_cpu_acc(&x, m).unwrap();
        let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
        let aq = AptMatrix::quantize(&xf, m, k, a, ScaleRule::Max).unwrap();
        let want = bipolar_products(&aq, layer.weight());
        for i in 0..m * n {
            assert_eq!(acc[i] as i64, want[i], "W{w}A{a} m={m}: product {i}");
            let r =
                aq.scales()[i / n] as f64 * layer.weight().scales()[i % n] as f64 * want[i] as f64;
            let ulp = f16::from_f64(r).to_f64().abs().max(6.1e-5) * 2f64.powi(-10);
            assert!(
                (y[i].to_f64() - r).abs() <= ulp,
                "W{w}A{a}: y[{i}] {} vs {r}",
                y[i]
            );
        }
        // The quantized layer approximates the f32 product (a loose sanity bound).
        if w >= 3 {
            let mut num = 0.0;
            let mut den = 0.0;
            for i in 0..m {
                for j in 0..n {
                    let exact: f64 = (0..k)
                        .map(|c| xf[i * k + c] as f64 * weight[c * n + j] as f64)
                        .sum();
                    num += (y[i * n + j].to_f64() - exact).powi(2);
                    den += exact * exact;
                }
            }
            assert!(
                (num / den).sqrt() < 0.2,
                "W{w}A{a}: relative error {}",
                (num / den).sqrt()
            );
        }
    }
}

#[test]
fn apt_linear_errors_name_the_argument() {
    use tilus::kernels::apt::AptLinear;
    let w = vec![0.5f32; 256 * 8];
    let msg = |r: Result<AptLinear, tilus::apt::AptError>| r.unwrap_err().to_string();
    assert!(msg(AptLinear::new(&w, 256, 8, 0, 2, None))
        .contains("argument `wbits`: bipolar-INT has 1 to 8 bits, not 0"));
    assert!(msg(AptLinear::new(&w, 256, 8, 2, 9, None)).contains("argument `abits`"));
    assert!(msg(AptLinear::new(&w, 128, 16, 2, 2, None))
        .contains("argument `k`: 128 is not a positive multiple of 256"));
    assert!(msg(AptLinear::new(&w, 256, 8, 2, 2, Some(128))).contains("argument `group`"));
    assert!(msg(AptLinear::new(&w[1..], 256, 8, 2, 2, None))
        .contains("argument `weight`: expected 2048 values, got 2047"));
    assert!(msg(AptLinear::new(&w, 256, 7, 2, 2, None)).contains("argument `n`"));
    let big = vec![0.5f32; 65536 * 8];
    assert!(
        msg(AptLinear::new(&big, 65536, 8, 8, 8, None)).contains("arguments `k`, `wbits`, `abits`")
    );
    let layer = AptLinear::new(&w, 256, 8, 2, 2, None).unwrap();
    let e = layer
        .forward_cpu(&[f16::ZERO; 255], 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argument `x`: expected 256 values, got 255"),
        "{e}"
    );
}

/// The fused decode kernel (`apt_gemv`: quantizer in the prologue, planes in shared memory)
/// gives the same bits as the quantizer + `apt_gemm`, for every bench width, ragged m, and k
/// that is not a multiple of the quantizer's chunk.
#[test]
fn fused_decode_matches_unfused() {
    use tilus::kernels::apt::AptLinear;
    let mut rng = rand::rng();
    for (w, a) in tilus::kernels::apt::bench::WIDTHS {
        for (m, n, k) in [(1, 64, 1024), (5, 32, 1536), (3, 32, 2048)] {
            let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
            assert!(layer.gemv_config(m, true).is_some(), "W{w}A{a}: fused");
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let fused = layer.gemv_config(m, true).unwrap();
            let (y1, acc1) = layer.forward_cpu_fused(&x, m, fused).unwrap();
            let (y2, acc2) = layer.forward_cpu_unfused(&x, m).unwrap();
            assert_eq!(acc1, acc2, "W{w}A{a} m={m} k={k}: products");
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y1), bits(&y2), "W{w}A{a} m={m} k={k}: outputs");
            assert!(acc1.iter().any(|&v| v != 0));
            // The fused kernel with register prefetch instead of the cp.async ring.
            let cfg = layer.gemv_config(m, true).unwrap();
            assert!(cfg.STAGES > 0);
            let cfg = tilus::kernels::apt::kernel::apt_gemv::Config { STAGES: 0, ..cfg };
            let (y3, acc3) = layer.forward_cpu_fused(&x, m, cfg).unwrap();
            assert_eq!(acc3, acc2, "W{w}A{a} m={m}: STAGES = 0 products");
            assert_eq!(bits(&y3), bits(&y2), "W{w}A{a} m={m}: STAGES = 0 outputs");
            // Split k in one launch (4 slices where k has a multiple of 4 steps), both
            // pipelines: the same bits; a split that does not divide the steps is refused.
            let steps = k / (cfg.KT as usize * 256);
            for stages in [0, 4] {
                let split = tilus::kernels::apt::kernel::apt_gemv::Config {
                    STAGES: stages,
                    SPLIT: 4,
                    ..cfg
                };
                match layer.forward_cpu_fused(&x, m, split) {
                    Ok((y4, acc4)) => {
                        assert_eq!(steps % 4, 0, "W{w}A{a} k={k}: accepted");
                        assert_eq!(acc4, acc2, "W{w}A{a} m={m} k={k}: split products");
                        assert_eq!(bits(&y4), bits(&y2), "W{w}A{a} m={m} k={k}: split");
                    }
                    Err(e) => {
                        assert_ne!(steps % 4, 0, "W{w}A{a} k={k}: {e}");
                        assert!(e.to_string().contains("split"), "{e}");
                    }
                }
            }
        }
    }
}

/// The popc launch's blocks keep the rounds of row groups `per_sm` a multiprocessor would
/// take, with the fewest blocks that do (so at most one group short of the most a block):
/// 57344 rows in groups of 32 on 132 SMs are 128 blocks of 14 groups.
#[test]
fn popc_blocks_keep_the_rounds_and_spread_the_groups() {
    use tilus::kernels::apt::PopcTiles;
    let llama = PopcTiles::for_shape(57344, 8192, 2);
    assert_eq!((llama.block_rows(), llama.per_sm), (32, 1));
    assert_eq!(llama.blocks(57344, 132), 128);
    let mut rng = rand::rng();
    for _ in 0..2000 {
        let tiles = PopcTiles {
            warps: rng.random_range(1..=16),
            rows: rng.random_range(1..=4),
            vec: 1,
            per_sm: rng.random_range(1..=4),
            stages: 0,
            qsplit: 1,
        };
        let n = 8 * rng.random_range(1..=20000usize);
        let sms = rng.random_range(1..=160usize);
        let tag = format!("{tiles:?} n = {n} sms = {sms}");
        let groups = n.div_ceil(tiles.block_rows());
        let slots = tiles.per_sm as usize * sms;
        let blocks = tiles.blocks(n, sms) as usize;
        assert!((1..=slots.min(groups)).contains(&blocks), "{tag}: {blocks}");
        assert_eq!(
            groups.div_ceil(blocks),
            groups.div_ceil(slots),
            "{tag}: rounds"
        );
        // The fewest blocks that take those rounds: one fewer would need another round.
        if blocks > 1 {
            assert!(
                groups.div_ceil(blocks - 1) > groups.div_ceil(slots),
                "{tag}: {blocks} is not the fewest"
            );
        }
    }
}

/// Every point the one-token tuner measures (`kernels::apt::tune::candidates`) is one its
/// kernel takes, the layer's rule first and none twice, with the popc kernel's and the
/// integer-mma kernel's points (split ones among them) where it serves, on the Llama-70B
/// layers and the long-row one; and on two small layers each computes the rule's bits on the
/// interpreter (a tuned layer changes speed, never results).
#[test]
fn decode_tune_points_match_the_rule() {
    use tilus::kernels::apt::linear::one_token_rule;
    use tilus::kernels::apt::tune::candidates;
    use tilus::kernels::apt::{AptLinear, DecodeTiles, ImmaTiles};
    for (w, a) in tilus::kernels::apt::bench::WIDTHS {
        for (n, k) in [(57344, 8192), (8192, 28672), (10240, 8192), (1024, 1024)] {
            let tag = format!("W{w}A{a} {n}x{k}");
            let c = candidates(n, k, w, a);
            assert_eq!(c[0], one_token_rule(n, k, w, a), "{tag}");
            let popc = c.iter().filter(|t| matches!(t, DecodeTiles::Popc(_)));
            assert!(popc.count() >= 8, "{tag}: {} points", c.len());
            let imma: Vec<ImmaTiles> = c
                .iter()
                .filter_map(|t| match t {
                    DecodeTiles::Imma(t) => Some(*t),
                    _ => None,
                })
                .collect();
            if w <= 5 && a <= 7 && n >= 8192 {
                assert!(imma.len() >= 3, "{tag}: {imma:?}");
                assert!(imma.iter().any(|t| t.split > 1), "{tag}: {imma:?}");
            }
            for (i, t) in c.iter().enumerate() {
                assert!(!c[..i].contains(t), "{tag}: {t} twice");
                match t {
                    DecodeTiles::Popc(t) => t.config(k, w, a, false).map(|_| ()),
                    DecodeTiles::Imma(t) => t.config(n, k, w, a, false).map(|_| ()),
                }
                .unwrap_or_else(|e| panic!("{tag}: {t}: {e}"));
            }
        }
    }
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (n, k, w, a) in [(72, 1280, 3, 4), (128, 2048, 3, 4)] {
        let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
        let x: Vec<f16> = (0..k)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect();
        let (y0, acc0) = layer.forward_cpu_popc(&x, 1, None, None).unwrap();
        assert!(acc0.iter().any(|&v| v != 0));
        let c = candidates(n, k, w, a);
        assert_eq!(
            c.iter().any(|t| matches!(t, DecodeTiles::Imma(_))),
            n == 128,
            "{c:?}"
        );
        for t in c {
            let (y, acc) = match t {
                DecodeTiles::Popc(t) => layer.forward_cpu_popc(&x, 1, Some(t), None),
                DecodeTiles::Imma(t) => layer.forward_cpu_imma(&x, 1, Some(t)),
            }
            .unwrap();
            assert_eq!(acc, acc0, "{t}: products");
            assert_eq!(bits(&y), bits(&y0), "{t}: outputs");
        }
    }
}

/// Every point the batch tuner measures (`kernels::apt::tune::batch_candidates`) is a GEMM the
/// layer takes (`check_batch_path`), the rule's path first and none twice, with one and two
/// warpgroups of the 1-bit MMA, 128-row blocks only from 128 tokens, the outputs stored by the
/// threads and by the copy engine, and the integer MMA's two
/// column blocks from 16 tokens where k is a multiple of 16; a path the layer would not take,
/// or one token, is refused naming `path` or `m`. On two small ragged layers every point
/// computes the rule's bits on the interpreter (a tuned layer changes speed, never results).
#[test]
fn batch_tune_points_are_paths_the_layer_takes() {
    use tilus::kernels::apt::kernel::{apt_gemm_bgmma, apt_gemm_igmma};
    use tilus::kernels::apt::tune::batch_candidates;
    use tilus::kernels::apt::{AptLinear, AptPath};
    for (w, a) in tilus::kernels::apt::bench::WIDTHS {
        // (The points depend on n, not on k: short rows keep the weights small.)
        for (n, k) in [(14336, 256), (1024, 1024), (57344, 256)] {
            let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
            for m in [2, 16, 64, 300, 4096] {
                let tag = format!("W{w}A{a} {n}x{k} m={m}");
                let c = batch_candidates(&layer, m);
                assert_eq!(c[0], layer.path(m), "{tag}");
                for (i, p) in c.iter().enumerate() {
                    assert!(!c[..i].contains(p), "{tag}: {p:?} twice");
                    layer
                        .check_batch_path(m, p)
                        .unwrap_or_else(|e| panic!("{tag}: {e}"));
                }
                let bgmma: Vec<_> = c
                    .iter()
                    .filter_map(|p| match p {
                        AptPath::Bgmma(cfg) => Some(*cfg),
                        _ => None,
                    })
                    .collect();
                assert!(bgmma.len() >= 4, "{tag}: {bgmma:?}");
                assert!(bgmma.iter().any(|c| c.WGN == 1), "{tag}");
                assert!(bgmma.iter().any(|c| c.WGN == 2), "{tag}");
                // (Eight activation planes of 128 rows do not fit two stages.)
                let tall = bgmma.iter().any(|c| c.BM == 128);
                assert!(if m < 128 { !tall } else { tall || a == 8 }, "{tag}");
                let boxed = bgmma.iter().any(|c| c.STORE_BOX > 0);
                assert!(boxed && bgmma.iter().any(|c| c.STORE_BOX == 0), "{tag}");
                let igmma = c.iter().filter(|p| matches!(p, AptPath::Igmma(_))).count();
                assert_eq!(igmma, if m >= 16 { 2 } else { 0 }, "{tag}");
            }
        }
    }
    // Refusals name the argument.
    let layer = AptLinear::new(&random(1024 * 256), 1024, 256, 2, 2, None).unwrap();
    let rule = layer.path(64);
    let err = layer.check_batch_path(1, &rule).unwrap_err().to_string();
    assert!(err.contains("`m`"), "{err}");
    let AptPath::Bgmma(cfg) = rule else {
        panic!("W2A2 at 64 tokens: {rule:?}")
    };
    for bad in [
        AptPath::Bgmma(apt_gemm_bgmma::Config { WBITS: 3, ..cfg }),
        AptPath::Bgmma(apt_gemm_bgmma::Config { BN: 12, ..cfg }),
        AptPath::Bgmma(apt_gemm_bgmma::Config { STAGES: 9, ..cfg }),
        AptPath::Bgmma(apt_gemm_bgmma::Config {
            STORE_BOX: 7,
            ..cfg
        }),
        AptPath::Igmma(apt_gemm_igmma::Config {
            BN: 64,
            ..layer.igmma_config(64, false)
        }),
        AptPath::Unfused,
    ] {
        let err = layer.check_batch_path(64, &bad).unwrap_err().to_string();
        assert!(err.contains("`path`"), "{bad:?}: {err}");
    }
    // Every point, on the interpreter, gives the rule's bits.
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (m, n, k, w, a) in [(19, 40, 1280, 2, 2), (18, 24, 512, 3, 4)] {
        let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect();
        let (y0, acc0) = layer.forward_cpu_unfused(&x, m).unwrap();
        assert!(acc0.iter().any(|&v| v != 0));
        let points = batch_candidates(&layer, m);
        assert!(points.iter().any(|p| matches!(p, AptPath::Igmma(_))));
        for p in points {
            let (y, acc) = match p {
                AptPath::Bgmma(cfg) => layer.forward_cpu_bgmma(&x, m, cfg),
                AptPath::Igmma(cfg) => layer.forward_cpu_igmma(&x, m, cfg),
                other => panic!("{other:?}"),
            }
            .unwrap();
            assert_eq!(acc, acc0, "{p:?}: products");
            assert_eq!(bits(&y), bits(&y0), "{p:?}: outputs");
        }
    }
}

/// The popc decode kernel (`apt_gemv_popc`: the plane pairs counted on the CUDA cores) gives
/// the same bits as the quantizer + `apt_gemm`, for every bench width, one and several tokens,
/// `n` not a multiple of the block's rows and `k` not a multiple of the chunk, tilings of
/// 16-, 8- and 4-byte loads, register prefetch and cp.async rings of 2 and 4 stages, one, two
/// and four threads per activation word in the prologue, and grids
/// of one block per row group or fewer blocks walking several groups (one block walking all of
/// them).
#[test]
fn popc_decode_matches_unfused() {
    use tilus::kernels::apt::kernel::apt_gemv_popc;
    use tilus::kernels::apt::{AptLinear, PopcTiles};
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (w, a) in tilus::kernels::apt::bench::WIDTHS {
        for (m, n, k) in [(1, 40, 1280), (2, 64, 4608), (1, 24, 256)] {
            let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let (y2, acc2) = layer.forward_cpu_unfused(&x, m).unwrap();
            assert!(acc2.iter().any(|&v| v != 0));
            for (warps, rows, vec, stages, qsplit) in [
                (4, 4, 4, 0, 1),
                (8, 2, 2, 4, 2),
                (4, 1, 1, 2, 1),
                (16, 1, 4, 0, 4),
                (8, 2, 8, 0, 1),
                (4, 2, 1, 0, 4),
            ] {
                let tiles = PopcTiles {
                    warps,
                    rows,
                    vec,
                    per_sm: 2,
                    stages,
                    qsplit,
                };
                for blocks in [None, Some(1)] {
                    let tag = format!("W{w}A{a} m={m} n={n} k={k} {tiles:?} blocks {blocks:?}");
                    let (y, acc) = layer.forward_cpu_popc(&x, m, Some(tiles), blocks).unwrap();
                    assert_eq!(acc, acc2, "{tag}: products");
                    assert_eq!(bits(&y), bits(&y2), "{tag}: outputs");
                }
                // Without the products (`STORE_ACC = 0`, as the layer's forward launches it):
                // a one-element `acc_out` is enough and the outputs are the same bits.
                let cfg = tiles.config(k, w, a, false).unwrap();
                let mut y = vec![f16::NAN; m * n];
                let mut unused = [i32::MIN];
                apt_gemv_popc::interpret(
                    &cfg,
                    m as i32,
                    n as i32,
                    k as i32,
                    tiles.blocks(n, 3),
                    &x,
                    layer.planes(),
                    &layer.weight().row_sums(),
                    layer.weight().scales(),
                    &mut y,
                    &mut unused,
                )
                .unwrap();
                assert_eq!(bits(&y), bits(&y2), "W{w}A{a} {tiles:?}: without products");
                assert_eq!(unused[0], i32::MIN);
            }
        }
    }
    let layer = AptLinear::new(&random(256 * 8), 256, 8, 2, 2, None).unwrap();
    let bad = PopcTiles {
        warps: 4,
        rows: 4,
        vec: 8,
        per_sm: 2,
        stages: 0,
        qsplit: 1,
    };
    let e = layer
        .forward_cpu_popc(&[f16::ONE; 256], 1, Some(bad), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `tiles`"), "{e}");
    let e = layer
        .forward_cpu_popc(&[f16::ONE; 256], 1, None, Some(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `blocks`"), "{e}");
}

/// The tiling rule: decode tiles as before, the measured small-batch and prefill tilings on the
/// paper's largest shapes, and for every width and shape a tiling that divides `n`, keeps the
/// accumulator at 128 registers or fewer above 16 tokens (64 from 16 plane pairs), and passes
/// the kernel's checks.
#[test]
fn tiling_rule() {
    use tilus::kernels::apt::AptTiles;
    let t = |m, n, k, w, a| {
        let t = AptTiles::for_shape(m, n, k, w, a);
        [t.wm, t.wn, t.fm, t.fn_, t.kt, t.stages]
    };
    assert_eq!(t(1, 14336, 4096, 2, 2), [1, 4, 1, 1, 2, 0]);
    assert_eq!(t(64, 14336, 4096, 2, 2), [1, 8, 4, 2, 2, 3]);
    assert_eq!(t(64, 4096, 14336, 2, 2), [1, 4, 4, 1, 4, 4]);
    assert_eq!(t(40, 4096, 4096, 2, 2), [1, 4, 3, 1, 2, 3]);
    assert_eq!(t(4096, 14336, 4096, 1, 2), [2, 4, 2, 4, 2, 3]);
    assert_eq!(t(4096, 14336, 4096, 2, 2), [4, 2, 2, 4, 2, 3]);
    assert_eq!(t(4096, 14336, 4096, 3, 4), [2, 2, 1, 2, 2, 3]);
    for (w, a) in [(1, 1), (1, 2), (2, 2), (3, 4), (4, 4), (2, 8), (8, 8)] {
        for (n, k) in [
            (8, 256),
            (24, 768),
            (1024, 1024),
            (4096, 14336),
            (57344, 8192),
        ] {
            for m in [1, 16, 17, 33, 64, 65, 4096] {
                let tiles = AptTiles::for_shape(m, n, k, w, a);
                tiles.check().unwrap();
                let what = format!("W{w}A{a} m={m} {n}x{k}: {tiles:?}");
                // The rule's GEMM instantiates (W2A2 at 64 tokens and k = 8192 once unrolled
                // past the limit).
                tilus::kernels::apt::kernel::apt_gemm::program(&tiles.config(w, a, false))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(n % tiles.bn(), 0, "{what}");
                assert_eq!(k % tiles.bk(), 0, "{what}");
                let acc = 4 * w * a * (tiles.fm * tiles.fn_) as u32;
                let most = if w * a >= 16 { 64 } else { 128 };
                assert!(
                    m <= 16 || acc <= most || (tiles.fm, tiles.fn_) == (1, 1),
                    "{what}"
                );
            }
        }
    }
}

/// The planes on the 1-bit warpgroup MMA (`apt_gemm_bgmma`): the same exact products and output
/// bits as the 1-bit GEMM for every width, one and two warpgroups, ragged `m` and `n` (tile rows
/// past them read the next plane's rows and are never stored), `k` past one 1024-bit stage and
/// not a whole number of them.
#[test]
fn bgmma_matches_the_one_bit_gemm() {
    use tilus::kernels::apt::AptLinear;
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for ((w, a), (m, n, k)) in tilus::kernels::apt::bench::WIDTHS.into_iter().zip([
        (70, 40, 1280),
        (65, 72, 256),
        (20, 56, 2304),
        (130, 24, 512),
        (3, 16, 768),
    ]) {
        let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect();
        let (y1, acc1) = layer.forward_cpu_unfused(&x, m).unwrap();
        assert!(acc1.iter().any(|&v| v != 0));
        let rule = layer.bgmma_config(m, false);
        // One warpgroup, two along m, and two along n (each with every plane of its half, up
        // to the 192-register columns).
        let wide = 2 * layer.bgmma_columns(192) as i32;
        // And columns that are not a power of two: 24 a warpgroup (boxes of 8 are too narrow
        // for the copy engine's store) and 48 (boxes of 16).
        for (bm, bn, wgn) in [
            (64, rule.BN, 1),
            (128, (rule.BN / 2).max(8), 1),
            (64, 2 * rule.BN, 2),
            (64, wide, 2),
            (64, 48, 2),
            (64, 48, 1),
        ] {
            // Eight activation planes of 128 rows do not fit two stages, and a warpgroup holds
            // at most 192 accumulators a thread.
            let Some(cfg) = layer.bgmma_tiles(bm, bn, wgn, false) else {
                let too_many = (w * a) as i32 * bn / wgn / 2 > 192;
                assert!((a, bm) == (8, 128) || too_many, "W{w}A{a} BM={bm} BN={bn}");
                continue;
            };
            // The threads' stores, and the copy engine's in boxes of up to 64 columns where a
            // warpgroup has 16 (whatever the rule picks for the width).
            assert_eq!(cfg.STORE_BOX, 0);
            let boxed = tilus::kernels::apt::linear::bgmma_store_box(&cfg);
            assert_eq!(boxed > 0, (bn / wgn) % 16 == 0, "{cfg}");
            for store_box in [0, boxed] {
                let cfg = tilus::kernels::apt::kernel::apt_gemm_bgmma::Config {
                    STORE_BOX: store_box,
                    ..cfg
                };
                let (y2, acc2) = layer.forward_cpu_bgmma(&x, m, cfg).unwrap();
                let tag = format!("W{w}A{a} m={m} BM={bm} BN={bn} WGN={wgn} STORE_BOX={store_box}");
                assert_eq!(acc2, acc1, "{tag}: products");
                assert_eq!(bits(&y2), bits(&y1), "{tag}: output bits");
            }
        }
    }
}

/// The layer's tiles on the 1-bit warpgroup MMA: two warpgroups along `n` where 64-row blocks
/// number [`BGMMA_WIDE_BLOCKS`] (twice that for the 192-register columns; for one token, also
/// two of half the columns), else one, with 128 rows from 128 tokens; the accumulators of a warpgroup at most 192 registers; the path from 2
/// tokens where the integer MMA does not apply.
#[test]
fn bgmma_rule() {
    use tilus::kernels::apt::linear::BGMMA_WIDE_BLOCKS;
    use tilus::kernels::apt::{AptLinear, AptPath};
    let rule = |w, a, m, n| {
        let layer = AptLinear::new(&random(256 * n), 256, n, w, a, None).unwrap();
        let c = layer.bgmma_config(m, false);
        let regs = (w * a) as i32 * c.BN / c.WGN / 2;
        assert!(
            regs <= 192,
            "W{w}A{a} m={m} n={n}: {regs} accumulator registers"
        );
        assert!(matches!(layer.path(m), AptPath::Bgmma(p) if p == c) || m == 1 || m >= 256);
        (c.BM, c.BN, c.WGN)
    };
    assert_eq!(rule(2, 2, 64, 14336), (64, 128, 2));
    assert_eq!(rule(2, 2, 64, 4096), (64, 32, 1));
    assert_eq!(rule(2, 2, 200, 4096), (64, 128, 2));
    assert_eq!(rule(1, 2, 16, 4096), (64, 64, 1));
    assert_eq!(rule(3, 4, 64, 4096), (64, 32, 2));
    assert_eq!(rule(3, 4, 16, 8192), (64, 64, 2));
    assert_eq!(rule(1, 2, 16, 57344), (64, 256, 2));
    assert_eq!(rule(1, 2, 16, 14336), (64, 64, 1));
    // One token: two warpgroups of half the columns where they make enough blocks.
    assert_eq!(rule(1, 2, 1, 14336), (64, 128, 2));
    assert_eq!(rule(1, 2, 1, 8192), (64, 128, 2));
    assert_eq!(rule(1, 2, 1, 4096), (64, 64, 1));
    assert_eq!(rule(2, 2, 1, 14336), (64, 128, 2));
    // The copy engine stores the outputs from 64 tokens and 4 plane pairs, in boxes of up to
    // 64 columns of a warpgroup's at least 16.
    let store = |w, a, m, n| {
        let layer = AptLinear::new(&random(256 * n), 256, n, w, a, None).unwrap();
        layer.bgmma_config(m, false).STORE_BOX
    };
    assert_eq!(store(2, 2, 64, 14336), 64);
    assert_eq!(store(1, 2, 64, 14336), 0);
    assert_eq!(store(1, 4, 64, 14336), 64);
    assert_eq!(store(2, 2, 64, 4096), 32);
    assert_eq!(store(2, 2, 63, 4096), 0);
    assert_eq!(store(2, 2, 1, 14336), 0);
    assert_eq!(store(3, 4, 16, 1024), 0);
    assert_eq!(store(3, 4, 300, 1024), 16);
    assert_eq!(store(2, 2, 300, 1024), 32);
    // Past 192 accumulators a thread: refused.
    let w3a4 = AptLinear::new(&random(256 * 64), 256, 64, 3, 4, None).unwrap();
    assert!(w3a4.bgmma_tiles(64, 64, 2, false).is_some());
    assert!(w3a4.bgmma_tiles(64, 128, 2, false).is_none());
    assert!(w3a4.bgmma_tiles(64, 64, 1, false).is_none());
    assert_eq!(rule(3, 4, 16, 1024), (64, 8, 1));
    assert_eq!(rule(2, 8, 130, 1024), (64, 32, 2));
    // 128 rows of eight activation planes do not fit two stages: 64.
    assert_eq!(rule(2, 8, 130, 512), (64, 8, 1));
    assert_eq!(rule(2, 2, 130, 512), (128, 32, 1));
    let n = 2 * 64 * BGMMA_WIDE_BLOCKS;
    assert_eq!(rule(2, 2, 64, n).2, 2);
    assert_eq!(rule(2, 2, 64, n - 256).2, 1);
    assert!(matches!(
        AptLinear::new(&random(256 * 64), 256, 64, 2, 2, None)
            .unwrap()
            .path(1),
        AptPath::Popc(_)
    ));
}

/// One token takes the popc kernel (one launch) on every layer and width, also the mid-size
/// layers the 1-bit warpgroup MMA took until session 51, but where the integer-mma decode
/// kernel's rule fills the machine with blocks of 256 or 448 channels: 3- and 4-bit weights
/// (57344 here, and the Llama-70B layers with k split into slices), and 2-bit weights on long
/// `k` (8192 x 28672); and the portable path (popc at one token, the quantizer and the 1-bit
/// GEMM above) for a device without the warpgroup MMA. The one-token forward on the
/// interpreter gives the unfused path's products on the integer-mma path too.
#[test]
fn one_token_rule() {
    use tilus::kernels::apt::linear::{one_token_rule, DecodeTiles, IMMA_W2_MIN_K};
    use tilus::kernels::apt::{AptLinear, AptPath};
    // The rule on the Llama-70B layers and two of the paper's, as measured on an H200 (sessions
    // 56 and 57): (bn, split) where the integer-mma kernel won, popc where it lost.
    for (n, k, w, a, want) in [
        (57344, 8192, 3, 4, Some((448, 1))),
        (8192, 28672, 3, 4, Some((256, 4))),
        (10240, 8192, 3, 4, Some((256, 3))),
        (8192, 8192, 3, 4, Some((256, 4))),
        (8192, 28672, 2, 2, Some((256, 4))),
        (57344, 8192, 2, 2, None),
        (10240, 8192, 2, 2, None),
        (8192, 8192, 2, 2, None),
        // 64-channel blocks (the rule's fallback) lost.
        (1024, 8192, 3, 4, None),
        (4096, 14336, 2, 2, None),
        (14336, 4096, 3, 4, Some((448, 4))),
        (4096, 14336, 3, 4, Some((256, 7))),
        (57344, 8192, 4, 4, Some((448, 1))),
        (8192, 28672, 4, 4, Some((256, 4))),
        (10240, 8192, 4, 4, Some((256, 3))),
        (8192, 8192, 4, 4, Some((256, 4))),
        (8192, 28672, 1, 2, None),
        (57344, 8192, 1, 2, None),
    ] {
        let got = match one_token_rule(n, k, w, a) {
            DecodeTiles::Imma(t) => Some((t.bn, t.split)),
            DecodeTiles::Popc(_) => None,
        };
        assert_eq!(got, want, "W{w}A{a} {n}x{k}");
    }
    // 2-bit weights cross at IMMA_W2_MIN_K.
    let w2 = |k| matches!(one_token_rule(8192, k, 2, 2), DecodeTiles::Imma(_));
    assert!(w2(IMMA_W2_MIN_K) && !w2(IMMA_W2_MIN_K - 1024));
    for n in [1024, 8192, 10240, 16384, 57344] {
        for (w, a) in [(1, 2), (2, 2), (1, 4), (3, 4), (3, 2), (2, 8), (4, 4)] {
            let layer = AptLinear::new(&random(256 * n), 256, n, w, a, None).unwrap();
            assert!(matches!(layer.portable_path(1), AptPath::Popc(_)));
            assert_eq!(layer.portable_path(2), AptPath::Unfused);
            let want = if (w == 3 || w == 4) && n == 57344 {
                let tiles = layer.imma_tiles().unwrap();
                assert_eq!((tiles.bn, tiles.split), (448, 1), "W{w}A{a} n={n}");
                AptPath::Imma(tiles)
            } else {
                AptPath::Popc(layer.popc_tiles())
            };
            assert_eq!(layer.path(1), want, "W{w}A{a} n={n}");
            assert!(!matches!(layer.path(2), AptPath::Popc(_)), "W{w}A{a} n={n}");
        }
    }
    let mut rng = rand::rng();
    let (n, k) = (57344, 256);
    let layer = AptLinear::new(&random(k * n), k, n, 3, 4, None).unwrap();
    assert!(matches!(layer.path(1), AptPath::Imma(_)));
    let x: Vec<f16> = (0..k)
        .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect();
    let (y, acc) = layer.forward_cpu_acc(&x, 1).unwrap();
    let (y2, acc2) = layer.forward_cpu_unfused(&x, 1).unwrap();
    assert!(acc2.iter().any(|&v| v != 0));
    assert_eq!(acc, acc2, "products");
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y), bits(&y2), "outputs");
}

/// The codes on the integer warpgroup MMA (`apt_gemm_igmma`, the layer's path from
/// `IGMMA_MIN_M` tokens): the same exact products and the same output bits as the quantizer and
/// the 1-bit GEMM, for widths up to W2A8 (codes up to 255), ragged `m` and `n` (the copy
/// engine's boxes zero-fill the edges, past `n` and `m` too), one and two warpgroups; and the
/// layer's rule for the path (`IGMMA_MIN_M` tokens, `IGMMA_MIN_BLOCKS` blocks).
#[test]
fn igmma_matches_the_one_bit_gemm() {
    use tilus::kernels::apt::linear::IGMMA_MIN_M;
    use tilus::kernels::apt::{AptLinear, AptPath};
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for ((w, a), (m, n, k)) in tilus::kernels::apt::bench::WIDTHS.into_iter().zip([
        (70, 40, 512),
        (65, 24, 256),
        (20, 56, 768),
        (130, 8, 1280),
        (3, 16, 256),
    ]) {
        let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect();
        let (y1, acc1) = layer.forward_cpu_unfused(&x, m).unwrap();
        assert!(acc1.iter().any(|&v| v != 0));
        for bm in [64, 128] {
            let cfg = tilus::kernels::apt::kernel::apt_gemm_igmma::Config {
                BM: bm,
                BN: 128,
                ..layer.igmma_config(m, false)
            };
            let (y2, acc2) = layer.forward_cpu_igmma(&x, m, cfg).unwrap();
            assert_eq!(acc2, acc1, "W{w}A{a} m={m} BM={bm}: products");
            assert_eq!(bits(&y2), bits(&y1), "W{w}A{a} m={m} BM={bm}: output bits");
        }
    }
    // The rule: from IGMMA_MIN_M tokens, more than BGMMA_MAX_PAIRS plane pairs and
    // IGMMA_MIN_BLOCKS blocks, of 128 x 256 where there are that many, else of 128 x 128.
    use tilus::kernels::apt::linear::{BGMMA_MAX_PAIRS, IGMMA_MIN_BLOCKS};
    let rows = IGMMA_MIN_M.div_ceil(128);
    let path_at = |n: usize, m: usize, (w, a): (u32, u32)| {
        AptLinear::new(&random(256 * n), 256, n, w, a, None)
            .unwrap()
            .path(m)
    };
    let bn_at = |n: usize, m: usize| match path_at(n, m, (3, 4)) {
        AptPath::Igmma(cfg) => Some(cfg.BN),
        _ => None,
    };
    let n = 256 * IGMMA_MIN_BLOCKS / rows;
    assert_eq!(bn_at(n, IGMMA_MIN_M), Some(256));
    assert_eq!(bn_at(n, IGMMA_MIN_M - 1), None);
    assert_eq!(bn_at(n - 256, IGMMA_MIN_M), Some(128));
    assert_eq!(bn_at(n / 2, IGMMA_MIN_M), Some(128));
    assert_eq!(bn_at(n / 2 - 128, IGMMA_MIN_M), None);
    // Up to BGMMA_MAX_PAIRS plane pairs the planes stay on the 1-bit warpgroup MMA.
    assert_eq!(BGMMA_MAX_PAIRS, 4);
    for (widths, igmma) in [
        ((1, 2), false),
        ((2, 2), false),
        ((3, 2), true),
        ((1, 8), true),
    ] {
        let p = path_at(4 * n, 4096, widths);
        assert_eq!(matches!(p, AptPath::Igmma(_)), igmma, "{widths:?}: {p:?}");
        assert_eq!(matches!(p, AptPath::Bgmma(_)), !igmma, "{widths:?}: {p:?}");
    }
}

/// The weight re-layout kernel (`apt_split_planes`) on the interpreter: for every width, random
/// codes into the host's planes and row sums bit for bit (`k` of fewer words than a chunk, of
/// one chunk and a ragged second), and a quantized matrix's planes; bad arguments named.
#[test]
fn split_planes_matches_the_host() {
    use tilus::kernels::apt::relayout::split_planes_cpu;
    let mut rng = rand::rng();
    for bits in 1..=8u32 {
        for (rows, k) in [(3, 96), (2, 4096), (5, 4096 + 1280)] {
            let codes: Vec<u8> = (0..rows * k)
                .map(|_| rng.random_range(0..1u32 << bits) as u8)
                .collect();
            let (planes, sums) = split_planes_cpu(&codes, rows, k, bits).unwrap();
            let kw = k / 32;
            let mut want = vec![0u32; bits as usize * rows * kw];
            for p in 0..bits as usize {
                for r in 0..rows {
                    for c in 0..k {
                        let bit = (codes[r * k + c] as u32 >> p) & 1;
                        want[(p * rows + r) * kw + c / 32] |= bit << (c % 32);
                    }
                }
            }
            let tag = format!("{bits} bits, {rows} x {k}");
            assert_eq!(planes, want, "{tag}: planes");
            let want_sums: Vec<i32> = codes
                .chunks(k)
                .map(|r| r.iter().map(|&c| c as i32).sum())
                .collect();
            assert_eq!(sums, want_sums, "{tag}: sums");
        }
        let q = AptMatrix::quantize(&random(4 * 512), 4, 512, bits, ScaleRule::Max).unwrap();
        let (planes, sums) = split_planes_cpu(q.codes(), 4, 512, bits).unwrap();
        assert_eq!(
            planes,
            q.planes().unwrap(),
            "{bits} bits: a quantized matrix"
        );
        assert_eq!(sums, q.row_sums(), "{bits} bits: a quantized matrix");
    }
    let err = |codes: &[u8], rows, k, bits| {
        split_planes_cpu(codes, rows, k, bits)
            .unwrap_err()
            .to_string()
    };
    assert!(err(&[0; 64], 2, 32, 0).contains("`bits`"));
    assert!(err(&[0; 64], 2, 32, 9).contains("`bits`"));
    assert!(err(&[0; 64], 1, 64 - 16, 2).contains("`k`"));
    assert!(err(&[0; 64], 0, 32, 2).contains("`rows`"));
    assert!(err(&[0; 63], 2, 32, 2).contains("`codes`"));
    assert!(err(&[4; 64], 2, 32, 2).contains("`code`"));
    assert!(err(&[0; 64], 2, 1 << 30, 2).contains("`k`"));
}

/// The integer-mma decode kernel computes the unfused path's exact products and output bits:
/// every width it takes (1- to 5-bit weights, 2 of them from two planes; activations up to 7
/// bits), one and two tokens, blocks of one and several mma tiles a warp, one and two k32
/// fragments a field, rings of 2 and 3 stages, `k` over the token's 4096-element chunks of
/// capacity and not a multiple of the prologue's 8 elements a thread, and k whole or split in
/// 2 slices and in 5 uneven ones.
#[test]
fn imma_decode_matches_unfused() {
    use tilus::kernels::apt::{AptLinear, ImmaTiles};
    let mut rng = rand::rng();
    let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (w, a) in [(1, 2), (2, 2), (3, 4), (4, 4), (5, 3), (2, 7)] {
        let p = tilus::kernels::apt::imma::fields_per_byte(w).unwrap();
        for (m, n, k, tiles) in [
            (
                1,
                128,
                512,
                ImmaTiles {
                    bn: 64,
                    bk: 32 * p,
                    warps: 4,
                    stages: 2,
                    split: 2,
                },
            ),
            (
                2,
                256,
                1024,
                ImmaTiles {
                    bn: 128,
                    bk: 64 * p,
                    warps: 4,
                    stages: 3,
                    split: 1,
                },
            ),
            (
                1,
                64,
                4608,
                ImmaTiles {
                    bn: 32,
                    bk: 32 * p,
                    warps: 2,
                    stages: 3,
                    split: 5,
                },
            ),
        ] {
            let tag = format!("W{w}A{a} m={m} n={n} k={k} {tiles:?}");
            let layer = AptLinear::new(&random(k * n), k, n, w, a, None).unwrap();
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect();
            let (y2, acc2) = layer.forward_cpu_unfused(&x, m).unwrap();
            assert!(acc2.iter().any(|&v| v != 0), "{tag}");
            let (y, acc) = layer.forward_cpu_imma(&x, m, Some(tiles)).unwrap();
            assert_eq!(acc, acc2, "{tag}: products");
            assert_eq!(bits(&y), bits(&y2), "{tag}: outputs");
        }
    }
}
