//! The offline weight re-layout: host round trip, agreement with the VM program, and the
//! property the matmul relies on (each thread's bytes, viewed as the weight type, are its B
//! operand locals).

use rand::{Rng, SeedableRng};
use tilus::core::interp::{self, Arg};
use tilus::core::storage;
use tilus::kernels::qmatmul::weight_types;
use tilus::kernels::qmatmul::{
    build_relayout_program, kernel_codes, pack_split, relayout, relayout_inverse, QMatmulConfig,
    QMatmulError, QMatmulLayouts,
};
use tilus::quant::{Group, QuantizedWeight};
use tilus::DType;

fn random_weight(k: usize, n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..k * n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

fn quantize(dtype: DType, k: usize, n: usize, group: Group, seed: u64) -> QuantizedWeight {
    let w = random_weight(k, n, seed);
    let unsigned = matches!(dtype, DType::UInt(_));
    QuantizedWeight::quantize(&w, k, n, dtype, group, DType::F16, unsigned).unwrap()
}

/// Configurations that exercise every layout shape: the default, two warps along m (B is
/// replicated), a deep and a shallow k tile, the gemv method (the weight as mma A) and its
/// warpgroup form.
fn configs(dtype: DType) -> Vec<QMatmulConfig> {
    let base = QMatmulConfig::default_for(
        dtype,
        DType::F16,
        Some(128),
        dtype.kind() == tilus::core::dtype::Kind::UInt,
    );
    let gemv = QMatmulConfig {
        method: tilus::kernels::qmatmul::QMatmulMethod::Gemv,
        bm: 8,
        ..base
    };
    // The warpgroup gemv: warpgroup tiles of 64 weight columns; the tile must hold one
    // 64-column tile per warpgroup.
    let gemv_wgmma = QMatmulConfig {
        method: tilus::kernels::qmatmul::QMatmulMethod::GemvWgmma,
        bm: 8,
        bn: base.bn.max(64),
        bk: 64,
        ..base
    };
    let mut out = vec![base, QMatmulConfig { bm: 32, ..base }, gemv, gemv_wgmma];
    for bk in [128, 32] {
        let c = QMatmulConfig { bk, ..base };
        if c.tiling().is_ok() {
            out.push(c);
        }
    }
    out
}

#[test]
fn relayout_inverse_undoes_relayout_for_every_weight_type() {
    let seed: u64 = rand::random();
    for dtype in weight_types() {
        let cfgs = configs(dtype);
        // One weight per type, a whole number of tiles of every configuration.
        let (k, n) = (256, cfgs[0].bn);
        let q = quantize(dtype, k, n, Group::Rows(128), seed);
        for cfg in cfgs {
            let bytes = relayout(&q, &cfg).unwrap();
            assert_eq!(bytes.len(), q.codes.len(), "{dtype}: same size");
            let back = relayout_inverse(&bytes, &cfg, k, n).unwrap();
            // The kernels read f3e1m1 as i3, by value (`kernel_codes`): its negative zero
            // comes back as `+0`.
            let want = if kernel_codes(dtype) == dtype {
                q.codes.clone()
            } else {
                let codes = storage::unpack(dtype, &q.codes, k * n);
                let zero = |c: u32| if dtype.decode(c) == 0.0 { 0 } else { c };
                storage::pack(dtype, &codes.into_iter().map(zero).collect::<Vec<_>>())
            };
            assert_eq!(back, want, "{dtype} {cfg:?} seed {seed}");
            // The transform really moves data (a broken identity would also round-trip).
            assert_ne!(
                bytes, q.codes,
                "{dtype} {cfg:?}: re-layout is not the identity"
            );
        }
    }
}

/// What the matmul's `view` reads: thread `t`'s bytes at the byte layout's positions, unpacked
/// as the weight type, are exactly its B-operand elements.
#[test]
fn each_thread_bytes_are_its_b_operand_locals() {
    let seed: u64 = rand::random();
    for dtype in weight_types() {
        let cfg = QMatmulConfig {
            bm: 32,
            ..configs(dtype)[0]
        };
        let lay = QMatmulLayouts::new(&cfg).unwrap();
        let t = lay.tiling;
        let (k, n) = (2 * cfg.bk, 2 * cfg.bn);
        let q = quantize(dtype, k, n, Group::Rows(cfg.bk), seed);
        let codes = storage::unpack(dtype, &q.codes, k * n);
        let bytes = relayout(&q, &cfg).unwrap();
        let (kt, nb) = (1, 1);
        let base = (kt * (n / cfg.bn) + nb) * t.tile_bytes;
        // Every block thread, replicas (the warps along m) included.
        for th in 0..cfg.warps * 32 {
            let mine: Vec<u8> = (0..t.bytes_per_thread)
                .map(|j| bytes[base + lay.wbytes.eval(th, j)[0]])
                .collect();
            // The bytes hold the codes the kernels read (`kernel_codes`: i3 for f3e1m1).
            let kt_dtype = kernel_codes(dtype);
            let got = storage::unpack(kt_dtype, &mine, t.locals_per_thread);
            // The codes layout holds the B operand's elements, in the packing order.
            assert!(lay.b.local_permutation(&lay.q).is_some(), "{dtype}");
            for (i, &code) in got.iter().enumerate() {
                let [r, c] = lay.q.eval(th, i)[..] else {
                    unreachable!()
                };
                let want = codes[(kt * cfg.bk + r) * n + nb * cfg.bn + c];
                assert_eq!(
                    kt_dtype.decode(code),
                    dtype.decode(want),
                    "{dtype}: thread {th} local {i} seed {seed}"
                );
            }
        }
    }
}

#[test]
fn device_relayout_program_matches_the_host_for_every_weight_type() {
    let seed: u64 = rand::random();
    for (dtype, cfg) in weight_types()
        .into_iter()
        .flat_map(|d| [(d, configs(d)[0]), (d, configs(d)[2]), (d, configs(d)[3])])
    {
        let (k, n) = (2 * cfg.bk, cfg.bn);
        let q = quantize(dtype, k, n, Group::PerChannel, seed ^ dtype.bits() as u64);
        let host = relayout(&q, &cfg).unwrap();
        let program = build_relayout_program(&cfg).unwrap();
        let mut args = vec![
            Arg::I32(k as i32),
            Arg::I32(n as i32),
            Arg::Buffer(q.codes.clone()),
            Arg::Buffer(vec![0xA5; host.len()]),
        ];
        interp::run(&program, &mut args).unwrap();
        let Arg::Buffer(device) = &args[3] else {
            unreachable!()
        };
        assert_eq!(device, &host, "{dtype} {cfg:?} seed {seed}");
    }
}

#[test]
fn relayout_errors_name_the_argument() {
    let cfg = QMatmulConfig::default_for(DType::Int(4), DType::F16, Some(128), false);
    let q = quantize(DType::Int(4), 256, 2 * cfg.bn, Group::Rows(128), 1);
    let other = quantize(DType::Int(3), 256, 2 * cfg.bn, Group::Rows(128), 1);
    let msg = |e: QMatmulError| e.to_string();
    assert!(msg(relayout(&other, &cfg).unwrap_err()).contains("`weight`"));
    let narrow = quantize(DType::Int(4), 256, cfg.bn + 8, Group::Rows(128), 1);
    assert!(msg(relayout(&narrow, &cfg).unwrap_err()).contains("`n`"));
    let short = quantize(DType::Int(4), 64 + 32, 2 * cfg.bn, Group::Rows(32), 1);
    assert!(msg(relayout(&short, &cfg).unwrap_err()).contains("`k`"));
    let bytes = relayout(&q, &cfg).unwrap();
    let err = relayout_inverse(&bytes[1..], &cfg, 256, 2 * cfg.bn).unwrap_err();
    assert!(msg(err).contains("`bytes`"));
    // A hand-built weight whose fields disagree, or whose k x n codes take more bits than
    // usize counts (k * n * 4 wrapped in release, panicked in debug): named errors.
    let mut bad = q.clone();
    bad.scales.pop();
    let e = msg(relayout(&bad, &cfg).unwrap_err());
    assert!(e.contains("`weight`") && e.contains("`scales`"), "{e}");
    let big = (i32::MAX as usize / 1024) * 1024;
    let cfg8 = QMatmulConfig::default_for(DType::Int(8), DType::F16, Some(128), false);
    let huge = QuantizedWeight {
        k: big,
        n: big,
        ..quantize(DType::Int(8), 256, 2 * cfg8.bn, Group::Rows(128), 1)
    };
    let e = msg(relayout(&huge, &cfg8).unwrap_err());
    assert!(
        e.contains("`weight`") && e.contains("more bits than usize"),
        "{e}"
    );
}

/// With one warp along m and four along n, the layouts are those of the paper programs of
/// `tilus::programs` (Figure 2), and the weight format is what Figure 8 produces (for the
/// 1-, 2- and 4-bit integers, Figure 8 with the codes' layout in the split packing order).
#[test]
fn default_layouts_and_format_are_figure_2_and_8() {
    use tilus::programs;
    let seed: u64 = rand::random();
    for dtype in weight_types()
        .into_iter()
        .filter(|d| d.kind() != tilus::core::dtype::Kind::Float)
    {
        let cfg = configs(dtype)[0];
        let (bits, bm, bn, bk) = (dtype.bits() as usize, cfg.bm, cfg.bn, cfg.bk);
        let lay = QMatmulLayouts::new(&cfg).unwrap();
        assert_eq!(lay.b, programs::b_tile(bk, bn), "{dtype}");
        assert_eq!(lay.c, programs::c_tile(bm, bn), "{dtype}");
        assert_eq!(lay.wbytes, programs::weight_bytes(bk, bn, bits), "{dtype}");
        // Figure 2's A tile is one warp's, replicated by the block.
        let fig_a = programs::a_tile(bm, bk);
        for t in 0..cfg.warps * 32 {
            for i in 0..lay.a.num_locals() {
                assert_eq!(lay.a.eval(t, i), fig_a.eval(t % 32, i), "{dtype}");
            }
        }
        let (k, n) = (2 * bk, bn);
        let q = quantize(dtype, k, n, Group::PerChannel, seed);
        let mut args = vec![
            Arg::I32(k as i32),
            Arg::I32(n as i32),
            Arg::Buffer(q.codes.clone()),
            Arg::Buffer(vec![0x5A; q.codes.len()]),
        ];
        let figure8 = match pack_split(dtype, DType::F16) {
            None => programs::relayout_int(dtype, bk, bn),
            Some(h) => {
                assert_eq!(lay.q, lay.b.swap_inner_locals(2, h).unwrap(), "{dtype}");
                programs::relayout_with(dtype, lay.q.clone(), bk, bn)
            }
        };
        interp::run(&figure8, &mut args).unwrap();
        let Arg::Buffer(figure8) = &args[3] else {
            unreachable!()
        };
        assert_eq!(figure8, &relayout(&q, &cfg).unwrap(), "{dtype} seed {seed}");
    }
}

/// The packing order is the cheapest cast's: the 1-, 2- and 4-bit integers put each pair one
/// 16-bit lane apart (`pack_split` picks by instruction count; the rest is printed).
#[test]
fn pack_split_choices() {
    let mut seen = Vec::new();
    for dtype in weight_types() {
        for adtype in [DType::F16, DType::BF16] {
            let h = pack_split(dtype, adtype);
            seen.push(format!("{dtype}/{adtype}: {h:?}"));
            let bits = dtype.bits() as usize;
            if !dtype.is_float() && matches!(bits, 1 | 2 | 4) {
                assert_eq!(h, Some(16 / bits), "{dtype} {adtype}");
            }
        }
    }
    println!("{}", seen.join("\n"));
}
