//! The dense GEMM on the warpgroup MMA (`tilus::kernels::gemm`) without a GPU: every
//! configuration through the interpreter against an f64 reference at ragged shapes; the
//! generated CUDA issues wgmma and fences shared writes for the async proxy; the verifier's
//! wgmma rules name the operand. NVRTC/ptxas/SASS checks are in `tests/codegen_cuda.rs`, the GPU
//! runs in `tests/gpu_gemm.rs`.

use half::{bf16, f16};
use rand::Rng;
use tilus::kernels::gemm::{gemm_bf16, gemm_f16};

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
        let a: Vec<f16> = (0..64 * 64).map(|i| f16::from_f32((i % 7) as f32 - 3.0)).collect();
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
            (1, "while a dot_async into it is in flight; missing dot_wait?"),
            (2, "while a dot_async reading it is in flight; missing dot_wait?"),
            (3, "still in flight at the end of the kernel; missing dot_wait(0)?"),
        ] {
            let e = misuse::interpret(&misuse::Config { MODE: mode }, &a, &mut c).unwrap_err();
            assert!(e.to_string().contains(needle), "mode {mode}: {e}");
        }
    }
}
