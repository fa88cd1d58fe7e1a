//! VQ-GEMV on the CPU interpreter (issue 18): the codebook-centric kernel with one and 16
//! copies of the codebook (one and 8 of QuiP#-4's E8P table), several rings and k splits, and the naive GC kernel against an f64 reference of the dequantized weight, fresh random codes,
//! codebooks and activations, outputs poisoned (NaN) before the run.

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tilus::kernels::vq::cache::{CacheTiers, CachedWeight};
use tilus::kernels::vq::{VqCache, VqLinear};
use tilus::vq::kmeans::KmeansOptions;
use tilus::vq::{CodebookScope, VqConfig, VqWeight};

/// A weight of `config` with random skewed codes (low codes more frequent, so the reorder and
/// the cache's tiers matter) and random f16 codebooks and scales.
fn random_weight(config: VqConfig, n: usize, k: usize, rng: &mut StdRng) -> VqWeight {
    VqWeight::random(config, n, k, rng.random(), true).unwrap()
}

/// `y = x · Wᵀ` in f64 from the dequantized weight.
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

fn check(tag: &str, got: &[f16], want: &[f64]) {
    let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        assert!(g.is_finite(), "{tag}: y[{i}] = {g} (poison left?)");
        let err = (g - w).abs() / w.abs().max(rms);
        assert!(
            err < 1e-2,
            "{tag}: y[{i}] = {g}, reference {w} (rel err {err})"
        );
    }
}

/// Small formats that fit the interpreter's time: GPTVQ-2 itself on two 256 x 256 tiles, a
/// GPTVQ-like one with 2 x 2 tiles of 32 x 128 (codebook switches along k and n), a GPTVQ-like
/// one with one codebook for the matrix (its 16 copies laid out by the host), AQLM-2x8 (one
/// codebook of vectors of 8, 8 copies laid out by the host), AQLM-3 itself
/// (4096 entries, two stages, scales), QuiP#-4 itself (two E8P lattice codes, decoded from the
/// absolute rows, the sign masks and the shifts).
fn cases() -> Vec<(VqConfig, usize, usize)> {
    let small_tiles = VqConfig {
        name: "tiles",
        scope: CodebookScope::Tile {
            rows: 32,
            cols: 128,
        },
        ..VqConfig::GPTVQ_2
    };
    let one_book = VqConfig {
        name: "one4",
        scope: CodebookScope::Matrix,
        ..VqConfig::GPTVQ_2
    };
    // Vectors of 8 in per-tile codebooks: two buffers of 8 copies also make 256-byte rows
    // (the one-`PRMT` look-up of every product).
    let tiles8 = VqConfig {
        name: "tiles8",
        scope: CodebookScope::Tile {
            rows: 64,
            cols: 128,
        },
        ..VqConfig::AQLM_2X8
    };
    vec![
        (VqConfig::GPTVQ_2, 256, 512),
        (small_tiles, 64, 256),
        (tiles8, 64, 256),
        (one_book, 64, 256),
        (VqConfig::AQLM_2X8, 64, 256),
        (VqConfig::AQLM_3, 64, 256),
        (VqConfig::QUIP_4, 64, 256),
    ]
}

#[test]
fn vq_gemv_matches_reference_with_every_cache() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0018);
    for (config, n, k) in cases() {
        let w = random_weight(config, n, k, &mut rng);
        let layer = VqLinear::new(w.clone()).unwrap();
        // The default cache; then the other copy count where vectors of 4 allow it, with a
        // ring of 2 and k split in two (the last block of each tile adds the partial sums)
        // where the codebook tiles allow.
        let mut caches = vec![(layer.cache(), 3, 1)];
        // 16 copies and one for vectors of 4; 8 and one for vectors of 8 where they fit (the
        // E8P table, AQLM-2x8's one codebook; not AQLM-3's 4096 entries).
        let copies = if config.vector_size == 4 { 16 } else { 8 };
        let other = VqCache {
            replicas: copies + 1 - layer.cache().replicas,
        };
        if layer.clone().with_cache(other).is_ok() {
            caches.push((other, 2, 2));
        } else {
            caches.push((layer.cache(), 2, 2));
        }
        for (ci, (cache, stages, split)) in caches.into_iter().enumerate() {
            let layer = VqLinear::new(w.clone())
                .unwrap()
                .with_stages(stages)
                .unwrap()
                .with_cache(cache)
                .unwrap();
            let layer = layer.clone().with_split(split).unwrap_or(layer);
            // The second runs the transposed product on 16 tokens per block at every m, the
            // first the layer's choice (for vectors of 4 the paired product up to m = 4, then
            // transposed on 8 tokens up to m = 8, else `y = x · Wᵀ`).
            let layer = if ci == 1 {
                layer.with_product(2).unwrap()
            } else {
                layer
            };
            for m in [1, 3, 6, 16] {
                // Only the default cache at every m (the interpreter's time).
                if ci > 0 && m != 3 && m != 16 {
                    continue;
                }
                let x: Vec<f16> = (0..m * k)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                let want = reference(&w, &x, m);
                let tag = format!(
                    "{} {n}x{k} m={m} {cache:?} stages {stages} split {} product {}",
                    config.name,
                    layer.config(m).SPLIT,
                    layer.config(m).TR
                );
                check(&tag, &layer.forward_cpu(&x, m).unwrap(), &want);
                if ci == 0 {
                    check(
                        &format!("{tag} GC"),
                        &layer.forward_cpu_gc(&x, m).unwrap(),
                        &want,
                    );
                }
            }
        }
    }
}

/// Split k in one launch: the block that counts last on a tile's semaphore adds the partial
/// sums in split order, so the output is the same bits whichever order the blocks run in, and
/// it matches the reference; the atomic sum (its partials added into one `[m, n]` sum) matches
/// the reference too.
#[test]
fn vq_split_k_is_the_same_in_every_block_order() {
    use tilus::core::interp::BlockOrder;
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut split_cases = 0;
    for (config, n, k) in cases() {
        let w = random_weight(config, n, k, &mut rng);
        let base = VqLinear::new(w.clone()).unwrap();
        let Some(layer) = [4, 2]
            .into_iter()
            .find_map(|s| base.clone().with_split(s).ok())
        else {
            continue;
        };
        let atomic = layer.clone().with_ordered_split(false);
        let layer = layer.with_ordered_split(true);
        split_cases += 1;
        for m in [3, 9] {
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let tag = format!(
                "{} {n}x{k} m={m} split {} seed {seed}",
                config.name,
                layer.config(m).SPLIT
            );
            let want = reference(&w, &x, m);
            let first = layer.forward_cpu(&x, m).unwrap();
            check(&tag, &first, &want);
            // The atomics' sum, in two orders, against the reference.
            for order in [BlockOrder::Launch, BlockOrder::Reversed] {
                let got = atomic.forward_cpu_ordered(&x, m, &order).unwrap();
                check(&format!("{tag} atomic {order:?}"), &got, &want);
            }
            for order in [
                BlockOrder::Reversed,
                BlockOrder::Shuffled(rng.random()),
                BlockOrder::Shuffled(rng.random()),
            ] {
                let again = layer.forward_cpu_ordered(&x, m, &order).unwrap();
                let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&again), bits(&first), "{tag} {order:?}");
            }
        }
    }
    assert!(split_cases >= 2, "the cases must include splittable layers");
}

/// The paired product (`with_product(3)`: an mma row pair per output row, 4 tokens a block) on
/// the formats with vectors of 4: GPTVQ-2, small tiles (codebook switches along k and n), one
/// codebook (copies laid out by the host) and a two-stage format with per-channel scales; at
/// 1 to 6 tokens (two block rows), both copy counts, whole k and k split in two by ordered
/// partials (in two block orders, to the same bits) and by atomics; formats with vectors of 8
/// are refused naming `product`.
#[test]
fn vq_paired_product_matches_reference() {
    use tilus::core::interp::BlockOrder;
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let two_stage = VqConfig {
        name: "rvq4",
        residuals: 2,
        channel_scale: true,
        ..VqConfig::GPTVQ_2
    };
    let mut formats: Vec<_> = cases()
        .into_iter()
        .filter(|(c, _, _)| c.vector_size == 4)
        .collect();
    formats.push((two_stage, 256, 512));
    for (config, n, k) in formats {
        let w = random_weight(config, n, k, &mut rng);
        for replicas in [16, 1] {
            let Ok(layer) = VqLinear::new(w.clone())
                .unwrap()
                .with_cache(VqCache { replicas })
            else {
                continue;
            };
            let layer = layer.with_product(3).unwrap();
            for (m, split) in [(1, 1), (4, 1), (6, 1), (1, 2), (3, 2)] {
                let Ok(layer) = layer.clone().with_split(split) else {
                    continue;
                };
                let x: Vec<f16> = (0..m * k)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                let want = reference(&w, &x, m);
                let tag = format!(
                    "{} {n}x{k} m={m} copies {replicas} split {split} seed {seed}",
                    config.name
                );
                assert_eq!(layer.config(m).TR, 3, "{tag}");
                let first = layer.forward_cpu(&x, m).unwrap();
                check(&tag, &first, &want);
                if split > 1 {
                    let again = layer
                        .forward_cpu_ordered(&x, m, &BlockOrder::Reversed)
                        .unwrap();
                    let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&again), bits(&first), "{tag} reversed");
                    let atomic = layer.clone().with_ordered_split(false);
                    check(
                        &format!("{tag} atomic"),
                        &atomic.forward_cpu(&x, m).unwrap(),
                        &want,
                    );
                }
            }
        }
    }
    let w = random_weight(VqConfig::AQLM_2X8, 64, 256, &mut rng);
    let e = VqLinear::new(w)
        .unwrap()
        .with_product(3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`product`") && e.contains("vectors of 4"), "{e}");
}

#[test]
fn vq_linear_from_kmeans_end_to_end() {
    // A weight quantized by k-means (GPTVQ-2): the layer's output matches x · dequant(W).
    let mut rng = StdRng::seed_from_u64(7);
    let (n, k, m) = (256, 256, 2);
    let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let q = VqWeight::quantize(
        &w,
        n,
        k,
        VqConfig::GPTVQ_2,
        KmeansOptions { iters: 3, seed: 1 },
    )
    .unwrap();
    let layer = VqLinear::new(q.clone()).unwrap();
    let x: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    check(
        "kmeans gptvq2",
        &layer.forward_cpu(&x, m).unwrap(),
        &reference(&q, &x, m),
    );
}

#[test]
fn vq_linear_errors_name_the_argument() {
    let mut rng = StdRng::seed_from_u64(3);
    let cq = random_weight(VqConfig::CQ_2, 64, 256, &mut rng);
    let e = VqLinear::new(cq).unwrap_err().to_string();
    assert!(e.contains("`weight`") && e.contains("columns"), "{e}");
    let w = random_weight(VqConfig::GPTVQ_2, 256, 256, &mut rng);
    let layer = VqLinear::new(w).unwrap();
    let e = layer
        .forward_cpu(&[f16::ZERO; 10], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`x`"), "{e}");
    let e = layer.forward_cpu(&[], 0).unwrap_err().to_string();
    assert!(e.contains("`m`"), "{e}");
    let e = layer
        .clone()
        .with_cache(VqCache { replicas: 4 })
        .unwrap_err()
        .to_string();
    assert!(e.contains("`cache`"), "{e}");
}

/// One token by tables (`tilus::kernels::vq::lut`): AQLM-3 itself (4096 entries, two stages,
/// 12-bit codes, scales), a one-stage format of 256 entries (8-bit codes, no scales) and one of
/// 2048 entries (11-bit codes: the look-up keeps its bounds check), with the rule's tiling and
/// with blocks of 4 warps, 2 rows per thread and a k split, in launch and reversed block order
/// (the sums are added by atomics), against the f64 reference; the direct kernel on the same
/// token agrees; formats without a table path are refused naming `lut`.
#[test]
fn vq_lut_one_token_matches_reference() {
    use tilus::kernels::vq::lut::LutTiling;
    use tilus_core::interp::BlockOrder;
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let one_stage = VqConfig {
        name: "vq8x256",
        log2_entries: 8,
        residuals: 1,
        channel_scale: false,
        ..VqConfig::AQLM_3
    };
    let eleven = VqConfig {
        name: "vq8x2048x2",
        log2_entries: 11,
        ..VqConfig::AQLM_3
    };
    for (config, n, k) in [
        (VqConfig::AQLM_3, 256, 512),
        (one_stage, 256, 1024),
        (eleven, 256, 256),
    ] {
        let w = random_weight(config, n, k, &mut rng);
        let layer = VqLinear::new(w.clone()).unwrap();
        assert!(
            layer.lut_tiling(1).is_some(),
            "{} takes the tables",
            config.name
        );
        assert!(layer.lut_tiling(2).is_none(), "tables are for one token");
        let x: Vec<f16> = (0..k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let want = reference(&w, &x, 1);
        let tag = format!("{} {n}x{k} seed {seed:#x}", config.name);
        check(
            &format!("{tag} rule"),
            &layer.forward_cpu(&x, 1).unwrap(),
            &want,
        );
        for tables in [2, 1] {
            let tiled = layer
                .clone()
                .with_lut_tiling(LutTiling {
                    warps: 4,
                    rs: 2,
                    per: 2,
                    tables,
                })
                .unwrap();
            for order in [BlockOrder::Launch, BlockOrder::Reversed] {
                let got = tiled.forward_cpu_ordered(&x, 1, &order).unwrap();
                check(
                    &format!("{tag} 4 warps, rs 2, per 2, {tables} tables, {order:?}"),
                    &got,
                    &want,
                );
            }
        }
        let direct = layer.clone().with_lut(false).unwrap();
        assert!(direct.lut_tiling(1).is_none());
        check(
            &format!("{tag} direct"),
            &direct.forward_cpu(&x, 1).unwrap(),
            &want,
        );
    }
    let gptvq = VqLinear::new(random_weight(VqConfig::GPTVQ_2, 256, 256, &mut rng)).unwrap();
    assert!(gptvq.lut_tiling(1).is_none());
    let e = gptvq.with_lut(true).unwrap_err().to_string();
    assert!(
        e.contains("`lut`") && e.contains("one codebook per matrix"),
        "{e}"
    );
    let aqlm = VqLinear::new(random_weight(VqConfig::AQLM_3, 256, 512, &mut rng)).unwrap();
    let bad = LutTiling {
        warps: 4,
        rs: 3,
        per: 2,
        tables: 2,
    };
    let e = aqlm.clone().with_lut_tiling(bad).unwrap_err().to_string();
    assert!(e.contains("`lut`") && e.contains("do not divide n"), "{e}");
    let three = LutTiling {
        rs: 2,
        tables: 3,
        ..bad
    };
    let e = aqlm.with_lut_tiling(three).unwrap_err().to_string();
    assert!(e.contains("`lut`") && e.contains("3 tables"), "{e}");
}

/// The table path's rule on the Llama-3-70B layers (perf note 41): the ring of two tables where
/// a block walks 8 chunks, one-table blocks of 8 warps (two per multiprocessor) where it walks
/// fewer; every tiling the rule gives passes its own check.
#[test]
fn vq_lut_rule_on_llama_layers() {
    use tilus::kernels::vq::lut::LutTiling;
    let c = VqConfig::AQLM_3;
    let rule = |n, k| {
        let t = LutTiling::for_shape(c, n, k).unwrap();
        t.check(c, n, k).unwrap();
        (t.warps, t.rs, t.per, t.tables)
    };
    assert_eq!(rule(57344, 8192), (16, 28, 8, 2));
    assert_eq!(rule(8192, 28672), (8, 16, 7, 1));
    assert_eq!(rule(8192, 8192), (8, 16, 2, 1));
    assert_eq!(rule(10240, 8192), (8, 20, 2, 1));
    for (n, k) in [
        (128, 64),
        (1024, 2048),
        (2048, 4096),
        (4096, 11008),
        (28672, 8192),
    ] {
        if let Some(t) = LutTiling::for_shape(c, n, k) {
            t.check(c, n, k).unwrap();
        }
    }
}

/// The warps rule on the Llama-70B layers (H200 measurements in its docs): one codebook too
/// large for two blocks a multiprocessor takes 16 warps, except where 8 fill the waves much
/// better (10240 x 8192); AQLM-2x8's and GPTVQ-2's codebooks let two 8-warp blocks share one;
/// narrow layers halve the warps until they divide `n`.
#[test]
fn vq_warps_rule_on_llama_layers() {
    use tilus::kernels::vq::linear::warps_for;
    for c in [VqConfig::AQLM_3, VqConfig::QUIP_4] {
        for (n, k) in [(57344, 8192), (8192, 28672), (8192, 8192)] {
            assert_eq!(warps_for(c, n, k), 16, "{} {n}x{k}", c.name);
        }
        assert_eq!(warps_for(c, 10240, 8192), 8, "{} 10240x8192", c.name);
        assert_eq!(warps_for(c, 96, 512), 1, "{} 96x512", c.name);
    }
    for c in [VqConfig::AQLM_2X8, VqConfig::GPTVQ_2] {
        for (n, k) in [(57344, 8192), (8192, 28672), (8192, 8192), (10240, 8192)] {
            assert_eq!(warps_for(c, n, k), 8, "{} {n}x{k}", c.name);
        }
    }
}

/// The tuner's space (`tilus::kernels::vq::tune::candidates`): for every format, at 1 and 16
/// tokens, each point applies to the layer (the knobs' own checks accept it) and is the
/// kernel configuration the layer then launches; the rules' point is among them; 16 tokens
/// also try the transposed 16-token product, one token of vectors of 4 the unpaired transposed
/// one; no point twice.
#[test]
fn vq_tune_candidates_are_valid_and_hold_the_rules_point() {
    use tilus::kernels::vq::tune::{candidates, VqTuning};
    let mut rng = StdRng::seed_from_u64(0x7e_0019);
    for (config, n, k) in [
        (VqConfig::GPTVQ_2, 512, 1024),
        (VqConfig::AQLM_2X8, 512, 1024),
        (VqConfig::AQLM_3, 512, 1024),
        (VqConfig::QUIP_4, 512, 1024),
    ] {
        let layer = VqLinear::new(random_weight(config, n, k, &mut rng)).unwrap();
        for m in [1, 16] {
            let points = candidates(&layer, m);
            let tag = format!("{} {n}x{k} m={m}", config.name);
            let rule = layer.config(m);
            let rules = VqTuning {
                replicas: layer.cache().replicas,
                warps: layer.warps(),
                stages: layer.stages(),
                split: rule.SPLIT as usize,
                product: rule.TR as usize,
            };
            assert!(points.contains(&rules), "{tag}: {rules} not in {points:?}");
            assert_eq!(
                points.iter().filter(|p| p.product == 2).count() > 0,
                m == 16,
                "{tag}"
            );
            // One token of vectors of 4 pairs rows by the rule, and the tuner tries the
            // unpaired product beside it.
            let paired = m == 1 && config.vector_size == 4;
            assert_eq!(rule.TR == 3, paired, "{tag}");
            assert_eq!(points.iter().any(|p| p.product == 3), paired, "{tag}");
            assert_eq!(points.iter().any(|p| p.product == 1), m == 1, "{tag}");
            for (i, p) in points.iter().enumerate() {
                assert!(!points[..i].contains(p), "{tag}: {p} twice");
                let tuned = p
                    .apply(layer.clone())
                    .unwrap_or_else(|e| panic!("{tag}: {p}: {e}"));
                let cfg = tuned.config(m);
                assert_eq!(
                    (cfg.REP, cfg.WN, cfg.STAGES, cfg.SPLIT, cfg.TR),
                    (
                        p.replicas as i32,
                        p.warps as i32,
                        p.stages as i32,
                        p.split as i32,
                        p.product as i32
                    ),
                    "{tag}: {p}"
                );
            }
        }
    }
}

/// The layer's kernels generate no slow lowering (a code-generator note), for every format at
/// 1, 4 and 16 tokens: the activations' and codes' rings are asynchronous vector copies. (A
/// division in a copy's offset once made the activations' copy element by element, which
/// halved the 16-token kernel's speed, and nothing failed.)
#[test]
fn vq_kernels_lower_without_slow_paths() {
    use tilus::kernels::vq::kernel::vq_gemv;
    let mut rng = StdRng::seed_from_u64(0x5eed_0063);
    for (config, n, k) in cases() {
        let layer = VqLinear::new(random_weight(config, n, k, &mut rng)).unwrap();
        for m in [1, 4, 16] {
            let cfg = layer.config(m);
            let program = vq_gemv::program(&cfg).unwrap();
            let cuda = tilus::core::codegen::emit(&program, &Default::default()).unwrap();
            assert!(
                cuda.notes.is_empty(),
                "{} m={m} {cfg}: {:?}",
                config.name,
                cuda.notes
            );
        }
    }
    // The fused GEMM of each format it serves, at each block height.
    for config in [VqConfig::GPTVQ_2, VqConfig::AQLM_2X8, VqConfig::AQLM_3] {
        for bm in [64, 128, 256] {
            let cfg = tilus::kernels::vq::gemm::gemm_config(config, bm);
            if tilus::kernels::vq::gemm::gemm_stages(config, bm).is_none() {
                continue;
            }
            let program = tilus::kernels::vq::gemm::vq_gemm::program(&cfg).unwrap();
            let cuda = tilus::core::codegen::emit(&program, &Default::default()).unwrap();
            assert!(cuda.notes.is_empty(), "{cfg}: {:?}", cuda.notes);
        }
    }
}

/// The dense weight of prefill (`vq_dequant` on the interpreter) for every format of
/// [`cases`], against each value's f16 codebook rows summed in f64 and times its f16 scale:
/// the kernel sums in f32 and rounds once, so every value is within f16's half unit of the
/// exact one. The codebook-for-the-matrix format with one copy and 16 (the naive kernel's
/// codebooks come from the layer or the weight) and QuiP#-4 (the expanded lattice).
#[test]
fn vq_dense_weight_matches_its_codebook_rows() {
    let mut rng = StdRng::seed_from_u64(0x5eed_de05);
    for (config, n, k) in cases() {
        let w = random_weight(config, n, k, &mut rng);
        let mut layers = vec![VqLinear::new(w.clone()).unwrap()];
        if config.name == "one4" {
            layers.push(
                layers[0]
                    .clone()
                    .with_cache(VqCache { replicas: 1 })
                    .unwrap(),
            );
        }
        let v = config.vector_size;
        for layer in layers {
            let tag = format!("{} {n}x{k} cache {:?}", config.name, layer.cache());
            let dense = layer.dense_cpu().unwrap();
            assert_eq!(dense.len(), n * k, "{tag}");
            for r in 0..n {
                let scale = w
                    .scales
                    .as_ref()
                    .map_or(1.0, |s| f16::from_f32(s[r]).to_f64());
                for c in 0..k {
                    let g = w.group_of(r, c / v);
                    let sum: f64 = (0..config.residuals)
                        .map(|s| f16::from_f32(w.entry(g, s, w.code(s, r, c / v))[c % v]).to_f64())
                        .sum();
                    let want = sum * scale;
                    let got = dense[r * k + c].to_f64();
                    assert!(got.is_finite(), "{tag}: w[{r}, {c}] = {got} (poison left?)");
                    assert!(
                        (got - want).abs() <= want.abs() * 1.001 / 2048.0 + 1.0 / (1 << 24) as f64,
                        "{tag}: w[{r}, {c}] = {got}, exact {want}"
                    );
                }
            }
        }
    }
}

/// Prefill's token counts: the rules' by default (one token never takes a prefill path; the
/// fused GEMM from `prefill_from`, the dense weight from `dense_from`; QuiP#-4, which has no
/// fused GEMM, the dense weight from its `prefill_from`), counts set by `with_prefill_from` and
/// `with_dense_from`, and a prefill count under 2 refused by name.
#[test]
fn vq_dense_from_sets_where_prefill_starts() {
    use tilus::kernels::vq::linear::{dense_from, prefill_from};
    let mut rng = StdRng::seed_from_u64(0xde05_f403);
    let (config, n, k) = cases()[0];
    let layer = VqLinear::new(random_weight(config, n, k, &mut rng)).unwrap();
    let from = prefill_from(config, n);
    let dense = dense_from(config);
    assert!(from > 16, "decode's token counts stay on the VQ kernels");
    assert!(!layer.takes_prefill(1) && !layer.takes_prefill(from - 1));
    assert!(layer.takes_fused(from) && layer.takes_fused(dense - 1) && !layer.takes_dense(from));
    assert!(layer.takes_dense(dense) && !layer.takes_fused(dense));
    let set = layer.clone().with_prefill_from(40).unwrap();
    assert!(!set.takes_prefill(39) && set.takes_fused(40) && set.takes_dense(1 << 20));
    let all_dense = set.clone().with_dense_from(0);
    assert!(all_dense.takes_dense(40) && !all_dense.takes_fused(40) && !all_dense.takes_dense(39));
    let never = layer.clone().with_prefill_from(usize::MAX).unwrap();
    assert!(!never.takes_prefill(1 << 20) && !never.takes_dense(1 << 20));
    for bad in [0, 1] {
        let e = layer
            .clone()
            .with_prefill_from(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`m`"), "{e}");
    }
    let quip = VqLinear::new(random_weight(VqConfig::QUIP_4, 64, 256, &mut rng)).unwrap();
    let from = prefill_from(VqConfig::QUIP_4, 64);
    assert!(quip.takes_dense(from) && !quip.takes_fused(from) && !quip.takes_prefill(from - 1));
}

/// The fused VQ-GEMM (prefill) on the interpreter against the f64 reference: GPTVQ-2 itself
/// (two 256 x 256 tiles along k), per-tile codebooks of 128 x 64 (a switch every step, along n
/// too), AQLM-2x8 (one codebook, vectors of 8, two stages, scales; an odd step count: the last
/// step's synchronous product) and AQLM-3 itself (4096 entries: 12-bit codes; blocks of 128 on a ring of 3 stages); ragged token
/// counts on blocks of 64 and 128, outputs poisoned.
#[test]
fn vq_fused_gemm_matches_reference() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let tiles = VqConfig {
        name: "tiles128x64",
        scope: CodebookScope::Tile {
            rows: 128,
            cols: 64,
        },
        ..VqConfig::GPTVQ_2
    };
    let cases = [
        (VqConfig::GPTVQ_2, 256, 512, 70, Some(64)),
        (tiles, 256, 256, 21, None),
        (VqConfig::AQLM_2X8, 128, 192, 130, Some(128)),
        (VqConfig::AQLM_3, 128, 256, 9, Some(128)),
    ];
    for (config, n, k, m, bm) in cases {
        let w = random_weight(config, n, k, &mut rng);
        let layer = VqLinear::new(w.clone()).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let got = layer.forward_cpu_gemm(&x, m, bm).unwrap();
        let tag = format!("{} {n}x{k} m={m} bm={bm:?} seed {seed}", config.name);
        check(&tag, &got, &reference(&w, &x, m));
    }
}

/// Formats and options the fused GEMM does not take are refused by name.
#[test]
fn vq_fused_gemm_refusals_name_the_argument() {
    let mut rng = StdRng::seed_from_u64(0x9e33_0001);
    let quip = VqLinear::new(random_weight(VqConfig::QUIP_4, 64, 256, &mut rng)).unwrap();
    let e = quip.gemm_config(256, None).unwrap_err().to_string();
    assert!(e.contains("`weight`") && e.contains("E8P"), "{e}");
    let gptvq = VqLinear::new(random_weight(VqConfig::GPTVQ_2, 256, 256, &mut rng)).unwrap();
    let e = gptvq.gemm_config(256, Some(96)).unwrap_err().to_string();
    assert!(e.contains("`bm`"), "{e}");
    let aqlm3 = VqLinear::new(random_weight(VqConfig::AQLM_3, 128, 128, &mut rng)).unwrap();
    // AQLM-3's two codebooks take 128 KiB: blocks of 128 tokens fit a ring of 3 stages, 256 none.
    let c = aqlm3.gemm_config(4096, Some(128)).unwrap();
    assert_eq!((c.BM, c.STAGES), (128, 3), "{c}");
    let e = aqlm3.gemm_config(4096, Some(256)).unwrap_err().to_string();
    assert!(e.contains("`bm`"), "{e}");
    let x = vec![f16::ONE; 3 * 256];
    let e = gptvq.forward_cpu_gemm(&x, 2, None).unwrap_err().to_string();
    assert!(e.contains("`x`"), "{e}");
}

/// The three-tier codebook cache (`vq_gemv_cached`): each tier alone and together, entries in
/// registers (read by warp shuffles), shared memory and global memory; per-tile codebooks that
/// switch three times along k; one codebook of two stages; 12-bit codes; 1 and 3 tokens.
#[test]
fn vq_cached_gemv_matches_reference_for_every_tiering() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let cases = [
        (
            VqConfig::GPTVQ_2,
            256,
            768,
            [(0, 256), (32, 224), (32, 64), (0, 32), (64, 128)],
        ),
        (
            VqConfig::AQLM_2X8,
            32,
            512,
            [(0, 256), (32, 224), (32, 32), (0, 100), (96, 160)],
        ),
        (
            VqConfig::AQLM_3,
            32,
            512,
            [(0, 4096), (32, 2048), (32, 64), (0, 1000), (64, 4032)],
        ),
    ];
    for (config, n, k, tierings) in cases {
        let w = random_weight(config, n, k, &mut rng);
        for (i, (n_reg, n_shared)) in tierings.into_iter().enumerate() {
            let m = 1 + 2 * (i % 2);
            let x: Vec<f16> = (0..m * k)
                .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let tiers = CacheTiers { n_reg, n_shared };
            let cw = CachedWeight::new(&w, tiers).unwrap();
            let got = cw.forward_cpu(&x, m).unwrap();
            let tag = format!("{} {n}x{k} m={m} {tiers} seed {seed}", config.name);
            check(&tag, &got, &reference(&w, &x, m));
        }
    }
}

/// The cache's tiers are checked and chosen from the kernel's slack; bad input names its
/// argument.
#[test]
fn vq_cache_tiers_rule_and_errors() {
    // From the slack: GPTVQ-2's two buffers of 256 entries (4 KiB) hold every entry in shared
    // memory; AQLM-3's two stages of 4096 vectors of 8 (128 KiB) do not fit 24 KiB: 768
    // entries there, the rest from global memory, none in registers.
    assert_eq!(
        CacheTiers::for_kernel(VqConfig::GPTVQ_2),
        CacheTiers {
            n_reg: 0,
            n_shared: 256
        }
    );
    assert_eq!(
        CacheTiers::for_kernel(VqConfig::AQLM_3),
        CacheTiers {
            n_reg: 0,
            n_shared: 768
        }
    );
    let mut rng = StdRng::seed_from_u64(0x9e33_0002);
    let w = random_weight(VqConfig::GPTVQ_2, 256, 256, &mut rng);
    for (n_reg, n_shared) in [(16, 64), (0, 0), (32, 240), (2048, 1)] {
        let e = CachedWeight::new(&w, CacheTiers { n_reg, n_shared })
            .unwrap_err()
            .to_string();
        assert!(e.contains("`tiers`"), "{n_reg} {n_shared}: {e}");
    }
    let quip = random_weight(VqConfig::QUIP_4, 64, 256, &mut rng);
    let e = CachedWeight::new(&quip, CacheTiers::for_kernel(VqConfig::QUIP_4))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`weight`"), "{e}");
    let cw = CachedWeight::new(&w, CacheTiers::for_kernel(VqConfig::GPTVQ_2)).unwrap();
    let e = cw
        .forward_cpu(&vec![f16::ONE; 300], 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`x`"), "{e}");
    let e = cw.forward_cpu(&[], 0).unwrap_err().to_string();
    assert!(e.contains("`m`"), "{e}");
}
