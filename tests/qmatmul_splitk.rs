//! The quantized matmul's split-k in one launch, on the interpreter: each block stores its f32
//! partial sum, counts itself on its output tile's semaphore, and the last block to arrive sums
//! the partials in split order. Against an f64 reference of the same quantized weight, on fresh
//! random data with the output poisoned, for ragged `m`, splits of 2, 4 and 8, both programs
//! (fused and gemv), several arrival orders of the blocks (the result must be the same bit for
//! bit, whichever block of a tile comes last), and the same buffers used for consecutive calls
//! (the semaphores must be back at zero after each).

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tilus::core::interp::BlockOrder;
use tilus::kernels::qmatmul::{
    build, decode_half, encode_half, prepare, HostSplitScratch, QMatmulConfig, QMatmulMethod,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::DType;

const TOLERANCE: f64 = 1e-2;

fn nonzero(rng: &mut StdRng, lo: f32, hi: f32) -> f32 {
    loop {
        let v = rng.random_range(lo..hi);
        if v.abs() > 1e-3 {
            return v;
        }
    }
}

fn quantize(cfg: &QMatmulConfig, k: usize, n: usize, rng: &mut StdRng) -> QuantizedWeight {
    let w: Vec<f32> = (0..k * n).map(|_| nonzero(rng, -2.0, 2.0)).collect();
    let group = cfg.group_rows.map_or(Group::PerChannel, Group::Rows);
    QuantizedWeight::quantize(&w, k, n, cfg.wdtype, group, cfg.adtype, cfg.has_zeros).unwrap()
}

fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::BF16 => bf16::from_f32(v).to_f32(),
        _ => f16::from_f32(v).to_f32(),
    }
}

fn semaphores_are_zero(s: &HostSplitScratch) -> bool {
    s.semaphores.iter().all(|&b| b == 0)
}

/// Every `m` of `ms` with one scratch made for the largest, each in every order of `orders`,
/// twice in a row.
fn check(cfg: QMatmulConfig, k: usize, n: usize, ms: &[usize]) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let kernel = build(&cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    let q = quantize(&cfg, k, n, &mut rng);
    let w = q.dequantize();
    let prepared = prepare(&q, &cfg).unwrap();
    let max_m = *ms.iter().max().unwrap();
    let mut scratch = HostSplitScratch::new(&cfg, max_m, n).unwrap();
    assert!(semaphores_are_zero(&scratch));
    let orders = [
        BlockOrder::Launch,
        BlockOrder::Reversed,
        BlockOrder::Shuffled(rng.random()),
        BlockOrder::Shuffled(rng.random()),
    ];
    for &m in ms {
        let x: Vec<f32> = (0..m * k)
            .map(|_| round_to(cfg.adtype, nonzero(&mut rng, -1.0, 1.0)))
            .collect();
        let a = encode_half(&x, cfg.adtype);
        let mut first: Option<Vec<u8>> = None;
        for order in &orders {
            for call in 0..2 {
                let what = format!(
                    "{} split {} stream {} m={m} {order:?} call {call} (seed {seed})",
                    cfg.wdtype, cfg.split_k, cfg.stream_k
                );
                let mut c = vec![0xFF; m * n * 2];
                kernel
                    .run_cpu_with(m, &a, &prepared, &mut c, &mut scratch, order)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(
                    semaphores_are_zero(&scratch),
                    "{what}: semaphores not reset"
                );
                match &first {
                    None => {
                        let out = decode_half(&c, cfg.adtype);
                        let (mut err, mut norm) = (0f64, 0f64);
                        for i in 0..m {
                            for j in 0..n {
                                let r: f64 =
                                    (0..k).map(|kk| x[i * k + kk] as f64 * w[kk * n + j]).sum();
                                let o = out[i * n + j] as f64;
                                assert!(o.is_finite(), "{what}: c[{i}, {j}] = {o}");
                                err += (o - r).powi(2);
                                norm += r * r;
                            }
                        }
                        let rel = (err / norm).sqrt();
                        assert!(rel < TOLERANCE, "{what}: relative error {rel}");
                        first = Some(c);
                    }
                    Some(f) => assert!(*f == c, "{what}: differs from the first order's result"),
                }
            }
        }
    }
}

#[test]
fn fused_split_k_in_one_launch() {
    let i4 = QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(64), false);
    for split_k in [2, 4, 8] {
        let cfg = QMatmulConfig { split_k, ..i4 };
        check(cfg, 64 * 8, 2 * cfg.bn, &[1, 3, 9, 16]);
    }
    // Zero points, bf16, per-channel scales, two m tiles.
    let u3 = QMatmulConfig::default_for(DType::UInt(3), DType::BF16, None, true);
    check(QMatmulConfig { split_k: 4, ..u3 }, 256, u3.bn, &[17]);
}

#[test]
fn gemv_split_k_in_one_launch() {
    let base = QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(128), false);
    for split_k in [2, 4] {
        let cfg = QMatmulConfig {
            method: QMatmulMethod::Gemv,
            bm: 8,
            bn: 128,
            bk: 128,
            split_k,
            ..base
        };
        check(cfg, 128 * 4, 2 * cfg.bn, &[1, 3, 9, 16]);
    }
}

/// Stream-k on the warpgroup gemv: workers whose shares start and end inside column tiles
/// (8 iterations for 3 workers), several workers on one tile and an odd number of k tiles
/// (6 for 5), more workers than iterations (one with none), two block rows, zero points; the
/// same bits in every block order, the semaphores reset.
#[test]
fn gemv_wgmma_stream_k_in_one_launch() {
    let cases = [
        // (weight, activations, group, bm, bn, warps, workers, k tiles, column tiles)
        ("u2", DType::F16, Some(128), 8, 128, 4, 3, 4, 2),
        ("i4", DType::BF16, Some(64), 16, 256, 8, 5, 3, 2),
        ("u3", DType::F16, Some(64), 32, 128, 4, 7, 2, 3),
    ];
    for (wd, ad, group, bm, bn, warps, stream_k, kt, tiles) in cases {
        let wdtype: DType = wd.parse().unwrap();
        let base = QMatmulConfig::default_for(wdtype, ad, group, matches!(wdtype, DType::UInt(_)));
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvWgmma,
            bm,
            bn,
            bk: 64,
            warps,
            stages: 4,
            stream_k,
            ..base
        };
        check(cfg, 64 * kt, tiles * bn, &[1, bm + 3]);
    }
}

/// Persistent workers on the one-token integer-mma gemv: units of one column tile and one
/// chunk of k, claimed from a counter (on the interpreter the first block to run takes them
/// all, one after the other, so the ring runs on across units), a chunk's partial per slot
/// added in chunk order, counted in batches of at most 32 units; groups of whole tiles and within a tile, one chunk (no partials),
/// fewer and more workers than units, zero points and signed codes, f16 and bf16; the counters
/// reset for the next call. The rules are errors naming the field or the argument.
#[test]
fn gemv_imma_persistent_workers_in_one_launch() {
    let cases = [
        // (weight, activations, group, bk, bn, warps, stages, chunks, tiles a chunk, workers,
        // column tiles)
        ("u2", DType::F16, 128, 128, 128, 4, 3, 2, 3, 5, 3),
        ("i4", DType::BF16, 256, 64, 64, 2, 2, 3, 4, 2, 2),
        ("u1", DType::F16, 128, 256, 64, 2, 3, 1, 3, 3, 2),
        ("i2", DType::F16, 64, 128, 256, 8, 4, 2, 4, 7, 1),
        ("u4", DType::BF16, 128, 64, 128, 4, 3, 4, 4, 16, 2),
        // 40 units for the first worker: it counts its partials after 32 and at its end.
        ("u2", DType::F16, 128, 128, 16, 1, 2, 2, 2, 3, 20),
    ];
    for (wd, ad, group, bk, bn, warps, stages, split_k, ch, workers, tiles) in cases {
        let wdtype: DType = wd.parse().unwrap();
        let base =
            QMatmulConfig::default_for(wdtype, ad, Some(group), matches!(wdtype, DType::UInt(_)));
        let cfg = QMatmulConfig {
            method: QMatmulMethod::GemvImma,
            bm: 1,
            bn,
            bk,
            warps,
            stages,
            split_k,
            stream_k: workers,
            blocks_per_sm: 1,
            ..base
        };
        check(cfg, bk * ch * split_k, tiles * bn, &[1]);
    }
    let cfg = QMatmulConfig {
        method: QMatmulMethod::GemvImma,
        bm: 1,
        bn: 128,
        bk: 128,
        warps: 4,
        stages: 3,
        split_k: 2,
        stream_k: 8,
        ..QMatmulConfig::default_for(DType::UInt(2), DType::F16, Some(128), true)
    };
    let named = |r: Result<(), tilus::kernels::qmatmul::QMatmulError>, field: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    };
    // One token; chunks of at least `stages` tiles.
    named(cfg.check_shape(2, 128, 768), "`m`");
    named(cfg.check_shape(1, 128, 512), "`k`");
    cfg.check_shape(1, 128, 768).unwrap();
    // Two planes of codes, several tokens a block.
    let u3 = QMatmulConfig {
        wdtype: DType::UInt(3),
        ..cfg
    };
    named(u3.tiling().map(|_| ()), "`stream_k`");
    named(
        QMatmulConfig { bm: 4, ..cfg }.tiling().map(|_| ()),
        "`stream_k`",
    );
    // The counters after the column tiles' semaphores.
    let s = HostSplitScratch::new(&cfg, 1, 3 * 128).unwrap();
    assert_eq!(s.semaphores.len(), 4 * (3 + 2));
    assert_eq!(s.workspace.len(), 4 * 2 * 3 * 128);
}

/// The buffers must serve the call: more rows than reserved, or other columns, are errors
/// naming `m` or `n`; a missing reservation cannot happen on the CPU (`run_cpu` makes one).
#[test]
fn split_buffers_are_checked() {
    let cfg = QMatmulConfig {
        split_k: 2,
        ..QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(64), false)
    };
    let (k, n) = (256, cfg.bn);
    let mut rng = StdRng::seed_from_u64(rand::random());
    let q = quantize(&cfg, k, n, &mut rng);
    let prepared = prepare(&q, &cfg).unwrap();
    let kernel = build(&cfg).unwrap();
    let a = encode_half(&vec![0.5; 5 * k], cfg.adtype);
    let mut c = vec![0xFF; 5 * n * 2];
    let mut small = HostSplitScratch::new(&cfg, 4, n).unwrap();
    let e = kernel
        .run_cpu_with(5, &a, &prepared, &mut c, &mut small, &BlockOrder::Launch)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argument `m`") && e.contains("5 rows exceed the 4"),
        "{e}"
    );
    let mut other = HostSplitScratch::new(&cfg, 8, 2 * n).unwrap();
    let e = kernel
        .run_cpu_with(5, &a, &prepared, &mut c, &mut other, &BlockOrder::Launch)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `n`"), "{e}");
    // Sizes: [split, m, n] partials and one semaphore per output tile.
    let s = HostSplitScratch::new(&cfg, 17, 2 * n).unwrap();
    assert_eq!(s.workspace.len(), 4 * 2 * 17 * 2 * n);
    assert_eq!(s.semaphores.len(), 4 * 2 * 2);
    assert_eq!(
        cfg.split_buffers(17, 2 * n).unwrap(),
        (2 * 17 * 2 * n, 2 * 2)
    );
    let one = QMatmulConfig { split_k: 1, ..cfg };
    assert_eq!(one.split_buffers(17, 2 * n).unwrap(), (0, 0));
    let e = cfg.split_buffers(1, n + 1).unwrap_err().to_string();
    assert!(e.contains("argument `n`"), "{e}");
    let e = cfg
        .split_buffers(usize::MAX / 4, n)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument `m`"), "{e}");
}
