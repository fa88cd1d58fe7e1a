//! The quantized matmul on the CPU interpreter against an f64 reference of the same quantized
//! weights: every weight type at every tested m, both activation types, every group size,
//! zero points, split-k, other tile shapes, and every argument error.
//!
//! Each run uses fresh random weights and activations (the seed is in every failure message)
//! and poisons the output with NaN first, so an element the kernel never writes fails.

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tilus::core::storage;
use tilus::kernels::linear::QuantizedLinear;
use tilus::kernels::qmatmul::weight_types;
use tilus::kernels::qmatmul::{
    build, decode_half, encode_half, prepare, relayout_inverse, OperandBytes, QMatmulConfig,
    QMatmulError, QMatmulKernel, QMatmulLayouts,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::DType;

const TOLERANCE: f64 = 1e-2;

fn dt(name: &str) -> DType {
    name.parse().unwrap()
}

fn group_of(rows: Option<usize>) -> Group {
    rows.map_or(Group::PerChannel, Group::Rows)
}

/// Uniform in `[lo, hi)`, never exactly zero.
fn nonzero(rng: &mut StdRng, lo: f32, hi: f32) -> f32 {
    loop {
        let v = rng.random_range(lo..hi);
        if v.abs() > 1e-3 {
            return v;
        }
    }
}

/// A configuration's random weight, quantized the way the configuration expects.
fn quantize(cfg: &QMatmulConfig, k: usize, n: usize, rng: &mut StdRng) -> QuantizedWeight {
    // Unsigned weights with zero points get a shifted distribution, so the zero points matter.
    let (lo, hi) = if cfg.has_zeros {
        (-0.5, 2.5)
    } else {
        (-2.0, 2.0)
    };
    let w: Vec<f32> = (0..k * n).map(|_| nonzero(rng, lo, hi)).collect();
    let unsigned = matches!(cfg.wdtype, DType::UInt(_));
    let q = QuantizedWeight::quantize(
        &w,
        k,
        n,
        cfg.wdtype,
        group_of(cfg.group_rows),
        cfg.adtype,
        unsigned,
    )
    .unwrap();
    assert_eq!(
        q.zeros.is_some(),
        cfg.has_zeros,
        "test setup: zeros for {}",
        cfg.wdtype
    );
    q
}

/// `||out - ref|| / ||ref||` of one run of `kernel` with `m` random activation rows.
fn run_once(
    kernel: &QMatmulKernel,
    q: &QuantizedWeight,
    m: usize,
    rng: &mut StdRng,
) -> Result<f64, String> {
    let cfg = &kernel.config;
    // Activations rounded to the activation type: the reference uses the same values.
    let x: Vec<f32> = (0..m * q.k)
        .map(|_| {
            let v = nonzero(rng, -1.0, 1.0);
            match cfg.adtype {
                DType::BF16 => bf16::from_f32(v).to_f32(),
                _ => f16::from_f32(v).to_f32(),
            }
        })
        .collect();
    run_on(kernel, q, m, &x)
}

/// [`run_once`] on given activations `x [m, k]`, already of the activation type.
fn run_on(kernel: &QMatmulKernel, q: &QuantizedWeight, m: usize, x: &[f32]) -> Result<f64, String> {
    let cfg = &kernel.config;
    let (k, n) = (q.k, q.n);
    let prepared = prepare(q, cfg).map_err(|e| e.to_string())?;
    let a = encode_half(x, cfg.adtype);
    // 0xFFFF is NaN in both f16 and bf16.
    let mut c = vec![0xFF; m * n * 2];
    kernel
        .run_cpu(m, &a, &prepared, &mut c)
        .map_err(|e| e.to_string())?;
    let out = decode_half(&c, cfg.adtype);
    let w = q.dequantize();
    let (mut err, mut norm) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k).map(|kk| x[i * k + kk] as f64 * w[kk * n + j]).sum();
            let o = out[i * n + j] as f64;
            if !o.is_finite() {
                return Err(format!("c[{i}, {j}] = {o} (never written, or overflowed)"));
            }
            err += (o - r).powi(2);
            norm += r * r;
        }
    }
    Ok((err / norm).sqrt())
}

/// Build `cfg`, quantize a fresh `[k, n]` weight and check every `m`.
fn check(cfg: QMatmulConfig, k: usize, n: usize, ms: &[usize]) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let q = quantize(&cfg, k, n, &mut rng);
    for &m in ms {
        match run_once(&kernel, &q, m, &mut rng) {
            Ok(rel) => assert!(
                rel < TOLERANCE,
                "{cfg:?} m={m} n={n} k={k} seed {seed}: relative error {rel}"
            ),
            Err(e) => panic!("{cfg:?} m={m} n={n} k={k} seed {seed}: {e}"),
        }
    }
}

fn default_cfg(wd: DType, ad: DType, group: Option<usize>) -> QMatmulConfig {
    QMatmulConfig::default_for(wd, ad, group, matches!(wd, DType::UInt(_)))
}

/// Every weight type at m = 1, 3, 16, 17 (one row, a partial tile, a full tile, a full tile
/// plus one row). Activation types and group sizes rotate over the types; the tests below
/// cover the other combinations.
fn every_weight_type_at_every_m(float: bool) {
    let groups = [Some(128), Some(64), Some(32), None];
    for (i, wd) in weight_types().into_iter().enumerate() {
        if (wd.kind() == tilus::core::dtype::Kind::Float) != float {
            continue;
        }
        let ad = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        let cfg = default_cfg(wd, ad, groups[i % 4]);
        check(cfg, 128, cfg.bn, &[1, 3, 16, 17]);
    }
}

#[test]
fn every_integer_weight_type_at_every_m() {
    every_weight_type_at_every_m(false);
}

#[test]
fn every_float_weight_type_at_every_m() {
    every_weight_type_at_every_m(true);
}

#[test]
fn f16_and_bf16_activations() {
    for wd in ["u4", "i4", "f4e2m1", "f8e5m2"] {
        for ad in [DType::F16, DType::BF16] {
            let cfg = default_cfg(dt(wd), ad, Some(64));
            check(cfg, 128, cfg.bn, &[3]);
        }
    }
}

#[test]
fn group_32_64_128_and_per_channel() {
    for wd in ["u4", "i5", "f6e3m2"] {
        for g in [Some(32), Some(64), Some(128), None] {
            let cfg = default_cfg(dt(wd), DType::F16, g);
            check(cfg, 256, cfg.bn, &[5]);
        }
    }
}

#[test]
fn zero_points_for_unsigned_types() {
    // Group 32 subtracts the zero point from each weight; whole-tile groups and per-channel
    // zero points come off the accumulator (row sums of A times the zero point).
    for wd in ["u1", "u2", "u4", "u8"] {
        for g in [Some(32), Some(128), None] {
            let cfg = default_cfg(dt(wd), DType::BF16, g);
            assert!(cfg.has_zeros);
            check(cfg, 128, cfg.bn, &[2]);
        }
    }
}

#[test]
fn split_k() {
    let cases = [
        ("i4", DType::F16, Some(32), 2),
        ("u3", DType::F16, None, 4),
        ("f8e4m3", DType::BF16, Some(64), 2),
        ("u6", DType::BF16, Some(128), 2),
    ];
    for (wd, ad, g, split_k) in cases {
        let cfg = QMatmulConfig {
            split_k,
            ..default_cfg(dt(wd), ad, g)
        };
        let kernel = build(&cfg).unwrap();
        // One program: the last block of each output tile sums the partial sums.
        assert_eq!(kernel.main.to_string().matches("fence()").count(), 2);
        check(cfg, 256, cfg.bn, &[3, 17]);
    }
}

#[test]
fn other_tile_shapes() {
    let i4 = default_cfg(dt("i4"), DType::F16, Some(32));
    let u2 = default_cfg(dt("u2"), DType::BF16, Some(128));
    let cases = [
        // Two warps along m, two along n (A and B both replicated).
        QMatmulConfig { bm: 32, ..i4 },
        // Four warps along m: B replicated four times.
        QMatmulConfig {
            bm: 64,
            bn: 64,
            ..u2
        },
        // Four groups per k tile; a group spanning four k tiles.
        QMatmulConfig { bk: 128, ..i4 },
        QMatmulConfig { bk: 32, ..u2 },
        // Pipeline depths and warp counts.
        QMatmulConfig { stages: 2, ..i4 },
        QMatmulConfig { stages: 4, ..u2 },
        QMatmulConfig {
            warps: 2,
            bn: 32,
            ..i4
        },
        QMatmulConfig {
            warps: 8,
            bm: 32,
            bn: 128,
            ..i4
        },
    ];
    for cfg in cases {
        check(cfg, 256, cfg.bn, &[17]);
    }
    // Several n tiles.
    check(QMatmulConfig { bn: 64, ..i4 }, 128, 192, &[3]);
}

/// The gemv method (weight as the mma's A operand, 8 activation rows per block): every weight
/// type at m = 1, 3, 8 and 9 (two row blocks), groups of one and two k tiles and per-channel
/// scales, both activation types, with and without split-k, one and several n tiles.
#[test]
fn gemv_every_weight_type() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let groups = [Some(64), Some(128), None];
    for (i, wd) in weight_types().into_iter().enumerate() {
        let ad = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        let cfg = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            bn: 64,
            bk: 64,
            split_k: 1 + i % 2,
            ..default_cfg(wd, ad, groups[i % 3])
        };
        let n = if i % 4 == 0 { 128 } else { 64 };
        check(cfg, 256, n, &[1, 3, 8, 9]);
    }
}

/// The look-up method (`Lut`: one token per block, tables of activation partial sums, the
/// weight as bit planes): every integer type (unsigned with zero points, signed two's
/// complement), groups of 32 to 256 rows (lane sets of 4 to 32), 4, 8 and 16 warps (the
/// tables' entries split 64, 32 and 16 per thread), one to four rows per lane set, both
/// activation types, split-k, several block columns, and m = 1 and 3 (a block per token).
#[test]
fn lut_every_integer_weight_type() {
    let types = [
        "u1", "u2", "i2", "u3", "i3", "u4", "i4", "u5", "i6", "u8", "i8",
    ];
    let groups = [128, 64, 256, 32];
    for (i, wd) in types.into_iter().enumerate() {
        let wd = dt(wd);
        let ad = if i % 2 == 0 { DType::F16 } else { DType::BF16 };
        // At most 128 weight bytes per thread and tile (group / 8 tables x planes x rows).
        let planes = wd.bits() as usize;
        let group = if groups[i % 4] / 8 * planes > 128 {
            128
        } else {
            groups[i % 4]
        };
        let warps = [8, 4, 16][i % 3];
        let rows = (128 / (group / 8 * planes)).clamp(1, 1 + i % 4);
        let bn = warps * group / 8 * rows;
        let cfg = default_cfg(wd, ad, Some(group)).lut(bn, warps, 1 + i % 2, 1);
        let k = 512 * cfg.split_k * (1 + i % 2);
        let n = if i % 3 == 0 { 2 * bn } else { bn };
        check(cfg, k, n, &[1, 3]);
    }
}

/// The look-up method's re-layout is a permutation: its inverse gives the codes back, and
/// its rules are errors naming the field.
#[test]
fn lut_relayout_round_trips_and_rules_name_the_field() {
    use tilus::kernels::qmatmul::{relayout, relayout_inverse};
    let mut rng = StdRng::seed_from_u64(rand::random());
    for (wd, group, warps, bn) in [("u1", 128, 8, 256), ("i3", 64, 4, 64), ("u4", 32, 16, 128)] {
        let cfg = default_cfg(dt(wd), DType::F16, Some(group)).lut(bn, warps, 1, 1);
        let q = quantize(&cfg, 1024, 2 * bn, &mut rng);
        let bytes = relayout(&q, &cfg).unwrap();
        assert_ne!(bytes, q.codes, "{wd}: the bytes are permuted");
        assert_eq!(
            relayout_inverse(&bytes, &cfg, q.k, q.n).unwrap(),
            q.codes,
            "{wd}"
        );
    }
    let base = default_cfg(dt("u2"), DType::F16, Some(128)).lut(256, 8, 1, 1);
    let cases = [
        (
            QMatmulConfig {
                wdtype: dt("f4e2m1"),
                has_zeros: false,
                ..base
            },
            "`wdtype`",
        ),
        (
            QMatmulConfig {
                group_rows: None,
                ..base
            },
            "`group_rows`",
        ),
        (
            QMatmulConfig {
                group_rows: Some(512),
                ..base
            },
            "`group_rows`",
        ),
        (QMatmulConfig { bm: 2, ..base }, "`bm`"),
        (QMatmulConfig { bk: 256, ..base }, "`bk`"),
        (QMatmulConfig { warps: 2, ..base }, "`warps`"),
        (QMatmulConfig { stages: 3, ..base }, "`stages`"),
        (QMatmulConfig { bn: 200, ..base }, "`bn`"),
        (QMatmulConfig { bn: 4096, ..base }, "`bn`"),
        // 16 warps x 3 blocks: 42 registers a thread.
        (
            QMatmulConfig {
                warps: 16,
                bn: 512,
                blocks_per_sm: 3,
                ..base
            },
            "`blocks_per_sm`",
        ),
        // Four blocks' tables: 256 KiB of shared memory.
        (
            QMatmulConfig {
                blocks_per_sm: 4,
                ..base
            },
            "`blocks_per_sm`",
        ),
        (
            QMatmulConfig {
                blocks_per_sm: 0,
                ..base
            },
            "`blocks_per_sm`",
        ),
        // Only the look-up kernel is compiled for several blocks per multiprocessor.
        (
            QMatmulConfig {
                blocks_per_sm: 2,
                ..default_cfg(dt("u2"), DType::F16, Some(128))
            },
            "`blocks_per_sm`",
        ),
    ];
    for (cfg, field) in cases {
        let e = err_text(build(&cfg));
        assert!(e.contains(field), "{cfg:?}: {e}");
    }
    let e = err_text(base.check_shape(1, 256, 768));
    assert!(e.contains("`k`"), "{e}");
}

/// The gemv method with several token tiles per block (`bm` 16, 24 and 32: each dequantized
/// weight fragment feeds `bm / 8` mmas): ragged m (a partial first tile, a partial last tile,
/// several row blocks), grouped and per-channel scales, zero points, biased and exact casts,
/// split-k, both activation types.
#[test]
fn gemv_token_tiles() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // (weight, activations, group, bm, bn, warps, split): bn / (16 warps) = 2 or 4 weight
    // fragments per warp, so that the token tiles and the fragments interleave in the locals.
    let cases = [
        ("u2", DType::F16, Some(64), 16, 128, 4, 1),
        ("i4", DType::BF16, Some(128), 24, 128, 2, 2),
        ("u3", DType::F16, None, 32, 128, 4, 1),
        ("f4e2m1", DType::F16, Some(64), 16, 128, 2, 2),
        ("i8", DType::BF16, None, 32, 128, 4, 2),
        ("u1", DType::BF16, Some(128), 32, 256, 4, 1),
    ];
    for (wd, ad, group, bm, bn, warps, split_k) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm,
            bn,
            bk: 64,
            warps,
            split_k,
            ..default_cfg(dt(wd), ad, group)
        };
        check(cfg, 256, 2 * bn, &[1, bm - 1, bm, bm + 3, 2 * bm + 5]);
    }
}

/// The warpgroup gemv (`GemvWgmma`: the weight in wgmma's register operand with its scales
/// and zero points applied, the activations from the shared ring, the wgmmas in flight across
/// k): 8 to 64 rows per block, one and two warpgroups, one, two and four 64-column tiles per
/// warpgroup, grouped and per-channel scales, zero points, split-k, both activation types,
/// ragged m, even and odd numbers of k tiles; the copy engine's ring (`bn <= 256`) and the
/// `cp.async` one; tall tiles of 128 and 256 rows.
#[test]
fn gemv_wgmma_matches_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // (weight, activations, group, bm, bn, warps, split)
    let cases = [
        ("u2", DType::F16, Some(64), 8, 128, 4, 1),
        ("i4", DType::BF16, Some(128), 16, 128, 8, 2),
        ("u3", DType::F16, None, 32, 128, 4, 1),
        ("f4e2m1", DType::F16, Some(64), 24, 256, 4, 2),
        ("i8", DType::BF16, None, 64, 64, 4, 1),
        ("u1", DType::BF16, Some(128), 16, 256, 4, 2),
        ("i3", DType::F16, Some(128), 8, 128, 8, 1),
        ("u4", DType::F16, Some(128), 64, 256, 4, 1),
        // Wider than a copy-engine box row: the cp.async ring.
        ("u2", DType::BF16, Some(128), 8, 512, 8, 1),
        // Tall token tiles (prefill), two blocks along m.
        ("i4", DType::F16, Some(128), 128, 128, 8, 1),
        ("u2", DType::BF16, Some(64), 256, 128, 8, 2),
    ];
    for (wd, ad, group, bm, bn, warps, split_k) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            split_k,
            ..default_cfg(dt(wd), ad, group)
        };
        check(cfg, 256, 2 * bn, &[1, bm + 3]);
        // An odd number of k tiles (the synchronous last tile), with the fewest stages.
        if group.is_none_or(|g| g == 64) && split_k == 1 {
            check(QMatmulConfig { stages: 3, ..cfg }, 192, bn, &[bm - 1]);
        }
    }
}

/// The warp-specialized warpgroup gemv (`specialize`: a producer warpgroup fills the copy
/// engine's ring, the consumers only wait for full stages): the same cases' shapes as the
/// plain one, one and two consumer warpgroups, one and two blocks to a multiprocessor, ragged
/// m, grouped and per-channel scales, zero points, even and odd numbers of k tiles with the
/// fewest stages; and the settings it cannot take, each naming `specialize`.
#[test]
fn gemv_wgmma_specialized_matches_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // (weight, activations, group, bm, bn, warps, blocks per multiprocessor)
    let cases = [
        ("u2", DType::F16, Some(64), 8, 128, 4, 2),
        ("i4", DType::BF16, Some(128), 32, 256, 8, 2),
        ("u3", DType::F16, Some(64), 64, 128, 4, 1),
        ("u4", DType::BF16, Some(128), 64, 256, 8, 1),
    ];
    for (wd, ad, group, bm, bn, warps, occupancy) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            blocks_per_sm: occupancy,
            specialize: true,
            ..default_cfg(dt(wd), ad, group)
        };
        check(cfg, 512, 2 * bn, &[1, bm + 3]);
        if group.is_none_or(|g| g == 64) {
            check(QMatmulConfig { stages: 3, ..cfg }, 320, bn, &[bm - 1]);
        }
    }
    let ws = QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm: 16,
        bn: 128,
        bk: 64,
        specialize: true,
        ..default_cfg(dt("u4"), DType::F16, Some(128))
    };
    ws.tiling().unwrap();
    for bad in [
        QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 16,
            ..ws
        },
        QMatmulConfig {
            bn: 512,
            warps: 8,
            ..ws
        },
        QMatmulConfig { split_k: 2, ..ws },
        QMatmulConfig { stream_k: 4, ..ws },
        QMatmulConfig {
            blocks_per_sm: 3,
            ..ws
        },
        QMatmulConfig {
            group_rows: None,
            ..ws
        },
    ] {
        let e = err_text(bad.tiling());
        assert!(e.contains("`specialize`"), "{bad:?}: {e}");
    }
}

/// The warpgroup gemv with two k tiles a ring stage (`stage_tiles = 2`: one barrier, one ring
/// position and one scale row per 128 rows of k) on stream-k workers ending inside column
/// tiles, groups of 128 and 256 rows, zero points, odd stage counts; plain blocks sharing a
/// multiprocessor (stream-k, split-k, per-channel scales); and the settings neither takes,
/// each naming its field.
#[test]
fn gemv_wgmma_two_tiles_a_stage_and_shared_multiprocessors() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // (weight, activations, group, bm, bn, warps, split, stream-k, blocks/SM, tiles a stage, k)
    let cases = [
        ("i4", DType::F16, Some(128), 16, 128, 4, 1, 3, 1, 2, 384),
        ("u2", DType::BF16, Some(256), 8, 256, 8, 1, 5, 1, 2, 512),
        ("u3", DType::F16, Some(128), 32, 128, 4, 1, 2, 2, 2, 384),
        ("u4", DType::BF16, Some(128), 8, 128, 4, 1, 3, 2, 2, 512),
        ("u2", DType::F16, Some(128), 8, 256, 8, 1, 4, 1, 2, 256),
        // One tile a stage, plain blocks sharing a multiprocessor.
        ("i8", DType::BF16, Some(64), 16, 128, 4, 1, 5, 3, 1, 256),
        ("u3", DType::F16, None, 32, 128, 4, 2, 0, 2, 1, 384),
    ];
    for (wd, ad, group, bm, bn, warps, split_k, stream_k, occupancy, tiles, k) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            stages: 3,
            split_k,
            stream_k,
            blocks_per_sm: occupancy,
            stage_tiles: tiles,
            ..default_cfg(dt(wd), ad, group)
        };
        check(cfg, k, 2 * bn, &[1, bm + 3]);
    }
    let two = QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm: 16,
        bn: 128,
        bk: 64,
        stream_k: 4,
        stage_tiles: 2,
        ..default_cfg(dt("u4"), DType::F16, Some(128))
    };
    two.tiling().unwrap();
    for (cfg, field) in [
        (
            QMatmulConfig {
                stage_tiles: 3,
                ..two
            },
            "`stage_tiles`",
        ),
        (
            QMatmulConfig {
                stage_tiles: 0,
                ..two
            },
            "`stage_tiles`",
        ),
        (
            QMatmulConfig {
                group_rows: Some(64),
                ..two
            },
            "`stage_tiles`",
        ),
        (
            QMatmulConfig {
                specialize: true,
                stream_k: 0,
                ..two
            },
            "`stage_tiles`",
        ),
        // One pass (whole tiles or split-k): ptxas serializes the two-tile stage's wgmmas.
        (QMatmulConfig { stream_k: 0, ..two }, "`stage_tiles`"),
        (
            QMatmulConfig {
                stream_k: 0,
                split_k: 2,
                ..two
            },
            "`stage_tiles`",
        ),
        (
            QMatmulConfig {
                method: QMatmulMethod::Gemv,
                bm: 8,
                ..two
            },
            "`stage_tiles`",
        ),
        (
            QMatmulConfig {
                blocks_per_sm: 5,
                ..two
            },
            "`blocks_per_sm`",
        ),
        // 4 blocks of 8 warps leave 64 registers a thread; 4 blocks of 16 warps, 32.
        (
            QMatmulConfig {
                blocks_per_sm: 4,
                warps: 16,
                bn: 256,
                ..two
            },
            "`blocks_per_sm`",
        ),
        // 8 stages of 64 x 128 activations and 128 x 256 4-bit weights (32 KB), 4 blocks.
        (
            QMatmulConfig {
                blocks_per_sm: 4,
                bm: 64,
                bn: 256,
                stages: 8,
                ..two
            },
            "`blocks_per_sm`",
        ),
    ] {
        let e = err_text(cfg.tiling());
        assert!(e.contains(field), "{cfg:?}: {e}");
    }
    // k must be whole stages of every split.
    let e = format!("{:?}", two.check_shape(16, 128, 192));
    assert!(e.contains("stage_tiles") && e.contains('k'), "{e}");
}

#[test]
fn gemv_wgmma_errors_name_the_field() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let u4 = QMatmulConfig {
        method: QMatmulMethod::GemvWgmma,
        bm: 16,
        bn: 128,
        bk: 64,
        ..default_cfg(dt("u4"), DType::F16, Some(128))
    };
    u4.tiling().unwrap();
    // The activations stay in shared memory, where sm_90a has 227 KB: a 256-row tile in five
    // stages (180 KB) is valid, while the fused (sm_80) pipeline's tiles stop at 163 KB.
    let tall = QMatmulConfig {
        bm: 256,
        warps: 8,
        stages: 5,
        ..u4
    };
    tall.tiling().unwrap();
    build(&tall).unwrap();
    let e = err_text(
        QMatmulConfig {
            method: QMatmulMethod::Fused,
            bk: 128,
            stages: 3,
            ..tall
        }
        .tiling(),
    );
    assert!(e.contains("`stages`") && e.contains("166912"), "{e}");
    for (cfg, field) in [
        (QMatmulConfig { warps: 2, ..u4 }, "`warps`"),
        (QMatmulConfig { bk: 128, ..u4 }, "`bk`"),
        (QMatmulConfig { bm: 12, ..u4 }, "`bm`"),
        (QMatmulConfig { bm: 264, ..u4 }, "`bm`"),
        (QMatmulConfig { stages: 2, ..u4 }, "`stages`"),
        (QMatmulConfig { bn: 96, ..u4 }, "`bn`"),
    ]
    .into_iter()
    .chain(stream_k_misuses(u4))
    {
        let e = err_text(cfg.tiling());
        assert!(e.contains(field), "{cfg:?}: {e}");
    }
}

/// Stream-k settings `base` (a gemv or warpgroup gemv tile) cannot take, each an error naming
/// `stream_k`: with split-k, past a copy-engine box row (512 columns), past the grid's 65535,
/// with per-channel scales, and on the mma.sync gemv.
fn stream_k_misuses(base: QMatmulConfig) -> [(QMatmulConfig, &'static str); 5] {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let stream = QMatmulConfig {
        stream_k: 8,
        ..base
    };
    [
        QMatmulConfig {
            split_k: 2,
            ..stream
        },
        QMatmulConfig {
            bn: 512,
            warps: 8,
            ..stream
        },
        QMatmulConfig {
            stream_k: 70000,
            ..stream
        },
        QMatmulConfig {
            group_rows: None,
            ..stream
        },
        QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            ..stream
        },
    ]
    .map(|c| (c, "`stream_k`"))
}

#[test]
fn gemv_tiles_and_errors() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let u4 = QMatmulConfig {
        method: QMatmulMethod::Gemv,
        bm: 8,
        bn: 128,
        bk: 128,
        ..default_cfg(dt("u4"), DType::F16, Some(128))
    };
    // Two and eight warps, two fragments per warp along n, a pipeline of two.
    for cfg in [
        QMatmulConfig { warps: 2, ..u4 },
        QMatmulConfig {
            warps: 8,
            bn: 256,
            ..u4
        },
        QMatmulConfig {
            stages: 2,
            bk: 64,
            ..u4
        },
    ] {
        check(cfg, 256, cfg.bn, &[2]);
    }
    let bad = [
        (QMatmulConfig { bm: 12, ..u4 }, "`bm`"),
        (QMatmulConfig { bm: 0, ..u4 }, "`bm`"),
        (QMatmulConfig { bn: 96, ..u4 }, "`bn`"),
        (
            QMatmulConfig {
                group_rows: Some(32),
                ..u4
            },
            "`group_rows`",
        ),
    ];
    for (cfg, field) in bad.into_iter().chain(stream_k_misuses(u4)) {
        let e = err_text(cfg.tiling());
        assert!(e.contains(field), "{cfg:?}: {e}");
    }
}

#[test]
fn m_zero_is_a_no_op() {
    let cfg = default_cfg(dt("i4"), DType::F16, Some(32));
    let kernel = build(&cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(rand::random());
    let q = quantize(&cfg, 64, cfg.bn, &mut rng);
    let w = prepare(&q, &cfg).unwrap();
    kernel.run_cpu(0, &[], &w, &mut []).unwrap();
}

#[test]
fn the_scale_layout_split_is_exact() {
    for (wd, g, bk) in [
        ("i4", 32, 128),
        ("u3", 64, 64),
        ("f4e2m1", 16, 64),
        ("i8", 128, 32),
    ] {
        let cfg = QMatmulConfig {
            bk,
            ..default_cfg(dt(wd), DType::F16, Some(g))
        };
        let lay = QMatmulLayouts::new(&cfg).unwrap();
        let rows = bk / lay.tiling.groups_per_tile;
        assert_eq!(lay.b3.shape(), [bk / rows, rows, cfg.bn]);
        for t in 0..lay.b.num_threads() {
            for i in 0..lay.b.num_locals() {
                let x = lay.b.eval(t, i);
                assert_eq!(lay.b3.eval(t, i), [x[0] / rows, x[0] % rows, x[1]]);
            }
        }
    }
    assert!(tilus::Layout::spatial(&[4, 8]).split_dim(0, 3).is_err());
}

fn err_text<T: std::fmt::Debug>(r: Result<T, QMatmulError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn config_errors_name_the_field() {
    let base = default_cfg(dt("i4"), DType::F16, Some(128));
    let cases = [
        (
            QMatmulConfig {
                wdtype: DType::F16,
                ..base
            },
            "`wdtype`",
        ),
        (
            QMatmulConfig {
                wdtype: DType::UInt(32),
                ..base
            },
            "`wdtype`",
        ),
        (
            QMatmulConfig {
                adtype: DType::F32,
                ..base
            },
            "`adtype`",
        ),
        (
            QMatmulConfig {
                has_zeros: true,
                ..base
            },
            "`has_zeros`",
        ),
        (QMatmulConfig { bm: 24, ..base }, "`bm`"),
        (QMatmulConfig { bm: 0, ..base }, "`bm`"),
        (QMatmulConfig { bk: 40, ..base }, "`bk`"),
        (QMatmulConfig { bn: 36, ..base }, "`bn`"),
        (QMatmulConfig { warps: 0, ..base }, "`warps`"),
        (QMatmulConfig { warps: 64, ..base }, "`warps`"),
        (QMatmulConfig { stages: 1, ..base }, "`stages`"),
        (QMatmulConfig { stages: 64, ..base }, "`stages`"),
        (QMatmulConfig { split_k: 0, ..base }, "`split_k`"),
        (
            QMatmulConfig {
                group_rows: Some(0),
                ..base
            },
            "`group_rows`",
        ),
        (
            QMatmulConfig {
                group_rows: Some(48),
                ..base
            },
            "`group_rows`",
        ),
        // 1-bit weights, one k step and one n fragment per thread: 4 bits, not a byte.
        (
            QMatmulConfig {
                bk: 16,
                bn: 32,
                ..default_cfg(dt("u1"), DType::F16, None)
            },
            "`bn`",
        ),
    ];
    for (cfg, field) in cases {
        let msg = err_text(build(&cfg));
        assert!(msg.contains(field), "{cfg:?}: {msg}");
    }
}

/// Huge tiles are rejected by the configuration check, naming the field, before any program
/// or layout table is built (`BM = 10^8` once allocated tens of gigabytes).
#[test]
fn huge_configs_are_rejected_before_building() {
    let base = default_cfg(dt("i4"), DType::F16, Some(128));
    let start = std::time::Instant::now();
    for (cfg, needles) in [
        (
            QMatmulConfig {
                bm: 100_000_000,
                ..base
            },
            &["`bm`", "f32 accumulator", "limit of 512"][..],
        ),
        (
            QMatmulConfig {
                bk: 1 << 40,
                group_rows: None,
                ..base
            },
            &["`bk`", "activation tile"],
        ),
        (QMatmulConfig { bn: 4096, ..base }, &["`bn`", "weight tile"]),
        (
            QMatmulConfig {
                stages: 1 << 40,
                ..base
            },
            &["`stages`", "shared memory"],
        ),
        (
            QMatmulConfig {
                split_k: 1 << 20,
                ..base
            },
            &["`split_k`", "65535"],
        ),
    ] {
        let msg = err_text(build(&cfg));
        for n in needles {
            assert!(msg.contains(n), "{cfg:?}: `{n}` not in {msg}");
        }
    }
    assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
}

#[test]
fn shape_and_buffer_errors_name_the_argument() {
    let cfg = default_cfg(dt("u4"), DType::F16, Some(64));
    let (k, n) = (128, cfg.bn);
    let kernel = build(&cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(rand::random());
    let q = quantize(&cfg, k, n, &mut rng);
    let w = prepare(&q, &cfg).unwrap();
    let m = 3;
    let a = vec![0x3C; m * k * 2];
    let mut c = vec![0u8; m * n * 2];

    // Shapes.
    assert!(err_text(cfg.check_shape(m, n + 8, k)).contains("`n`"));
    assert!(err_text(cfg.check_shape(m, 0, k)).contains("`n`"));
    assert!(err_text(cfg.check_shape(m, n, k + 32)).contains("`k`"));
    assert!(err_text(cfg.check_shape(m, n, 0)).contains("`k`"));
    let split = QMatmulConfig { split_k: 4, ..cfg };
    assert!(
        err_text(split.check_shape(m, n, 128)).contains("`k`"),
        "k = 128 is 2 tiles of 64, not 4"
    );
    let grouped = QMatmulConfig {
        group_rows: Some(128),
        bk: 64,
        ..cfg
    };
    assert!(
        err_text(grouped.check_shape(m, n, 192)).contains("`k`"),
        "192 rows are not whole groups of 128"
    );
    let split_groups = QMatmulConfig {
        split_k: 2,
        ..grouped
    };
    assert!(split_groups.check_shape(m, n, 256).is_ok());
    assert!(
        err_text(split_groups.check_shape(m, n, 384)).contains("`k`"),
        "two splits of 192 rows cut a group of 128"
    );
    assert!(err_text(cfg.check_shape(1 << 31, n, k)).contains("`m`"));

    // Buffers.
    assert!(err_text(kernel.run_cpu(m, &a[2..], &w, &mut c)).contains("`a`"));
    assert!(err_text(kernel.run_cpu(m, &a, &w, &mut c[2..])).contains("`c`"));
    let mut bad = w.clone();
    bad.b.pop();
    assert!(err_text(kernel.run_cpu(m, &a, &bad, &mut c)).contains("`b`"));
    let mut bad = w.clone();
    bad.scales.push(0);
    assert!(err_text(kernel.run_cpu(m, &a, &bad, &mut c)).contains("`scales`"));
    let mut bad = w.clone();
    bad.zeros = None;
    assert!(err_text(kernel.run_cpu(m, &a, &bad, &mut c)).contains("`zeros`"));
    let mut bad = w.clone();
    bad.zeros.as_mut().unwrap().truncate(4);
    assert!(err_text(kernel.run_cpu(m, &a, &bad, &mut c)).contains("`zeros`"));
    let mut bad = w.clone();
    bad.n = n + 8;
    assert!(err_text(kernel.run_cpu(m, &a, &bad, &mut c)).contains("`n`"));

    // A weight that does not match the configuration.
    let other = default_cfg(dt("u4"), DType::BF16, Some(64));
    let q_bf16 = quantize(&other, k, n, &mut rng);
    assert!(err_text(prepare(&q_bf16, &cfg)).contains("`weight`"));
    let per_channel = default_cfg(dt("u4"), DType::F16, None);
    let q_pc = quantize(&per_channel, k, n, &mut rng);
    assert!(err_text(prepare(&q_pc, &cfg)).contains("`weight`"));
    let i4 = default_cfg(dt("i4"), DType::F16, Some(64));
    let q_i4 = quantize(&i4, k, n, &mut rng);
    assert!(err_text(prepare(&q_i4, &cfg)).contains("`weight`"));
}

/// Sizes whose byte counts overflow usize are errors naming the argument (they panicked in
/// debug builds and wrapped to a short length in release).
#[test]
fn overflowing_sizes_are_named_errors() {
    let cfg = default_cfg(dt("u8"), DType::F16, Some(64));
    let kernel = build(&cfg).unwrap();
    // The largest multiples of every tile and group size that fit the VM's i32: k * n * 8 bits
    // is about 2^65.
    let big = (i32::MAX as usize / 1024) * 1024;
    let bytes = OperandBytes {
        a: 0,
        b: 0,
        scales: 0,
        zeros: Some(0),
        c: 0,
    };
    // (check_shape bounds k x n by the VM's i32 first; the products are checked besides.)
    let e = err_text(kernel.check_lengths(1, big, big, &bytes));
    assert!(e.contains("argument `k`"), "{e}");
    let e = err_text(relayout_inverse(&[], &cfg, big, big));
    assert!(e.contains("argument `k`"), "{e}");
    let e = err_text(kernel.check_lengths(usize::MAX, 64, 64, &bytes));
    assert!(e.contains("argument `m`"), "{e}");
}

#[test]
fn quantized_linear_forward_cpu() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let (k, n, m) = (256, 256, 3);
    for (wd, group) in [("u4", Group::Rows(128)), ("f6e2m3", Group::PerChannel)] {
        let w: Vec<f32> = (0..k * n).map(|_| nonzero(&mut rng, -1.0, 1.0)).collect();
        let layer = QuantizedLinear::new(&w, k, n, dt(wd), group, DType::F16).unwrap();
        let x: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(nonzero(&mut rng, -1.0, 1.0)))
            .collect();
        let y = layer.forward_cpu(&x, m).unwrap();
        let deq = layer.quantized().dequantize();
        let (mut err, mut norm) = (0f64, 0f64);
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k)
                    .map(|kk| x[i * k + kk].to_f64() * deq[kk * n + j])
                    .sum();
                err += (y[i * n + j].to_f64() - r).powi(2);
                norm += r * r;
            }
        }
        let rel = (err / norm).sqrt();
        assert!(rel < TOLERANCE, "{wd} seed {seed}: relative error {rel}");
    }

    let w: Vec<f32> = (0..k * n).map(|_| nonzero(&mut rng, -1.0, 1.0)).collect();
    let bf = QuantizedLinear::new(&w, k, n, dt("i3"), Group::Rows(64), DType::BF16).unwrap();
    let x: Vec<bf16> = (0..k)
        .map(|_| bf16::from_f32(nonzero(&mut rng, -1.0, 1.0)))
        .collect();
    assert_eq!(bf.forward_cpu(&x, 1).unwrap().len(), n);

    // Errors name the argument.
    let xf: Vec<f16> = vec![f16::ONE; k];
    assert!(
        err_text(bf.forward_cpu(&xf, 1)).contains("`x`"),
        "f16 input to a bf16 layer"
    );
    assert!(
        err_text(bf.forward_cpu(&x, 2)).contains("`x`"),
        "too few rows"
    );
    // A huge m overflowed `m * k * 2` (a debug-build panic) before anything was checked.
    for m in [usize::MAX / 2, usize::MAX, 1 << 40] {
        let e = err_text(bf.forward_cpu(&x, m));
        assert!(e.contains("argument `m`"), "m = {m}: {e}");
    }

    assert!(err_text(QuantizedLinear::new(
        &w,
        k,
        n,
        dt("i3"),
        Group::Rows(64),
        DType::F32
    ))
    .contains("`adtype`"));
    assert!(err_text(QuantizedLinear::new(
        &w[1..],
        k,
        n,
        dt("i3"),
        Group::Rows(64),
        DType::F16
    ))
    .contains("`weight`"));
    assert!(err_text(QuantizedLinear::new(
        &w,
        k,
        n,
        DType::F16,
        Group::Rows(64),
        DType::F16
    ))
    .contains("`dtype`"));
    let odd_n = 250;
    let w_odd: Vec<f32> = w[..k * odd_n].to_vec();
    assert!(err_text(QuantizedLinear::new(
        &w_odd,
        k,
        odd_n,
        dt("i4"),
        Group::Rows(64),
        DType::F16
    ))
    .contains("`n`"));
}

#[test]
fn dequantize_then_gemm() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let cases = [
        ("i4", DType::F16, Some(128)),
        ("u3", DType::BF16, Some(32)),
        ("f6e3m2", DType::F16, None),
        ("u8", DType::F16, Some(64)),
        ("u1", DType::BF16, Some(128)),
    ];
    for (wd, ad, g) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::DequantizeThenGemm,
            ..default_cfg(dt(wd), ad, g)
        };
        let kernel = build(&cfg).unwrap();
        assert!(kernel.dequant.is_some());
        check(cfg, 256, 2 * cfg.bn, &[1, 17]);
    }
    let split = QMatmulConfig {
        method: QMatmulMethod::DequantizeThenGemm,
        split_k: 2,
        ..default_cfg(dt("i4"), DType::F16, None)
    };
    assert!(err_text(split.tiling()).contains("`split_k`"));
}

/// A list of tuning candidates: weight type, tokens, n, k, group.
type CandidateKey = (&'static str, usize, usize, usize, Option<usize>);

/// `f` of every item, in order, computed on every core (each thread takes the next item).
fn on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = AtomicUsize::new(0);
    let out: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                *out[i].lock().unwrap() = Some(f(item));
            });
        }
    });
    out.into_iter()
        .map(|r| r.into_inner().unwrap().unwrap())
        .collect()
}

#[test]
fn tuning_candidates_are_valid_and_distinct() {
    use tilus::kernels::qmatmul::{tune::candidates, QMatmulMethod};
    let large = [(57344, 8192), (8192, 28672), (8192, 8192)];
    let mut keys: Vec<CandidateKey> = vec![("f6e3m2", 1, 8192, 28672, Some(128))];
    for wd in ["u1", "i4", "f6e3m2", "u8"] {
        keys.extend([1, 16, 100, 4096].map(|m| (wd, m, 57344, 8192, Some(128))));
    }
    let two_planes = [
        ("u3", 1),
        ("i3", 1),
        ("i3", 4),
        ("u5", 1),
        ("i5", 2),
        ("f3e1m1", 1),
        ("f3e1m1", 16),
    ];
    for (wd, m) in two_planes {
        for (n, k) in large {
            keys.extend([(wd, m, n, k, Some(128)), ("f4e2m1", m, n, k, Some(128))]);
        }
    }
    keys.extend(large.map(|(n, k)| ("u1", 1, n, k, Some(128))));
    let tokens = [("u2", 2), ("i4", 4), ("i2", 7), ("u1", 4)];
    keys.extend(tokens.map(|(wd, m)| (wd, m, 57344, 8192, Some(128))));
    keys.push(("i4", 1, 64, 64, Some(32)));
    keys.sort_unstable();
    keys.dedup();
    // A list builds every configuration it keeps, which on one core of CI took this test four
    // minutes: the lists are made on every core up front.
    let made = on_every_core(&keys, |&(wd, m, n, k, group)| {
        candidates(dt(wd), DType::F16, group, m, n, k)
            .unwrap_or_else(|e| panic!("{wd} m={m} {n}x{k}: {e}"))
    });
    let lists: std::collections::HashMap<CandidateKey, Vec<QMatmulConfig>> =
        keys.iter().copied().zip(made).collect();
    let candidates = |wd, m, n, k, group| lists[&(wd, m, n, k, group)].clone();

    // Every configuration of these lists builds (each distinct one once, on every core).
    let mut to_build: Vec<QMatmulConfig> = Vec::new();
    for wd in ["u1", "i4", "f6e3m2", "u8"] {
        for m in [1, 16, 100, 4096] {
            let c = candidates(wd, m, 57344, 8192, Some(128));
            assert!(!c.is_empty());
            for (i, cfg) in c.iter().enumerate() {
                cfg.check_shape(m, 57344, 8192).unwrap();
                assert!(!c[..i].contains(cfg), "{wd} m={m}: {cfg:?} twice");
            }
            to_build.extend(c.iter().copied());
            // Above 64 rows the warpgroup gemv's tall tiles lead; prefill keeps
            // dequantize-then-GEMM in the list.
            assert_eq!(
                c[0].method == QMatmulMethod::GemvWgmma,
                m > 64,
                "{wd} m={m}: {:?}",
                c[0]
            );
            let prefill = c
                .iter()
                .any(|c| c.method == QMatmulMethod::DequantizeThenGemm);
            assert_eq!(prefill, m > 256, "{wd} m={m}");
            // Decode starts with split-k, but one token of a 4- to 7-bit weight the integer
            // mma does not take starts with whole k in 256-column tiles on a layer that has a
            // wave of them (224 blocks here; perf note 68).
            let whole_k_first = m == 1 && wd == "f6e3m2";
            if m <= 16 {
                assert_eq!(
                    c[0].split_k == 1,
                    whole_k_first,
                    "decode starts with split-k: {:?}",
                    c[0]
                );
            }
            if whole_k_first {
                assert_eq!((c[0].method, c[0].bn), (QMatmulMethod::Gemv, 256));
                let narrow = candidates(wd, m, 8192, 28672, Some(128));
                assert!(narrow[0].split_k > 1, "{:?}", narrow[0]);
            }
            // At one token the measured gemv tiles all come before the fused kernel's.
            if m == 1 {
                let first_fused = c.iter().position(|c| c.method == QMatmulMethod::Fused);
                let gemvs = c[..first_fused.unwrap_or(c.len())]
                    .iter()
                    .filter(|c| c.method == QMatmulMethod::Gemv)
                    .count();
                assert!(
                    gemvs >= 10,
                    "{wd}: {gemvs} gemv tiles before the fused kernel"
                );
            }
            // One token of a 1-bit weight starts with the look-up tables; nothing else has them.
            assert_eq!(
                c[0].method == QMatmulMethod::Lut,
                wd == "u1" && m == 1,
                "{wd} m={m}: {:?}",
                c[0]
            );
            assert!(c[1..]
                .iter()
                .all(|c| c.method != QMatmulMethod::Lut || m == 1));
        }
    }
    // One token of a 3- or 5-bit integer weight (or of f3e1m1, read as i3) starts on the
    // integer mma (two planes), and more tokens never take it; f4e2m1 never does.
    for (wd, m) in two_planes {
        for (n, k) in large {
            let c = candidates(wd, m, n, k, Some(128));
            let f4 = candidates("f4e2m1", m, n, k, Some(128));
            assert!(f4.iter().all(|c| c.method != QMatmulMethod::GemvImma));
            assert_eq!(
                c[0].method == QMatmulMethod::GemvImma,
                m == 1,
                "{wd} m={m} {n}x{k}: {:?}",
                c[0]
            );
            assert!(c
                .iter()
                .all(|c| c.method != QMatmulMethod::GemvImma || c.bm == 1));
        }
    }
    // One token of a 1-bit weight in groups of 128 (two groups a 256-row tile of the integer
    // mma) tries the mma right after the first look-up tiling: the two tie.
    for (n, k) in large {
        let c = candidates("u1", 1, n, k, Some(128));
        assert_eq!(c[0].method, QMatmulMethod::Lut, "{n}x{k}: {:?}", c[0]);
        assert!(
            c[1..3].iter().all(|c| c.method == QMatmulMethod::GemvImma),
            "{n}x{k}: {:?}",
            &c[..3]
        );
    }
    // 2 to 4 tokens of a 2- or 4-bit integer weight start with several tokens a block on the
    // integer mma (one block row); 1-bit weights never take it (two digits are too coarse).
    for (wd, m) in tokens {
        let c = candidates(wd, m, 57344, 8192, Some(128));
        let tokens = |c: &QMatmulConfig| c.method == QMatmulMethod::GemvImma && c.bm > 1;
        assert_eq!(
            tokens(&c[0]),
            m <= 4 && wd != "u1",
            "{wd} m={m}: {:?}",
            c[0]
        );
        assert_eq!(c.iter().any(tokens), wd != "u1", "{wd} m={m}");
        assert!(
            c.iter().filter(|c| tokens(c)).all(|c| c.bm >= m),
            "{wd} m={m}"
        );
    }
    // Small shapes still get a candidate.
    let c = candidates("i4", 1, 64, 64, Some(32));
    assert!(!c.is_empty());

    let mut seen = std::collections::HashSet::new();
    to_build.retain(|c| seen.insert(*c));
    on_every_core(&to_build, |cfg| {
        build(cfg).unwrap_or_else(|e| panic!("{cfg:?} does not build: {e:?}"));
    });
}

/// The integer-mma gemv (`QMatmulMethod::GemvImma`): 1- to 5-bit codes, unsigned with zero
/// points and signed in offset binary, groups of one and two k tiles, split k, f16 and bf16,
/// several tokens and column tiles, within the output type's own rounding of the f64 reference
/// (the digits are exact to `2^-23 max|x|`); its re-layout round-trips and its rules are errors
/// naming the field.
#[test]
fn gemv_imma_matches_the_reference() {
    use tilus::kernels::qmatmul::{relayout, relayout_inverse, QMatmulMethod};
    // (weight, activations, group, bk, bn, warps, stages, split, blocks a multiprocessor)
    let cases = [
        ("u2", "f16", 128, 128, 128, 4, 3, 1, 4),
        ("i2", "bf16", 256, 128, 256, 4, 4, 2, 1),
        ("u4", "bf16", 128, 64, 64, 2, 3, 2, 1),
        ("i4", "f16", 256, 128, 128, 8, 2, 1, 3),
        ("u1", "f16", 256, 256, 64, 4, 3, 1, 1),
        // Groups shorter than a tile: runs of a byte's fields (1 bit: 32 rows a field).
        ("u1", "f16", 128, 256, 128, 4, 3, 2, 1),
        ("u1", "bf16", 32, 256, 64, 2, 4, 1, 2),
        ("u2", "f16", 64, 128, 256, 8, 3, 2, 1),
        ("i2", "bf16", 32, 128, 128, 4, 3, 1, 1),
        ("i4", "f16", 32, 64, 128, 4, 4, 2, 1),
        // Warps of seven 16-column fragments, the tuner's 256-block tilings of 57344 x 8192.
        ("u2", "f16", 128, 128, 448, 4, 4, 2, 1),
        ("i4", "bf16", 128, 64, 896, 8, 3, 4, 2),
        // 3 bits in two planes: a 2-bit plane's fields, a 1-bit plane's third bits.
        ("u3", "f16", 128, 128, 256, 4, 3, 2, 1),
        ("i3", "bf16", 256, 128, 128, 8, 4, 1, 1),
        ("i3", "f16", 128, 128, 448, 4, 4, 2, 1),
        // 5 bits: a 4-bit plane's fields, a 1-bit word for four of its words.
        ("u5", "bf16", 128, 64, 256, 4, 3, 2, 1),
        ("i5", "f16", 256, 128, 128, 8, 4, 1, 1),
        // f3e1m1, the sign and magnitude of -3..3, re-coded as i3.
        ("f3e1m1", "f16", 128, 128, 256, 4, 3, 2, 1),
        ("f3e1m1", "bf16", 256, 128, 448, 4, 4, 1, 1),
    ];
    let seed: u64 =
        std::env::var("TILUS_SEED").map_or_else(|_| rand::random(), |v| v.parse().unwrap());
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    for (wd, ad, group, bk, bn, warps, stages, split, occupancy) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            blocks_per_sm: occupancy,
            ..default_cfg(dt(wd), dt(ad), Some(group))
        };
        let k = group.max(bk) * split * 2;
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        let q = quantize(&cfg, k, 2 * bn, &mut rng);
        // f16 keeps 11 bits, bf16 8: the f16 gemv's own error on these cases.
        let tol = if ad == "f16" { 5e-4 } else { 4e-3 };
        for m in [1, 2] {
            let rel = run_once(&kernel, &q, m, &mut rng).unwrap();
            println!("gemv_imma {wd} {ad} m={m}: relative error {rel:.2e}");
            assert!(rel < tol, "{wd} {ad} m={m}: relative error {rel}");
        }
        // Outliers: magnitudes from 2^-14 to 2^10 in every group (f16's normal range; bf16
        // rounds them), and one group of zeros (its scale exponent has nothing to measure).
        let x: Vec<f32> = (0..k)
            .map(|i| {
                if i / group == 1 {
                    return 0.0;
                }
                let v = nonzero(&mut rng, -1.0, 1.0) * 2f32.powi(rng.random_range(-14..=10));
                if ad == "f16" {
                    f16::from_f32(v).to_f32()
                } else {
                    bf16::from_f32(v).to_f32()
                }
            })
            .collect();
        let rel = run_on(&kernel, &q, 1, &x).unwrap();
        println!("gemv_imma {wd} {ad} outliers: relative error {rel:.2e}");
        assert!(rel < tol, "{wd} {ad} outliers: relative error {rel}");
        // Digit boundaries: mantissas `1 + 2^-10`, `2 - 2^-10` and `1.5` of both signs at every
        // exponent, whose scaled values sit just past half a digit (a split rounded from the
        // top end would need a digit of 128 there). Exact in f16 and, but for the last bits, in
        // bf16.
        let x: Vec<f32> = (0..k)
            .map(|i| {
                let mant = [1.0 + 2f32.powi(-10), 2.0 - 2f32.powi(-10), 1.5][i % 3];
                let sign = if (i / 3) % 2 == 0 { 1.0 } else { -1.0 };
                let v = sign * mant * 2f32.powi((i % 25) as i32 - 14);
                if ad == "f16" {
                    f16::from_f32(v).to_f32()
                } else {
                    bf16::from_f32(v).to_f32()
                }
            })
            .collect();
        let rel = run_on(&kernel, &q, 1, &x).unwrap();
        println!("gemv_imma {wd} {ad} digit boundaries: relative error {rel:.2e}");
        assert!(
            rel < tol,
            "{wd} {ad} digit boundaries: relative error {rel}"
        );
        let bytes = relayout(&q, &cfg).unwrap();
        let back = relayout_inverse(&bytes, &cfg, q.k, q.n).unwrap();
        if wd == "f3e1m1" {
            // Re-coded by value: a negative zero comes back as `+0`, every other code as itself.
            let (a, b) = (
                storage::unpack(q.dtype, &q.codes, q.k * q.n),
                storage::unpack(q.dtype, &back, q.k * q.n),
            );
            for (x, y) in a.iter().zip(&b) {
                let want = if *x == 0b100 { 0 } else { *x };
                assert_eq!(*y, want, "{wd}: code {x:#05b} came back as {y:#05b}");
            }
        } else {
            assert_eq!(back, q.codes, "{wd}");
        }
    }
    let base = QMatmulConfig {
        method: QMatmulMethod::GemvImma,
        bm: 1,
        bn: 256,
        bk: 128,
        ..default_cfg(dt("u2"), DType::F16, Some(128))
    };
    let cases = [
        (
            QMatmulConfig {
                wdtype: dt("u6"),
                ..base
            },
            "`wdtype`",
        ),
        // 3-bit codes come in two planes, which the several-token kernel does not read.
        (
            QMatmulConfig {
                wdtype: dt("u3"),
                bm: 4,
                ..base
            },
            "`bm`",
        ),
        (
            QMatmulConfig {
                wdtype: dt("u3"),
                bm: 16,
                warps: 4,
                bn: 128,
                method: QMatmulMethod::GemvIgmma,
                ..base
            },
            "`wdtype`",
        ),
        (
            QMatmulConfig {
                wdtype: dt("f4e2m1"),
                has_zeros: false,
                ..base
            },
            "`wdtype`",
        ),
        (QMatmulConfig { bm: 2, ..base }, "`bm`"),
        (QMatmulConfig { bk: 64, ..base }, "`bk`"),
        (QMatmulConfig { bn: 200, ..base }, "`bn`"),
        (QMatmulConfig { warps: 3, ..base }, "`warps`"),
        (
            QMatmulConfig {
                group_rows: None,
                ..base
            },
            "`group_rows`",
        ),
        // Shorter than a field (32 rows of a 2-bit tile of 128).
        (
            QMatmulConfig {
                group_rows: Some(16),
                ..base
            },
            "`group_rows`",
        ),
        // A group inside a tile of two-plane codes.
        (
            QMatmulConfig {
                wdtype: dt("u3"),
                group_rows: Some(64),
                ..base
            },
            "`group_rows`",
        ),
        // Persistent workers read one plane of codes.
        (
            QMatmulConfig {
                wdtype: dt("u3"),
                stream_k: 4,
                ..base
            },
            "`stream_k`",
        ),
        (
            QMatmulConfig {
                blocks_per_sm: 0,
                ..base
            },
            "`blocks_per_sm`",
        ),
        (
            QMatmulConfig {
                blocks_per_sm: 5,
                ..base
            },
            "`blocks_per_sm`",
        ),
        // 16 warps x 3 blocks: 42 registers a thread.
        (
            QMatmulConfig {
                warps: 16,
                bn: 512,
                blocks_per_sm: 3,
                ..base
            },
            "`blocks_per_sm`",
        ),
        // Three blocks of a 4-stage ring of 16 KiB tiles: 3 x 88 KiB of shared memory.
        (
            QMatmulConfig {
                warps: 8,
                bn: 512,
                stages: 4,
                blocks_per_sm: 3,
                ..base
            },
            "`blocks_per_sm`",
        ),
    ];
    for (cfg, field) in cases {
        let e = err_text(build(&cfg));
        assert!(e.contains(field), "{cfg:?}: {e}");
    }
    // Three of them with a 3-stage ring fit (3 x 70 KiB).
    let three = QMatmulConfig {
        warps: 8,
        bn: 512,
        stages: 3,
        blocks_per_sm: 3,
        ..base
    };
    assert!(build(&three).is_ok());
    // A block splits at most 4096 rows of activations.
    let e = err_text(base.check_shape(1, 256, 8192));
    assert!(e.contains("`k`") && e.contains("split_k"), "{e}");
    assert!(base.check_shape(1, 256, 4096).is_ok());
}

/// The integer-mma gemv with several tokens a block (the pre-pass's two digits a value): 2- and
/// 4-bit codes, groups of one and two tiles and of a tile's fields, split k, ragged blocks,
/// against the f64 reference on the interpreter; 1-bit weights are refused naming `bm`.
#[test]
fn gemv_imma_tokens_match_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // Several tokens a block on the integer mma, from the pre-pass's two digits a value.
    // (weight, activations, group, bk, bn, warps, stages, split, tokens a block)
    let cases = [
        ("u2", "f16", 128, 128, 128, 4, 3, 1, 4),
        ("i2", "bf16", 256, 128, 64, 2, 4, 2, 8),
        ("u4", "bf16", 128, 64, 64, 2, 3, 2, 16),
        ("i4", "f16", 128, 64, 128, 8, 2, 1, 16),
        ("u2", "f16", 256, 128, 64, 4, 3, 1, 4),
        ("i4", "bf16", 128, 64, 112, 1, 3, 1, 32),
        // Groups shorter than a tile: runs of a byte's fields.
        ("u2", "f16", 64, 128, 128, 4, 3, 2, 4),
        ("i2", "bf16", 32, 128, 64, 2, 4, 1, 8),
        ("i4", "f16", 32, 64, 128, 4, 3, 2, 16),
    ];
    let seed: u64 =
        std::env::var("TILUS_SEED").map_or_else(|_| rand::random(), |v| v.parse().unwrap());
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    for (wd, ad, group, bk, bn, warps, stages, split, bm) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            ..default_cfg(dt(wd), dt(ad), Some(group))
        };
        let k = group.max(bk) * split * 2;
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        assert!(
            kernel.digits.is_some(),
            "{bm} tokens a block take the pre-pass"
        );
        let q = quantize(&cfg, k, 2 * bn, &mut rng);
        // Two digits keep `2^-14 max|x|` of each group: below f16's and bf16's own rounding
        // of the output.
        let tol = if ad == "f16" { 5e-4 } else { 4e-3 };
        // One token, a ragged block, and a block and a half.
        for m in [1, bm - 1, bm + bm / 2 + 1] {
            let rel = run_once(&kernel, &q, m, &mut rng).unwrap();
            println!("gemv_imma bm{bm} {wd} {ad} m={m}: relative error {rel:.2e}");
            assert!(rel < tol, "{wd} {ad} bm={bm} m={m}: relative error {rel}");
        }
    }
    // A 1-bit weight's zero point would sum the two digits' rounding past f16's: refused,
    // naming the field.
    let u1 = QMatmulConfig {
        method: QMatmulMethod::GemvImma,
        bm: 4,
        bn: 64,
        bk: 256,
        warps: 4,
        stages: 3,
        ..default_cfg(dt("u1"), DType::F16, Some(256))
    };
    match build(&u1) {
        Err(QMatmulError::Config { field: "bm", .. }) => {}
        other => panic!("1-bit weights with 4 tokens a block: {other:?}"),
    }
}

/// The integer warpgroup gemv (`QMatmulMethod::GemvIgmma`): the pre-pass's two digits a value
/// on `wgmma .s32.u8.s8`, 2- and 4-bit codes, unsigned with zero points and signed, f16 and
/// bf16, 8 to 64 tokens a block, one and two warpgroups, fields of 32 to 128 rows (one or two
/// rows of digits a tile), groups of one and two tiles, odd and even tile counts, split k,
/// ragged m, against the f64 reference on the interpreter.
#[test]
fn gemv_igmma_matches_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    // (weight, activations, group, bk, bn, warps, stages, split, tokens a block, k tiles a split)
    let cases = [
        ("u2", "f16", 128, 128, 128, 8, 4, 1, 16, 3),
        ("i2", "bf16", 256, 128, 64, 4, 3, 2, 8, 2),
        ("u4", "f16", 128, 128, 128, 4, 3, 1, 32, 2),
        ("i4", "bf16", 256, 256, 64, 4, 4, 1, 64, 3),
        ("u2", "bf16", 256, 256, 128, 8, 3, 2, 16, 1),
    ];
    let seed: u64 =
        std::env::var("TILUS_SEED").map_or_else(|_| rand::random(), |v| v.parse().unwrap());
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    for (wd, ad, group, bk, bn, warps, stages, split, bm, tiles) in cases {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvIgmma,
            bm,
            bn,
            bk,
            warps,
            stages,
            split_k: split,
            ..default_cfg(dt(wd), dt(ad), Some(group))
        };
        let k = bk * split * tiles;
        let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        assert!(kernel.digits.is_some(), "the pre-pass computes the digits");
        let q = quantize(&cfg, k.max(group), 2 * bn, &mut rng);
        let tol = if ad == "f16" { 5e-4 } else { 4e-3 };
        for m in [1, bm - 1, bm + bm / 2 + 1] {
            let rel = run_once(&kernel, &q, m, &mut rng).unwrap();
            println!("gemv_igmma bm{bm} {wd} {ad} k={k} m={m}: relative error {rel:.2e}");
            assert!(rel < tol, "{wd} {ad} bm={bm} m={m}: relative error {rel}");
        }
    }
    // Refusals name the field: 1-bit codes, 4 tokens, a field of 16 rows, a group of half a
    // tile, three warps.
    let base = QMatmulConfig {
        method: QMatmulMethod::GemvIgmma,
        bm: 16,
        bn: 128,
        bk: 128,
        warps: 8,
        stages: 4,
        ..default_cfg(dt("u2"), DType::F16, Some(128))
    };
    let bad = [
        (
            QMatmulConfig {
                wdtype: dt("u1"),
                bk: 256,
                group_rows: Some(256),
                ..base
            },
            "wdtype",
        ),
        (QMatmulConfig { bm: 4, ..base }, "bm"),
        (
            QMatmulConfig {
                wdtype: dt("u4"),
                bk: 64,
                group_rows: Some(64),
                ..base
            },
            "bk",
        ),
        (QMatmulConfig { bk: 256, ..base }, "group_rows"),
        (QMatmulConfig { warps: 12, ..base }, "warps"),
        (QMatmulConfig { stages: 2, ..base }, "stages"),
    ];
    for (cfg, field) in bad {
        match build(&cfg) {
            Err(QMatmulError::Config { field: f, .. }) if f == field => {}
            other => panic!("{cfg:?}: expected an error naming {field}, got {other:?}"),
        }
    }
}

/// The integer-mma gemv over tilings drawn at random from its whole space (the tuner's lists
/// only sample it): 1 to 7 fragments a warp, 1 to 8 warps, 2 to 4 stages, groups of one and two
/// k tiles or of a tile's fields, split k, two blocks a multiprocessor, against the f64
/// reference on the interpreter.
#[test]
fn gemv_imma_random_tilings_match_the_reference() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let seed: u64 =
        std::env::var("TILUS_SEED").map_or_else(|_| rand::random(), |v| v.parse().unwrap());
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ran = 0;
    while ran < 6 {
        let wd = ["u1", "u2", "i2", "u4", "i4"][rng.random_range(0..5)];
        let ad = ["f16", "bf16"][rng.random_range(0..2)];
        let bits = dt(wd).bits() as usize;
        let warps = [1, 2, 4, 8][rng.random_range(0..4)];
        let bk = 256 / bits;
        // Groups of one or two tiles, or of 1 to 4 of a tile's fields (32 rows each).
        let group = match rng.random_range(0..4) {
            0 => bk / (1usize << rng.random_range(0..=(8 / bits).ilog2())),
            g => bk * g.min(2),
        };
        let split = [1, 2, 4][rng.random_range(0..3)];
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn: 16 * warps * rng.random_range(1..=7),
            bk,
            warps,
            stages: rng.random_range(2..=4),
            split_k: split,
            blocks_per_sm: rng.random_range(1..=2),
            ..default_cfg(dt(wd), dt(ad), Some(group))
        };
        // Draws outside the space (a group too large for the warps' share of the slice, shared
        // memory for two blocks) are refused naming a field; nothing may fail the verifier, and
        // the rest must compute the product.
        let kernel = match build(&cfg) {
            Ok(kernel) => kernel,
            Err(QMatmulError::Config { .. }) => continue,
            Err(e) => panic!("{cfg:?}: {e}"),
        };
        let k = group.max(bk) * split * rng.random_range(1..=2);
        let q = quantize(&cfg, k, 2 * cfg.bn, &mut rng);
        let tol = if ad == "f16" { 5e-4 } else { 4e-3 };
        let rel = run_once(&kernel, &q, 1, &mut rng).unwrap();
        println!(
            "gemv_imma {wd} {ad} g{group} bn{} w{warps} s{} sk{split} o{} k{k}: relative error {rel:.2e}",
            cfg.bn, cfg.stages, cfg.blocks_per_sm
        );
        assert!(rel < tol, "{cfg:?} k={k}: relative error {rel}");
        ran += 1;
    }
}

/// The gemv, the one-token integer-mma gemv and the look-up kernel can be launched as
/// programmatic dependents (`QMatmulKernel::takes_dependent`: their programs wait for the prior
/// grid and take the `dependent` flag last); the fused pipeline and the several-token integer
/// mma behind its pre-pass are always launched in order.
#[test]
fn the_gemvs_wait_for_the_prior_grid() {
    use tilus::kernels::qmatmul::QMatmulMethod;
    let u2 = default_cfg(dt("u2"), DType::F16, Some(128));
    let imma = QMatmulConfig {
        method: QMatmulMethod::GemvImma,
        bm: 1,
        bn: 256,
        bk: 128,
        ..u2
    };
    let gemv = QMatmulConfig {
        method: QMatmulMethod::Gemv,
        bm: 8,
        bn: 256,
        bk: 128,
        ..u2
    };
    let tokens = QMatmulConfig {
        bm: 4,
        bn: 64,
        warps: 4,
        stages: 3,
        ..imma
    };
    let lut = default_cfg(dt("u1"), DType::F16, Some(128)).lut(256, 8, 1, 1);
    let fused = build(&u2).unwrap();
    assert!(!fused.takes_dependent(), "fused");
    for (what, cfg, waits) in [
        ("one token", imma, true),
        ("gemv", gemv, true),
        ("look-up", lut, true),
        ("several tokens", tokens, false),
    ] {
        let kernel = build(&cfg).unwrap();
        assert_eq!(kernel.takes_dependent(), waits, "{what}");
        // The fused pipeline's parameters, the pre-pass's two buffers, and the flag.
        assert_eq!(
            kernel.main.params.len(),
            fused.main.params.len() + 2 * usize::from(kernel.digits.is_some()) + usize::from(waits),
            "{what}"
        );
    }
}
