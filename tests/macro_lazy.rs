//! `#[kernel(lazy, ..)]`: kernels checked at build time over their declared space and
//! instantiated at run time for any configuration, with `Global<A>` parameters whose element
//! type is a dtype parameter.

mod common;

use common::skip;

use rand::Rng;
use tilus::prelude::{bf16, f16};
use tilus::DType;

/// The pipelined matmul of `examples/fig14.rs`, with the input element type a dtype parameter,
/// stamped twice: eager (`mm_eager`) and lazy (`mm_lazy`), from the same tokens.
macro_rules! pipelined_matmul {
    ($name:ident $(, $lazy:ident)?) => {
        #[tilus::kernel(
            $($lazy,)?
            grid = [cdiv(m, BM), n / BN],
            warps = 4,
            space(BM = [16, 32], BN = [64], BK = [16], STAGES = [2, 3]),
            dtypes(A = [f16, bf16]),
        )]
        pub fn $name<
            const BM: i32,
            const BN: i32,
            const BK: i32,
            const STAGES: i32,
            A: DTypeParam,
        >(
            m: i32,
            n: i32,
            k: i32,
            a: Global<A>,
            b: Global<A>,
            c: GlobalMut<f32>,
        ) {
            let mma_a = layout!(column_local(2, 2).spatial(8, 4).local(1, 2));
            let mma_b = layout!(local(2, 1).column_spatial(4, 8).local(2, 1));
            let mma_c = layout!(local(2, 1).spatial(8, 4).local(1, 2));
            let warps = layout!(spatial(1, 4));

            let [bi, bj] = block_indices();
            let ga = view_global(a, [m, k]);
            let gb = view_global(b, [k, n]);
            let sa = shared::<A>([STAGES, BM, BK]);
            let sb = shared::<A>([STAGES, BK, BN]);
            let mut acc = register::<f32>(layout!(warps.local(BM / 16, BN / 32).mma_c), 0.0);

            for s in 0..STAGES - 1 {
                copy_async(ga, slice_shared(sa, [s, 0, 0], [BM, BK]), [bi * BM, s * BK]);
                copy_async(gb, slice_shared(sb, [s, 0, 0], [BK, BN]), [s * BK, bj * BN]);
                commit_group();
            }
            for kk in 0..k / BK {
                wait_group(STAGES - 2);
                sync();
                let stage = kk % STAGES;
                let ra = load_shared(sa, layout!(local(BM / 16, BK / 16).mma_a), [stage, 0, 0]);
                let rb = load_shared(
                    sb,
                    layout!(warps.local(BK / 16, BN / 32).mma_b),
                    [stage, 0, 0],
                );
                let next = kk + STAGES - 1;
                copy_async(
                    ga,
                    slice_shared(sa, [next % STAGES, 0, 0], [BM, BK]),
                    [bi * BM, next * BK],
                );
                copy_async(
                    gb,
                    slice_shared(sb, [next % STAGES, 0, 0], [BK, BN]),
                    [next * BK, bj * BN],
                );
                commit_group();
                acc = dot(ra, rb, acc);
            }
            store_global(acc, view_global(c, [m, n]), [bi * BM, bj * BN]);
        }
    };
}

pipelined_matmul!(mm_eager);
pipelined_matmul!(mm_lazy, lazy);

/// Random values in [-1, 1) as the bytes of `dtype` (f16 or bf16), and their exact values.
fn random_input(rng: &mut impl Rng, len: usize, dtype: DType) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::with_capacity(len * 2);
    let mut values = Vec::with_capacity(len);
    for _ in 0..len {
        let x: f32 = rng.random_range(-1.0..1.0);
        let (bits, exact) = match dtype {
            DType::F16 => {
                let h = f16::from_f32(x);
                (h.to_bits(), h.to_f64())
            }
            DType::BF16 => {
                let h = bf16::from_f32(x);
                (h.to_bits(), h.to_f64())
            }
            other => panic!("no test input of {other}"),
        };
        bytes.extend_from_slice(&bits.to_le_bytes());
        values.push(exact);
    }
    (bytes, values)
}

/// Run `cfg` of the lazy kernel on the interpreter against an f64 reference.
fn check_lazy(cfg: &mm_lazy::Config, m: usize, n: usize, k: usize) {
    let mut rng = rand::rng();
    let (a, av) = random_input(&mut rng, m * k, cfg.A);
    let (b, bv) = random_input(&mut rng, k * n, cfg.A);
    let mut c = vec![f32::NAN; m * n]; // poisoned: every element must be written
    mm_lazy::interpret(cfg, m as i32, n as i32, k as i32, &a, &b, &mut c).unwrap();
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
            let scale: f64 = (0..k).map(|p| (av[i * k + p] * bv[p * n + j]).abs()).sum();
            let got = c[i * n + j] as f64;
            assert!(
                (got - want).abs() <= 1e-5 * scale + 1e-6,
                "{cfg} at ({i},{j}): {got} vs {want}"
            );
        }
    }
}

#[test]
fn outside_the_space_runs_against_a_reference() {
    // None of these is in SPACE (BM=48, BN=96, BK=32, STAGES=4 are not declared).
    let configs = [
        mm_lazy::Config {
            BM: 48,
            BN: 96,
            BK: 32,
            STAGES: 4,
            A: DType::F16,
        },
        mm_lazy::Config {
            BM: 16,
            BN: 128,
            BK: 16,
            STAGES: 4,
            A: DType::BF16,
        },
    ];
    for cfg in &configs {
        assert_eq!(cfg.index(), None, "{cfg} must be outside the space");
        // m not a multiple of BM: the last block's rows are masked.
        check_lazy(
            cfg,
            2 * cfg.BM as usize + 8,
            2 * cfg.BN as usize,
            3 * cfg.BK as usize,
        );
    }
    // And a point of the space, both dtypes.
    for cfg in mm_lazy::SPACE
        .iter()
        .filter(|c| c.BM == 32 && c.STAGES == 3)
    {
        check_lazy(cfg, 40, 128, 64);
    }
}

#[test]
fn same_program_as_the_eager_kernel() {
    assert_eq!(mm_lazy::SPACE.len(), mm_eager::SPACE.len());
    for (lazy, eager) in mm_lazy::SPACE.iter().zip(mm_eager::SPACE) {
        assert_eq!(lazy.to_string(), eager.to_string());
        let l = mm_lazy::program(lazy).unwrap();
        let e = mm_eager::program(eager).expect("embedded");
        // The same translator on the same tokens: only the kernel's name differs.
        let l = l.to_string().replace("mm_lazy", "mm_eager");
        assert_eq!(l, e.to_string(), "{lazy}");
        // `translate` is the same program before verification.
        let t = mm_lazy::translate(lazy).unwrap().to_string();
        assert_eq!(t.replace("mm_lazy", "mm_eager"), e.to_string());
        // And the same CUDA.
        let src = mm_lazy::source(lazy)
            .unwrap()
            .replace("mm_lazy", "mm_eager");
        assert_eq!(src, mm_eager::source(eager).unwrap(), "{lazy}");
    }
}

#[test]
fn bad_configuration_is_an_error_naming_it() {
    // BM = 8: `local(BM / 16, ..)` has a zero extent.
    let cfg = mm_lazy::Config {
        BM: 8,
        BN: 64,
        BK: 16,
        STAGES: 2,
        A: DType::F16,
    };
    let e = mm_lazy::program(&cfg).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, tilus::macro_support::KernelError::Instantiate { .. }),
        "{msg}"
    );
    eprintln!("{msg}");
    assert!(msg.contains("BM=8,BN=64,BK=16,STAGES=2,A=f16"), "{msg}");
    assert!(msg.contains("mm_lazy"), "{msg}");
    // Located in this file.
    assert!(msg.contains("tests/macro_lazy.rs:"), "{msg}");
    assert!(mm_lazy::kernel(&cfg).is_err());
    let mut c = vec![0.0f32; 8 * 64];
    let e = mm_lazy::interpret(&cfg, 8, 64, 16, &[0; 256], &[0; 2048], &mut c).unwrap_err();
    assert_eq!(e.to_string(), msg);

    // A data type the tensor cores cannot multiply.
    let cfg = mm_lazy::Config {
        A: DType::F32,
        ..mm_lazy::SPACE[0]
    };
    let msg = mm_lazy::program(&cfg).unwrap_err().to_string();
    assert!(msg.contains("A=f32"), "{msg}");

    // A sub-byte type has no host type for `Global<A>`: the signature rule, at run time.
    let cfg = mm_lazy::Config {
        A: DType::UInt(4),
        ..mm_lazy::SPACE[0]
    };
    let msg = mm_lazy::program(&cfg).unwrap_err().to_string();
    assert!(msg.contains("has no host type"), "{msg}");
}

#[test]
fn programs_are_cached() {
    let cfg = mm_lazy::Config {
        BM: 64,
        BN: 64,
        BK: 32,
        STAGES: 2,
        A: DType::BF16,
    };
    let first = mm_lazy::instance(&cfg).unwrap();
    let again = mm_lazy::instance(&cfg).unwrap();
    assert!(std::ptr::eq(first, again));
    assert_eq!(mm_lazy::program(&cfg).unwrap(), *first.program());
    // The source is generated once, too.
    let s1 = mm_lazy::source(&cfg).unwrap();
    let s2 = mm_lazy::source(&cfg).unwrap();
    assert!(std::ptr::eq(s1, s2));
}

#[test]
fn buffer_lengths_are_checked_in_elements_of_the_dtype() {
    let cfg = mm_lazy::Config {
        BM: 16,
        BN: 64,
        BK: 16,
        STAGES: 2,
        A: DType::BF16,
    };
    let (m, n, k) = (16usize, 64usize, 32usize);
    // `a` one bf16 short of m * k elements.
    let a = vec![0u8; (m * k - 1) * 2];
    let b = vec![0u8; k * n * 2];
    let mut c = vec![0.0f32; m * n];
    let msg = mm_lazy::interpret(&cfg, m as i32, n as i32, k as i32, &a, &b, &mut c)
        .unwrap_err()
        .to_string();
    eprintln!("{msg}");
    assert!(msg.contains("`a`") && msg.contains("bf16[16, 32]"), "{msg}");
}

/// First instantiation cost of the pipelined matmul (translate + verify; then CUDA generation).
#[test]
fn first_instantiation_cost() {
    let cfg = mm_lazy::Config {
        BM: 64,
        BN: 128,
        BK: 32,
        STAGES: 3,
        A: DType::F16,
    };
    let t = std::time::Instant::now();
    mm_lazy::instance(&cfg).unwrap();
    let verified = t.elapsed();
    mm_lazy::source(&cfg).unwrap();
    let generated = t.elapsed();
    let t2 = std::time::Instant::now();
    mm_lazy::program(&cfg).unwrap();
    let cached = t2.elapsed();
    eprintln!(
        "first instantiation of mm_lazy ({cfg}): translate+verify {:.2} ms, +codegen {:.2} ms; \
         cached program() {:.3} ms",
        verified.as_secs_f64() * 1e3,
        (generated - verified).as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3
    );
}

/// A run-time instantiated configuration compiles with NVRTC (skips without NVRTC).
#[test]
fn nvrtc_compiles_a_runtime_instance() {
    if let Err(e) = tilus::runtime::nvrtc::nvrtc() {
        skip::skip(
            "nvrtc_compiles_a_runtime_instance",
            skip::Need::Nvrtc,
            &e.to_string(),
        );
        return;
    }
    let cfg = mm_lazy::Config {
        BM: 48,
        BN: 96,
        BK: 32,
        STAGES: 4,
        A: DType::BF16,
    };
    let info = mm_lazy::kernel(&cfg).unwrap();
    assert_eq!(info.block_threads, 128);
    let ptx = tilus::runtime::compile_ptx(info.source, "sm_90a")
        .unwrap_or_else(|e| panic!("{e}\n{}", info.source));
    assert!(
        ptx.contains(&info.entry),
        "entry {} not in the PTX",
        info.entry
    );
    assert!(
        ptx.contains("cp.async"),
        "the pipeline's copies are cp.async"
    );
}

/// The eager kernel takes `Global<A>` as bytes too, and computes what the lazy one does.
#[test]
fn eager_and_lazy_interpret_alike() {
    let mut rng = rand::rng();
    for (lazy, eager) in mm_lazy::SPACE.iter().zip(mm_eager::SPACE).step_by(3) {
        let (m, n, k) = (40usize, 64usize, 48usize);
        let (a, _) = random_input(&mut rng, m * k, lazy.A);
        let (b, _) = random_input(&mut rng, k * n, lazy.A);
        let mut c1 = vec![f32::NAN; m * n];
        let mut c2 = vec![f32::NAN; m * n];
        mm_lazy::interpret(lazy, m as i32, n as i32, k as i32, &a, &b, &mut c1).unwrap();
        mm_eager::interpret(eager, m as i32, n as i32, k as i32, &a, &b, &mut c2).unwrap();
        assert!(c1.iter().all(|x| x.is_finite()), "{lazy}");
        let same = c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{lazy}");
    }
}

/// A configuration outside the space, launched on a GPU through the generated `launch` (byte
/// buffers for `Global<A>`), against the interpreter on the same random inputs; the output is
/// poisoned first. Skips without a GPU (`TILUS_REQUIRE_GPU=1` to fail instead).
#[test]
fn runtime_instance_on_gpu() {
    use tilus::runtime::{Context, DeviceBuffer};
    let Some(ctx) = common::gpu_context("runtime_instance_on_gpu", Context::builder(0)) else {
        return;
    };
    let mut rng = rand::rng();
    for a_type in [DType::F16, DType::BF16] {
        let cfg = mm_lazy::Config {
            BM: 48,
            BN: 96,
            BK: 32,
            STAGES: 4,
            A: a_type,
        };
        let (m, n, k) = (100usize, 192usize, 128usize);
        let (a, _) = random_input(&mut rng, m * k, cfg.A);
        let (b, _) = random_input(&mut rng, k * n, cfg.A);
        let mut want = vec![f32::NAN; m * n];
        mm_lazy::interpret(&cfg, m as i32, n as i32, k as i32, &a, &b, &mut want).unwrap();
        let da = DeviceBuffer::from_host(&ctx, &a).unwrap();
        let db = DeviceBuffer::from_host(&ctx, &b).unwrap();
        let mut dc = DeviceBuffer::filled(&ctx, m * n, f32::NAN).unwrap();
        mm_lazy::launch(&ctx, &cfg, m as i32, n as i32, k as i32, &da, &db, &mut dc).unwrap();
        let got = dc.to_host().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Both accumulate in f32; the mma's order of additions may differ from the
            // interpreter's.
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{cfg} at {i}: {g} vs {w}"
            );
        }
    }
}
