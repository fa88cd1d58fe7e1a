//! The dense GEMM on the warpgroup MMA (`tilus::kernels::gemm`) without a GPU: every
//! configuration through the interpreter against an f64 reference at ragged shapes; the
//! generated CUDA issues wgmma and fences shared writes for the async proxy; the verifier's
//! wgmma rules name the operand. NVRTC/ptxas/SASS checks are in `tests/codegen_cuda.rs`, the GPU
//! runs in `tests/gpu_gemm.rs`.

use half::{bf16, f16};
use rand::Rng;
use tilus::kernels::gemm::{gemm_bf16, gemm_f16, gemm_tma_bf16, gemm_tma_f16};

/// `c = a · bᵀ` in f64 from the rounded inputs.
fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum();
        }
    }
    c
}

fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// The tensor maps a kernel's launch encodes: the parameter each views, its box, its swizzle.
fn tensor_maps(
    k: &tilus::core::codegen::CudaKernel,
) -> Vec<(String, Vec<u32>, tilus::core::launch::TmaSwizzle)> {
    use tilus::core::launch::ParamKind;
    k.launch
        .params
        .iter()
        .filter_map(|q| match &q.kind {
            ParamKind::TensorMap {
                param,
                box_shape,
                swizzle,
                ..
            } => Some((
                k.launch.params[*param].ir_name.clone(),
                box_shape.clone(),
                *swizzle,
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn every_configuration_matches_f64_on_the_interpreter() {
    let mut rng = rand::rng();
    // Ragged in every dimension; k spans several pipeline steps and a partial one.
    let (m, n, k) = (70, 136, 200);
    let a: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let b: Vec<f16> = (0..n * k)
        .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect();
    let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
    let want = reference(&af, &bf, m, n, k);
    for cfg in gemm_f16::SPACE {
        let mut c = vec![f16::NAN; m * n];
        gemm_f16::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 2e-3, "{cfg}: relative error {e}");
    }
    for cfg in gemm_tma_f16::SPACE {
        let mut c = vec![f16::NAN; m * n];
        gemm_tma_f16::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
            .unwrap_or_else(|e| panic!("tma {cfg}: {e}"));
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 2e-3, "tma {cfg}: relative error {e}");
    }
    // bf16, one configuration.
    let ab: Vec<bf16> = af.iter().map(|&x| bf16::from_f64(x)).collect();
    let bb: Vec<bf16> = bf.iter().map(|&x| bf16::from_f64(x)).collect();
    let want = reference(
        &ab.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
        &bb.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
        m,
        n,
        k,
    );
    let cfg = &gemm_bf16::SPACE[gemm_bf16::SPACE.len() - 1];
    let mut c = vec![bf16::NAN; m * n];
    gemm_bf16::interpret(cfg, m as i32, n as i32, k as i32, &ab, &bb, &mut c).unwrap();
    let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
    let e = rel_err(&got, &want);
    assert!(e < 1e-2, "bf16 {cfg}: relative error {e}");
    let cfg = &gemm_tma_bf16::SPACE[0];
    let mut c = vec![bf16::NAN; m * n];
    gemm_tma_bf16::interpret(cfg, m as i32, n as i32, k as i32, &ab, &bb, &mut c).unwrap();
    let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
    let e = rel_err(&got, &want);
    assert!(e < 1e-2, "tma bf16 {cfg}: relative error {e}");
}

/// The copy-engine GEMM: each stage's tiles are `cp.async.bulk.tensor` copies completing on an
/// mbarrier, through two tensor maps (one per operand) that the launcher encodes.
#[test]
fn generated_cuda_copies_with_tensor_maps_on_mbarriers() {
    use tilus::core::launch::TmaSwizzle;
    for cfg in gemm_tma_f16::SPACE {
        let p = gemm_tma_f16::program(cfg).expect("embedded program");
        let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
        for needed in [
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.init.shared::cta.b64",
            "const __grid_constant__ tilus_tensor_map",
        ] {
            assert!(k.source.contains(needed), "{cfg}: no `{needed}`");
        }
        assert!(!k.source.contains("cp.async.cg"), "{cfg}: cp.async left");
        let maps = tensor_maps(&k);
        let (bm, bn) = (cfg.BM as u32, cfg.BN as u32);
        assert_eq!(
            maps,
            vec![
                ("a".to_string(), vec![bm, 64], TmaSwizzle::B128),
                ("b".to_string(), vec![bn, 64], TmaSwizzle::B128),
            ],
            "{cfg}"
        );
        // Each copy announces its box's bytes on the stage's barrier.
        for rows in [bm, bn] {
            let bytes = format!("{}u, (int)", rows * 64 * 2);
            assert!(k.source.contains(&bytes), "{cfg}: no copy of {rows} rows");
        }
    }
}

#[test]
fn generated_cuda_issues_wgmma_and_fences_the_async_proxy() {
    for cfg in gemm_f16::SPACE {
        let p = gemm_f16::program(cfg).expect("embedded program");
        let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
        let wgmma = format!("wgmma.mma_async.sync.aligned.m64n{}k16.f32.f16.f16", cfg.BN);
        assert!(k.source.contains(&wgmma), "{cfg}: no {wgmma}");
        for needed in [
            "wgmma.fence.sync.aligned",
            "wgmma.commit_group.sync.aligned",
            "wgmma.wait_group.sync.aligned 0",
            "fence.proxy.async.shared::cta",
            "__align__(1024)",
        ] {
            assert!(k.source.contains(needed), "{cfg}: no `{needed}`");
        }
        // One wgmma call per warpgroup accumulator block and 16 of k.
        let calls = k
            .source
            .matches(&format!("tilus_wgmma_m64n{}k16_f16(&", cfg.BN))
            .count();
        assert_eq!(calls, 64 / 16, "{cfg}");
    }
}

/// The 8-bit GEMMs on the interpreter, ragged in every dimension (`k` a multiple of 16, the
/// copy engine's row unit, spanning two 128-wide steps and a partial one): i8 exactly against
/// an i64 reference (torch's `_int_mm`), fp8 (e4m3, e5m2) against f64 within f16's rounding.
#[test]
fn eight_bit_gemms_match_their_references_on_the_interpreter() {
    use tilus::kernels::gemm::{gemm_tma_e4m3, gemm_tma_e5m2, gemm_tma_i8};
    use tilus::DType;
    let mut rng = rand::rng();
    let (m, n, k) = (70, 136, 288);
    let mut a: Vec<i8> = (0..m * k).map(|_| rng.random_range(-128..=127)).collect();
    let mut b: Vec<i8> = (0..n * k).map(|_| rng.random_range(-128..=127)).collect();
    // The extremes too: row 0 of a and row 0 of b all -128, so c[0, 0] = 288 · 2^14.
    a[..k].fill(-128);
    b[..k].fill(-128);
    let want: Vec<i64> = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k)
                .map(|kk| a[i * k + kk] as i64 * b[j * k + kk] as i64)
                .sum()
        })
        .collect();
    assert_eq!(want[0], 288 << 14);
    for cfg in gemm_tma_i8::SPACE.iter().step_by(3) {
        let mut c = vec![i32::MIN; m * n];
        gemm_tma_i8::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
            .unwrap_or_else(|e| panic!("i8 {cfg}: {e}"));
        for (ij, (&got, &w)) in c.iter().zip(&want).enumerate() {
            assert_eq!(got as i64, w, "i8 {cfg}: c[{}, {}]", ij / n, ij % n);
        }
    }
    for dtype in [DType::F8E4M3, DType::F8E5M2] {
        let mut codes = |len| -> Vec<u8> {
            (0..len)
                .map(|_| dtype.encode(rng.random_range(-2.0f32..2.0)).unwrap() as u8)
                .collect()
        };
        let (a, b) = (codes(m * k), codes(n * k));
        let dec = |v: &[u8]| -> Vec<f64> { v.iter().map(|&x| dtype.decode(x as u32)).collect() };
        let want = reference(&dec(&a), &dec(&b), m, n, k);
        let mut c = vec![f16::NAN; m * n];
        // One configuration of each: the largest tile for e4m3, the smallest for e5m2.
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (cfg, r) = if dtype == DType::F8E4M3 {
            let cfg = &gemm_tma_e4m3::SPACE[0];
            (
                cfg.to_string(),
                gemm_tma_e4m3::interpret(cfg, mi, ni, ki, &a, &b, &mut c),
            )
        } else {
            let cfg = gemm_tma_e5m2::SPACE.last().unwrap();
            (
                cfg.to_string(),
                gemm_tma_e5m2::interpret(cfg, mi, ni, ki, &a, &b, &mut c),
            )
        };
        r.unwrap_or_else(|e| panic!("{dtype} {cfg}: {e}"));
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 2e-3, "{dtype} {cfg}: relative error {e}");
    }
}

/// The 8-bit GEMMs issue `m64nNk32` wgmmas of their types, 4 per warpgroup block and 128-wide
/// step, on copies of 128-byte rows swizzled for 1-byte elements.
#[test]
fn eight_bit_gemms_issue_k32_wgmmas() {
    use tilus::core::launch::TmaSwizzle;
    use tilus::kernels::gemm::{gemm_tma_e4m3, gemm_tma_e5m2, gemm_tma_i8};
    let programs = [
        (
            "s32.s8.s8",
            "s8",
            gemm_tma_i8::program(&gemm_tma_i8::SPACE[0]),
        ),
        (
            "f32.e4m3.e4m3",
            "e4m3",
            gemm_tma_e4m3::program(&gemm_tma_e4m3::SPACE[0]),
        ),
        (
            "f32.e5m2.e5m2",
            "e5m2",
            gemm_tma_e5m2::program(&gemm_tma_e5m2::SPACE[0]),
        ),
    ];
    let (bm, bn) = (gemm_tma_i8::SPACE[0].BM as u32, gemm_tma_i8::SPACE[0].BN);
    for (types, t, p) in programs {
        let k =
            tilus::core::codegen::emit(&p.expect("embedded program"), &Default::default()).unwrap();
        let wgmma = format!("wgmma.mma_async.sync.aligned.m64n{bn}k32.{types}");
        assert!(k.source.contains(&wgmma), "no {wgmma}");
        let calls = k
            .source
            .matches(&format!("tilus_wgmma_m64n{bn}k32_{t}(&"))
            .count();
        assert_eq!(calls, 128 / 32, "{t}");
        let boxes: Vec<_> = tensor_maps(&k)
            .into_iter()
            .map(|(_, shape, swizzle)| (shape, swizzle))
            .collect();
        assert_eq!(
            boxes,
            vec![
                (vec![bm, 128], TmaSwizzle::B128),
                (vec![bn as u32, 128], TmaSwizzle::B128)
            ],
            "{t}"
        );
    }
}

/// Misuses of `dot_async` the interpreter reports: the accumulator read before its `dot_wait`,
/// an operand overwritten while the wgmmas read it, a kernel that ends with groups in flight.
mod hazards {
    use half::f16;

    #[tilus::kernel(grid = [1], warps = 4, space(MODE = [0, 1, 2, 3]))]
    pub fn misuse<const MODE: i32>(a: Global<f16>, c: GlobalMut<f32>) {
        let ga = view_global(a, [64, 64]);
        let sa = shared::<f16>([64, 64], swizzle(3, 3, 3));
        copy_async(ga, sa, [0, 0]);
        commit_group();
        wait_group(0);
        sync();
        let mut acc = register::<f32>(layout!(spatial(4, 1).local(1, 8).mma_c), 0.0);
        acc = dot_async(sa, permute_shared(sa, [1, 0]), acc);
        if MODE == 1 {
            // Read before the wait.
            store_global(acc, view_global(c, [64, 64]), [0, 0]);
        }
        if MODE == 2 {
            // Overwrite an operand the wgmmas still read.
            copy_async(ga, sa, [0, 0]);
            commit_group();
            wait_group(0);
        }
        if MODE != 3 {
            dot_wait(0);
            store_global(acc, view_global(c, [64, 64]), [0, 0]);
        }
    }

    #[test]
    fn the_interpreter_reports_each_misuse() {
        let a: Vec<f16> = (0..64 * 64)
            .map(|i| f16::from_f32((i % 7) as f32 - 3.0))
            .collect();
        let mut c = vec![f32::NAN; 64 * 64];
        misuse::interpret(&misuse::Config { MODE: 0 }, &a, &mut c).unwrap();
        // c = a · aᵀ exactly (small integers).
        for i in 0..64 {
            for j in 0..64 {
                let want: f32 = (0..64)
                    .map(|k| a[i * 64 + k].to_f32() * a[j * 64 + k].to_f32())
                    .sum();
                assert_eq!(c[i * 64 + j], want, "c[{i}, {j}]");
            }
        }
        for (mode, needle) in [
            (
                1,
                "while a dot_async into it is in flight; missing dot_wait?",
            ),
            (
                2,
                "while a dot_async reading it is in flight; missing dot_wait?",
            ),
            (
                3,
                "still in flight at the end of the kernel; missing dot_wait(0)?",
            ),
        ] {
            let e = misuse::interpret(&misuse::Config { MODE: mode }, &a, &mut c).unwrap_err();
            assert!(e.to_string().contains(needle), "mode {mode}: {e}");
        }
    }
}

/// Misuses of `tma_load` and `mbarrier_*` the interpreter reports, and a correct use checked
/// exactly: a stage read before its barrier completes, a wait on the wrong phase (a deadlock),
/// copies never waited for, more arrivals than a phase expects, a copy over bytes an in-flight
/// wgmma reads.
mod tma_hazards {
    use half::f16;

    #[tilus::kernel(grid = [1], warps = 4, space(MODE = [0, 1, 2, 3, 4, 5, 6]))]
    pub fn misuse<const MODE: i32>(a: Global<f16>, c: GlobalMut<f32>) {
        let ga = view_global(a, [64, 64]);
        let sa = shared::<f16>([64, 64], swizzle(3, 3, 3));
        let bars = mbarriers(2, 1);
        tma_load(ga, sa, [0, 0], bars, 0);
        if MODE == 3 {
            // Ends with the copy in flight.
            exit();
        }
        if MODE == 1 {
            // Read before the barrier says the bytes landed.
            let early = load_shared(sa, layout!(spatial(4, 32).local(16, 2)), [0, 0]);
            store_global(cast::<f32>(early), view_global(c, [64, 64]), [0, 0]);
        }
        if MODE == 2 {
            // Phase 0 has parity 0: waiting for parity 1 passes at once, so wait on the
            // other barrier's phase 0, which nothing completes.
            mbarrier_wait(bars, 1, 0);
        }
        if MODE == 4 {
            // Four warps arrive on the next phase, which takes one arrival.
            mbarrier_arrive(bars, 0);
        }
        mbarrier_wait(bars, 0, 0);
        let mut acc = register::<f32>(layout!(spatial(4, 1).local(1, 8).mma_c), 0.0);
        if MODE == 5 {
            acc = dot_async(sa, permute_shared(sa, [1, 0]), acc);
            // The copy engine overwrites what the wgmmas read.
            tma_load(ga, sa, [0, 0], bars, 0);
            mbarrier_wait(bars, 0, 1);
            dot_wait(0);
        } else if MODE == 6 {
            // A second round on the same barrier: phase 1, parity 1.
            tma_load(ga, sa, [0, 0], bars, 0);
            mbarrier_wait(bars, 0, 1);
            acc = dot(sa, permute_shared(sa, [1, 0]), acc);
        } else {
            acc = dot(sa, permute_shared(sa, [1, 0]), acc);
        }
        store_global(acc, view_global(c, [64, 64]), [0, 0]);
    }

    #[test]
    fn the_interpreter_reports_each_misuse() {
        let a: Vec<f16> = (0..64 * 64)
            .map(|i| f16::from_f32((i % 7) as f32 - 3.0))
            .collect();
        for mode in [0, 6] {
            let mut c = vec![f32::NAN; 64 * 64];
            misuse::interpret(&misuse::Config { MODE: mode }, &a, &mut c).unwrap();
            for i in 0..64 {
                for j in 0..64 {
                    let want: f32 = (0..64)
                        .map(|k| a[i * 64 + k].to_f32() * a[j * 64 + k].to_f32())
                        .sum();
                    assert_eq!(c[i * 64 + j], want, "mode {mode}: c[{i}, {j}]");
                }
            }
        }
        let mut c = vec![f32::NAN; 64 * 64];
        for (mode, needle) in [
            (1, "while an asynchronous copy into it is in flight; missing wait_group or mbarrier_wait?"),
            (2, "deadlock: waiting on barrier 1 of `bars` for the phase of parity 0"),
            (3, "tma_load(s) still in flight at the end of the kernel; missing mbarrier_wait?"),
            (4, "4 arrivals on phase 1 of a barrier that still expects 1 of its 1 arrivals"),
            (5, "a tma_load into shared tensor `sa` at [0, 0] while a dot_async reading it is in flight"),
        ] {
            let e = misuse::interpret(&misuse::Config { MODE: mode }, &a, &mut c).unwrap_err();
            assert!(e.to_string().contains(needle), "mode {mode}: {e}");
        }
    }
}

/// The 4-bit-weight wgmma GEMM (`tilus::kernels::gemm::w4`) on the interpreter: every
/// configuration at ragged `m` and `n` against an f64 product with the dequantized weight; the
/// host format round-trips and names bad arguments.
mod w4 {
    use half::f16;
    use rand::Rng;
    use tilus::kernels::gemm::w4::{gemm_w4_f16, gemm_w4t_f16, W4Error, W4Weight, W4tWeight};

    #[test]
    fn quantize_dequantize_and_errors() {
        let mut rng = rand::rng();
        let (n, k, group) = (5, 256, 128);
        let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let q = W4Weight::quantize(&w, n, k, group).unwrap();
        let d = q.dequantize();
        for r in 0..n {
            for g in 0..k / group {
                let s = q.scales[g * n + r].to_f32();
                for i in 0..group {
                    let x = r * k + g * group + i;
                    // Half a step of rounding, one f16 rounding of the product, and the f16
                    // scale's own rounding (at most 7 steps of 2^-11 relative).
                    let bound = 0.5 * s + s * (7.0 * 2f32.powi(-11)) + d[x].abs() * 2f32.powi(-10);
                    assert!(
                        (d[x] - w[x]).abs() <= bound,
                        "w[{x}] = {} -> {}",
                        w[x],
                        d[x]
                    );
                }
            }
        }
        let bad = |e: Result<W4Weight, W4Error>, arg: &str| {
            let e = e.unwrap_err().to_string();
            assert!(e.contains(&format!("`{arg}`")), "{e}");
        };
        bad(W4Weight::quantize(&w, n, k, 96), "group");
        bad(W4Weight::quantize(&w, n, 200, 128), "k");
        bad(W4Weight::quantize(&w[1..], n, k, group), "w");
        let mut nan = w.clone();
        nan[7] = f32::NAN;
        bad(W4Weight::quantize(&nan, n, k, group), "w");
    }

    /// Random activations `[m, k]`, a random weight `[n, k]` quantized with `group`, and the f64
    /// product of the activations with the dequantized weight.
    fn case(m: usize, n: usize, k: usize, group: usize) -> (Vec<f16>, W4Weight, Vec<f64>) {
        let mut rng = rand::rng();
        let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let q = W4Weight::quantize(&w, n, k, group).unwrap();
        let wd: Vec<f64> = q.dequantize().iter().map(|&x| x as f64).collect();
        let a: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect();
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        (a, q, super::reference(&af, &wd, m, n, k))
    }

    #[test]
    fn every_configuration_matches_f64_on_the_interpreter() {
        let (m, n, k, group) = (70, 136, 256, 128);
        let (a, q, want) = case(m, n, k, group);
        for cfg in gemm_w4_f16::SPACE {
            let mut c = vec![f16::NAN; m * n];
            gemm_w4_f16::interpret(
                cfg,
                m as i32,
                n as i32,
                k as i32,
                group as i32,
                &a,
                &q.codes,
                &q.scales,
                &mut c,
            )
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
            let e = super::rel_err(&got, &want);
            assert!(e < 2e-3, "{cfg}: relative error {e}");
        }
    }

    /// The transposed product with the weight as wgmma's register operand: every configuration
    /// (16 to 256 activation rows per block) at a ragged `m` and an odd number of 64-wide steps
    /// (the synchronous tail), against f64; the host re-layout
    /// names bad arguments.
    #[test]
    fn the_register_weight_kernel_matches_f64_on_the_interpreter() {
        let (m, n, k, group) = (33, 256, 192, 64);
        let (a, q, want) = case(m, n, k, group);
        let t = W4tWeight::from_w4(&q, 128).unwrap();
        for cfg in gemm_w4t_f16::SPACE {
            let mut c = vec![f16::NAN; m * n];
            gemm_w4t_f16::interpret(
                cfg,
                m as i32,
                n as i32,
                k as i32,
                group as i32,
                &a,
                &t.codes,
                &t.scales,
                &mut c,
            )
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
            let e = super::rel_err(&got, &want);
            assert!(e < 2e-3, "{cfg}: relative error {e}");
        }
        let e = W4tWeight::from_w4(&q, 96).unwrap_err().to_string();
        assert!(e.contains("`bn`"), "{e}");
        let (_, q3, _) = case(1, 192, k, group);
        let e = W4tWeight::from_w4(&q3, 128).unwrap_err().to_string();
        assert!(e.contains("`n`") && e.contains("192"), "{e}");
    }
}

#[path = "kernels/wgmma_rs.rs"]
mod wgmma_rs_kernels;

/// The RS form of wgmma (`a` in registers, `tests/kernels/wgmma_rs.rs`) on the interpreter:
/// every configuration, f16 and bf16, random inputs, output poisoned, against f64; the register
/// `a` written while a `dot_async` reads it is reported; the generated code passes `a`'s
/// registers to the RS instruction.
mod register_a {
    use super::wgmma_rs_kernels::{
        wgmma_rs_bf16, wgmma_rs_f16, wgmma_rs_reference, wgmma_rs_split_n,
    };
    use half::{bf16, f16};
    use rand::Rng;

    fn max_rel(got: &[f32], want: &[f64]) -> f64 {
        let scale = want.iter().map(|w| w.abs()).fold(0.0, f64::max);
        got.iter()
            .zip(want)
            .map(|(&g, &w)| ((g as f64) - w).abs() / scale)
            .fold(0.0, f64::max)
    }

    #[test]
    fn every_configuration_matches_f64_on_the_interpreter() {
        let mut rng = rand::rng();
        let mut rnd =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let (w, x, c0) = (rnd(128 * 64), rnd(128 * 64), rnd(128 * 128));
        let c0f: Vec<f64> = c0.iter().map(|&v| v as f64).collect();
        // f16
        let (wh, xh): (Vec<f16>, Vec<f16>) = (
            w.iter().map(|&v| f16::from_f32(v)).collect(),
            x.iter().map(|&v| f16::from_f32(v)).collect(),
        );
        let want = wgmma_rs_reference(
            &wh.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &xh.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &c0f,
        );
        for cfg in wgmma_rs_f16::SPACE {
            let mut c = vec![f32::NAN; 128 * 128];
            wgmma_rs_f16::interpret(cfg, &wh, &xh, &c0, &mut c)
                .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            // Two dots, each an exact sum rounded once to f32.
            let e = max_rel(&c, &want);
            assert!(e < 1e-6, "f16 {cfg}: max relative error {e}");
        }
        for cfg in wgmma_rs_split_n::SPACE {
            let mut c = vec![f32::NAN; 128 * 128];
            wgmma_rs_split_n::interpret(cfg, &wh, &xh, &c0, &mut c)
                .unwrap_or_else(|e| panic!("split n {cfg}: {e}"));
            let e = max_rel(&c, &want);
            assert!(e < 1e-6, "split n {cfg}: max relative error {e}");
        }
        // bf16
        let (wb, xb): (Vec<bf16>, Vec<bf16>) = (
            w.iter().map(|&v| bf16::from_f32(v)).collect(),
            x.iter().map(|&v| bf16::from_f32(v)).collect(),
        );
        let want = wgmma_rs_reference(
            &wb.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &xb.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &c0f,
        );
        for cfg in wgmma_rs_bf16::SPACE {
            let mut c = vec![f32::NAN; 128 * 128];
            wgmma_rs_bf16::interpret(cfg, &wb, &xb, &c0, &mut c)
                .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            let e = max_rel(&c, &want);
            assert!(e < 1e-6, "bf16 {cfg}: max relative error {e}");
        }
    }

    /// u8 weights against i8 activations (`.s32.u8.s8`), exact in i32, from `c0` and from a
    /// fresh zero tile.
    #[test]
    fn eight_bit_integers_of_both_signednesses_are_exact_on_the_interpreter() {
        use super::wgmma_rs_kernels::{wgmma_rs_u8s8, wgmma_rs_u8s8_reference};
        let mut rng = rand::rng();
        let w: Vec<u8> = (0..128 * 128).map(|_| rng.random()).collect();
        let x: Vec<i8> = (0..128 * 128).map(|_| rng.random()).collect();
        let c0: Vec<i32> = (0..128 * 128)
            .map(|_| rng.random_range(-1 << 20..1 << 20))
            .collect();
        let want = wgmma_rs_u8s8_reference(&w, &x, &c0);
        for cfg in wgmma_rs_u8s8::SPACE {
            let mut c = vec![i32::MIN; 128 * 128];
            wgmma_rs_u8s8::interpret(cfg, &w, &x, &c0, &mut c)
                .unwrap_or_else(|e| panic!("{cfg}: {e}"));
            assert_eq!(c, want, "{cfg}");
        }
    }

    #[test]
    fn generated_cuda_issues_the_rs_form() {
        use super::wgmma_rs_kernels::wgmma_rs_u8s8;
        for cfg in wgmma_rs_u8s8::SPACE {
            let p = wgmma_rs_u8s8::program(cfg).expect("embedded program");
            let src = tilus::core::codegen::emit(&p, &Default::default())
                .unwrap()
                .source;
            // `d, {a0..a3}, desc-b, scale-d`: no scales or transposes on integers.
            assert!(
                src.contains("wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 {%0, ")
                    && src.contains("}, {%64, %65, %66, %67}, %68, 1;"),
                "{cfg}: no RS u8 x s8 wgmma"
            );
            // Two dots of (2 / WG) blocks and 4 k steps of 32 each; from a zero tile, the
            // first step of each block ignores the accumulator and nothing is copied.
            let calls = src.matches("tilus_wgmma_rs_m64n128k32_u8s8(&").count()
                + src.matches("tilus_wgmma_rs_m64n128k32_u8s8_z(&").count();
            assert_eq!(calls as i32, 2 * (2 / cfg.WG) * 4, "{cfg}");
            let zero_form = src.matches("tilus_wgmma_rs_m64n128k32_u8s8_z(&").count();
            assert_eq!(zero_form as i32, cfg.ZERO * (2 / cfg.WG), "{cfg}");
        }
        for cfg in wgmma_rs_f16::SPACE {
            let p = wgmma_rs_f16::program(cfg).expect("embedded program");
            let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
            let src = &k.source;
            // `d, {a0..a3}, desc-b, scale-d, imm-scale-a, imm-scale-b, imm-trans-b`.
            assert!(
                src.contains("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, ")
                    && src.contains("}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;"),
                "{cfg}: no RS wgmma"
            );
            // Two dots of (2 / WG) blocks and 4 k steps each, per warpgroup.
            let calls = src.matches("tilus_wgmma_rs_m64n128k16_f16(&").count();
            assert_eq!(calls as i32, 2 * (2 / cfg.WG) * 4, "{cfg}");
            assert!(!src.contains("tilus_wgmma_m64n"), "{cfg}: an SS wgmma");
        }
        // 2 x 2 warpgroups: 64-wide wgmmas, each warpgroup at its own columns of `x`.
        for cfg in wgmma_rs_split_n::SPACE {
            let p = wgmma_rs_split_n::program(cfg).expect("embedded program");
            let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
            let calls = k.source.matches("tilus_wgmma_rs_m64n64k16_f16(&").count();
            assert_eq!(calls, 2 * 4, "split n {cfg}");
            assert!(
                k.source.contains("? 8192u : "),
                "split n {cfg}: b offset by warpgroup"
            );
        }
    }

    mod hazards {
        use half::f16;

        #[tilus::kernel(grid = [1], warps = 4, space(MODE = [0, 1]))]
        pub fn overwrite<const MODE: i32>(a: Global<f16>, c: GlobalMut<f32>) {
            let ga = view_global(a, [64, 64]);
            let mut ra = load_global(ga, layout!(spatial(4, 1).local(1, 4).mma_a), [0, 0]);
            let sa = shared::<f16>([64, 64], swizzle(3, 3, 3));
            copy_async(ga, sa, [0, 0]);
            commit_group();
            wait_group(0);
            sync();
            let mut acc = register::<f32>(layout!(spatial(4, 1).local(1, 8).mma_c), 0.0);
            acc = dot_async(ra, permute_shared(sa, [1, 0]), acc);
            if MODE == 1 {
                // The tensor cores still read these registers.
                ra = load_global(ga, layout!(spatial(4, 1).local(1, 4).mma_a), [0, 0]);
            }
            dot_wait(0);
            // After the wait the registers are free again.
            ra = load_global(ga, layout!(spatial(4, 1).local(1, 4).mma_a), [0, 0]);
            acc = dot(ra, permute_shared(sa, [1, 0]), acc);
            store_global(acc, view_global(c, [64, 64]), [0, 0]);
        }

        #[test]
        fn writing_a_before_the_wait_is_reported() {
            let a: Vec<f16> = (0..64 * 64)
                .map(|i| f16::from_f32((i % 7) as f32 - 3.0))
                .collect();
            let mut c = vec![f32::NAN; 64 * 64];
            overwrite::interpret(&overwrite::Config { MODE: 0 }, &a, &mut c).unwrap();
            // c = 2 a · aᵀ exactly (small integers).
            for i in 0..64 {
                for j in 0..64 {
                    let want: f32 = (0..64)
                        .map(|k| a[i * 64 + k].to_f32() * a[j * 64 + k].to_f32())
                        .sum();
                    assert_eq!(c[i * 64 + j], 2.0 * want, "c[{i}, {j}]");
                }
            }
            let e = overwrite::interpret(&overwrite::Config { MODE: 1 }, &a, &mut c).unwrap_err();
            assert!(
                e.to_string().contains(
                    "`ra` is written while a dot_async reading it from registers is in flight; missing dot_wait?"
                ),
                "{e}"
            );
        }
    }
}

#[path = "kernels/tma_store.rs"]
mod tma_store_kernels;

/// `tma_store` (`tests/kernels/tma_store.rs`) on the interpreter: ragged shapes, random inputs,
/// outputs poisoned, one element past each view too: `y` is `x`, `z` is `2x`, and nothing past
/// the views is written; writing the source again before `tma_store_wait` is reported. The
/// generated CUDA fences the shared writes for the copy engine, issues the bulk stores and
/// waits for their reads at the `tma_store_wait` and before the kernel ends.
mod tma_store {
    use super::tma_store_kernels::{tma_store_plain, tma_store_swizzled, tma_store_unwaited};
    use half::f16;
    use rand::Rng;
    use tilus::core::codegen::emit;

    type Interpret = fn(
        i32,
        i32,
        &[f16],
        &mut [f16],
        &mut [f16],
    ) -> Result<(), tilus::macro_support::KernelError>;

    #[test]
    fn stores_match_the_tiles_and_stay_inside_the_view() {
        let mut rng = rand::rng();
        let kernels: [(&str, Interpret); 2] = [
            ("plain", |m, n, x, y, z| {
                tma_store_plain::interpret(&tma_store_plain::SPACE[0], m, n, x, y, z)
            }),
            ("swizzled", |m, n, x, y, z| {
                tma_store_swizzled::interpret(&tma_store_swizzled::SPACE[0], m, n, x, y, z)
            }),
        ];
        for (name, run) in kernels {
            for (m, n) in [(16, 64), (33, 104), (5, 136)] {
                let x: Vec<f16> = (0..m * n)
                    .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
                    .collect();
                let poison = f16::from_f32(-777.0);
                let (mut y, mut z) = (vec![poison; m * n + 1], vec![poison; m * n + 1]);
                run(m as i32, n as i32, &x, &mut y, &mut z)
                    .unwrap_or_else(|e| panic!("{name} {m}x{n}: {e}"));
                for i in 0..m * n {
                    assert_eq!(y[i], x[i], "{name} {m}x{n}: y[{i}]");
                    assert_eq!(z[i].to_f64(), 2.0 * x[i].to_f64(), "{name} {m}x{n}: z[{i}]");
                }
                assert_eq!(
                    (y[m * n], z[m * n]),
                    (poison, poison),
                    "{name} {m}x{n}: past the view"
                );
            }
        }
    }

    #[test]
    fn writing_the_source_before_the_wait_is_reported() {
        let x = vec![f16::ONE; 16 * 64];
        let (mut y, mut z) = (vec![f16::ZERO; 16 * 64], vec![f16::ZERO; 16 * 64]);
        let cfg = &tma_store_unwaited::SPACE[0];
        let e = tma_store_unwaited::interpret(cfg, 16, 64, &x, &mut y, &mut z)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("write to shared tensor `s`")
                && e.contains("while a tma_store reading it is in flight; missing tma_store_wait?"),
            "{e}"
        );
    }

    #[test]
    fn generated_cuda_fences_and_issues_the_bulk_store() {
        for program in [
            tma_store_plain::program(&tma_store_plain::SPACE[0]),
            tma_store_swizzled::program(&tma_store_swizzled::SPACE[0]),
        ] {
            let src = emit(&program.unwrap(), &Default::default()).unwrap().source;
            for want in [
                "fence.proxy.async.shared::cta",
                "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                "cp.async.bulk.wait_group.read 0",
            ] {
                assert!(src.contains(want), "no `{want}` in\n{src}");
            }
            assert!(
                !src.contains("mbarrier"),
                "a store needs no barrier:\n{src}"
            );
            // The wait between the stores, and thread 0's before the kernel ends.
            let waits = src.matches("if (tid == 0) tilus_tma_store_wait();").count();
            assert_eq!(waits, 2, "{src}");
        }
    }
}

/// The persistent copy-engine GEMM: a block walks several tiles as one sequence of steps (its
/// ring refilled across tile boundaries) and stores each tile through the copy engine.
mod persistent {
    use super::{reference, rel_err, tensor_maps};
    use half::{bf16, f16};
    use rand::Rng;
    use tilus::kernels::gemm::{gemm_persistent_bf16, gemm_persistent_f16, gemm_tma_f16};

    fn random(len: usize) -> Vec<f16> {
        let mut rng = rand::rng();
        (0..len)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect()
    }

    /// Every configuration, with fewer workers than tiles (blocks of two and three tiles, the
    /// last tile's steps ragged), one worker for all, and more workers than tiles (idle blocks):
    /// within f16 rounding of f64, every element written (the output is poisoned), and bit for
    /// bit the one-tile-per-block kernel's result.
    #[test]
    fn every_configuration_matches_f64_and_the_one_tile_kernel() {
        // 2 block rows x 2 or 3 block columns; k = 3 steps of 64, the last partial.
        let (m, n, k) = (150, 264, 136);
        let (a, b) = (random(m * k), random(n * k));
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let want = reference(&af, &bf, m, n, k);
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let mut one_tile = vec![f16::NAN; m * n];
        let tma = gemm_tma_f16::SPACE.iter().find(|c| c.BN == 256).unwrap();
        gemm_tma_f16::interpret(tma, mi, ni, ki, &a, &b, &mut one_tile).unwrap();
        for cfg in gemm_persistent_f16::SPACE {
            let tiles = m.div_ceil(cfg.BM as usize) * n.div_ceil(cfg.BN as usize);
            for workers in [1, tiles - 1, tiles + 2] {
                let mut c = vec![f16::NAN; m * n];
                gemm_persistent_f16::interpret(cfg, mi, ni, ki, workers as i32, &a, &b, &mut c)
                    .unwrap_or_else(|e| panic!("{cfg}, {workers} workers: {e}"));
                let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
                let e = rel_err(&got, &want);
                assert!(e < 2e-3, "{cfg}, {workers} workers: relative error {e}");
                if cfg.BN == 256 {
                    let same = c
                        .iter()
                        .zip(&one_tile)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{cfg}, {workers} workers: differs from {tma}");
                }
            }
        }
        // bf16, one configuration.
        let ab: Vec<bf16> = af.iter().map(|&x| bf16::from_f64(x)).collect();
        let bb: Vec<bf16> = bf.iter().map(|&x| bf16::from_f64(x)).collect();
        let want = reference(
            &ab.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            &bb.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            m,
            n,
            k,
        );
        let cfg = &gemm_persistent_bf16::SPACE[0];
        let mut c = vec![bf16::NAN; m * n];
        gemm_persistent_bf16::interpret(cfg, mi, ni, ki, 3, &ab, &bb, &mut c).unwrap();
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 1e-2, "bf16 {cfg}: relative error {e}");
    }

    /// Edge cases: more workers than tiles with the idle blocks past a whole group of tile
    /// rows (8 tile rows of one column, 10 workers: the tile order's divisions would divide
    /// by zero for them), an empty output (`m = 0`), which writes nothing, and fewer than one
    /// worker, which runs as one.
    #[test]
    fn idle_workers_and_empty_outputs() {
        let cfg = gemm_persistent_f16::SPACE
            .iter()
            .find(|c| c.BN == 128 && c.GROUP == 8)
            .unwrap();
        let (m, n, k) = (8 * 128, 128, 64);
        let (a, b) = (random(m * k), random(n * k));
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let want = reference(&af, &bf, m, n, k);
        let mut c = vec![f16::NAN; m * n];
        gemm_persistent_f16::interpret(cfg, m as i32, n as i32, k as i32, 10, &a, &b, &mut c)
            .unwrap_or_else(|e| panic!("{cfg}, 10 workers for 8 tiles: {e}"));
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 2e-3, "{cfg}: relative error {e}");
        let mut c: Vec<f16> = vec![];
        gemm_persistent_f16::interpret(cfg, 0, n as i32, k as i32, 4, &[], &b, &mut c)
            .unwrap_or_else(|e| panic!("{cfg}, m = 0: {e}"));
        // No workers, or a negative count, runs as one: every element written.
        for workers in [0, -3] {
            let mut c = vec![f16::NAN; m * n];
            gemm_persistent_f16::interpret(
                cfg, m as i32, n as i32, k as i32, workers, &a, &b, &mut c,
            )
            .unwrap_or_else(|e| panic!("{cfg}, {workers} workers: {e}"));
            let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
            let e = rel_err(&got, &want);
            assert!(e < 2e-3, "{cfg}, {workers} workers: relative error {e}");
        }
    }

    /// The generated code: the operands copied by `UTMALDG`'s tensor maps, the output stored
    /// box by box through a third (`c`, `[BM, 64]` boxes, 128-byte swizzle), the stores'
    /// source read before it is rewritten, and the block draining its stores before it exits.
    #[test]
    fn generated_cuda_stores_boxes_through_the_copy_engine() {
        use tilus::core::launch::TmaSwizzle;
        for cfg in gemm_persistent_f16::SPACE {
            let p = gemm_persistent_f16::program(cfg).expect("embedded program");
            let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
            for needed in [
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                "cp.async.bulk.wait_group.read 0",
                "fence.proxy.async.shared::cta",
            ] {
                assert!(k.source.contains(needed), "{cfg}: no `{needed}`");
            }
            let maps = tensor_maps(&k);
            let (bm, bn) = (cfg.BM as u32, cfg.BN as u32);
            for map in [
                ("a".to_string(), vec![bm, 64], TmaSwizzle::B128),
                ("b".to_string(), vec![bn, 64], TmaSwizzle::B128),
                ("c".to_string(), vec![bm, 64], TmaSwizzle::B128),
            ] {
                assert!(
                    maps.contains(&map),
                    "{cfg}: no tensor map {map:?} in {maps:?}"
                );
            }
        }
    }
}

/// The warp-specialized persistent GEMM (`gemm_ws_*`, `specialize!`): a producer warpgroup and
/// the consumers meeting at the ring's barriers.
mod warp_specialized {
    use super::{reference, rel_err};
    use half::{bf16, f16};
    use rand::Rng;
    use tilus::kernels::gemm::{gemm_persistent_f16, gemm_ws_bf16, gemm_ws_f16};

    fn random(len: usize) -> Vec<f16> {
        let mut rng = rand::rng();
        (0..len)
            .map(|_| f16::from_f32(rng.random_range(-1.0f32..1.0)))
            .collect()
    }

    /// Every configuration with one worker for all tiles, fewer workers than tiles and more
    /// (idle blocks), on a ragged shape: within f16 rounding of f64, every element written,
    /// and bit for bit the persistent kernel's result (the same wgmmas in the same order).
    #[test]
    fn every_configuration_matches_f64_and_the_persistent_kernel() {
        let (m, n, k) = (150, 264, 328);
        let (a, b) = (random(m * k), random(n * k));
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let want = reference(&af, &bf, m, n, k);
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        for cfg in gemm_ws_f16::SPACE {
            let same_tiles = gemm_persistent_f16::SPACE
                .iter()
                .find(|p| p.to_string() == cfg.to_string())
                .expect("the same space");
            let mut persistent = vec![f16::NAN; m * n];
            gemm_persistent_f16::interpret(same_tiles, mi, ni, ki, 2, &a, &b, &mut persistent)
                .unwrap();
            let tiles = m.div_ceil(cfg.BM as usize) * n.div_ceil(cfg.BN as usize);
            for workers in [1, tiles - 1, tiles + 2] {
                let mut c = vec![f16::NAN; m * n];
                gemm_ws_f16::interpret(cfg, mi, ni, ki, workers as i32, &a, &b, &mut c)
                    .unwrap_or_else(|e| panic!("{cfg}, {workers} workers: {e}"));
                let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
                let e = rel_err(&got, &want);
                assert!(e < 2e-3, "{cfg}, {workers} workers: relative error {e}");
                let same = c
                    .iter()
                    .zip(&persistent)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{cfg}, {workers} workers: differs from {same_tiles}");
            }
        }
        let ab: Vec<bf16> = af.iter().map(|&x| bf16::from_f64(x)).collect();
        let bb: Vec<bf16> = bf.iter().map(|&x| bf16::from_f64(x)).collect();
        let want = reference(
            &ab.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            &bb.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            m,
            n,
            k,
        );
        let cfg = &gemm_ws_bf16::SPACE[0];
        let mut c = vec![bf16::NAN; m * n];
        gemm_ws_bf16::interpret(cfg, mi, ni, ki, 3, &ab, &bb, &mut c).unwrap();
        let got: Vec<f64> = c.iter().map(|x| x.to_f64()).collect();
        let e = rel_err(&got, &want);
        assert!(e < 1e-2, "bf16 {cfg}: relative error {e}");
    }

    /// The generated code: three roles' worth of warps, the producer's registers lowered and
    /// the consumers' raised, the consumers' barrier a named one of their 256 threads, and the
    /// launch refusing a compiled kernel with fewer registers than the roles re-size from.
    #[test]
    fn generated_cuda_specializes_the_warps() {
        for cfg in gemm_ws_f16::SPACE {
            let p = gemm_ws_f16::program(cfg).expect("embedded program");
            let k = tilus::core::codegen::emit(&p, &Default::default()).unwrap();
            for needed in [
                "__launch_bounds__(384, 1)",
                "// role 0: warps 0 to 3",
                "if (tid >= 0 && tid < 128) {",
                "// role 1: warps 4 to 11",
                "if (tid >= 128 && tid < 384) {",
                "setmaxnreg.dec.sync.aligned.u32 40;",
                "setmaxnreg.inc.sync.aligned.u32 232;",
                "const int tid = tilus_role_tid;",
                "bar.sync 2, 256;",
            ] {
                assert!(k.source.contains(needed), "{cfg}: no `{needed}`");
            }
            // A role's layouts place its threads by the role's own index: their thread parts
            // are computed inside the role (after `tid` is re-based), none at kernel entry.
            let entry = &k.source[..k.source.find("// role 0").unwrap()];
            assert!(
                !entry.contains("const int lay"),
                "{cfg}: layouts at kernel entry"
            );
            let consumers = &k.source[k.source.find("const int tid = tilus_role_tid;").unwrap()..];
            assert!(
                consumers.contains("const int lay"),
                "{cfg}: no layout in a role"
            );
            // 128 x 40 + 256 x 232 registers over 384 threads: the kernel must hold 168.
            assert_eq!(k.launch.min_registers, 168, "{cfg}");
        }
    }
}
