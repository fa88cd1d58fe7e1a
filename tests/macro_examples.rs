//! The paper-figure examples (written with `#[kernel]`) on the interpreter, at several
//! configurations of their spaces, on fresh random data against f64 references.

#[allow(dead_code)]
#[path = "../examples/fig14.rs"]
mod fig14;
#[allow(dead_code)]
#[path = "../examples/fig2.rs"]
mod fig2;
#[allow(dead_code)]
#[path = "../examples/fig8.rs"]
mod fig8;

use tilus::DType;

#[test]
fn fig2_matmul_f16_low_bit_weights() {
    use fig2::matmul_f16_w::{Config, SPACE};
    assert_eq!(SPACE.len(), 3 * 2 * 3 * 4);
    let configs = [
        Config {
            BM: 16,
            BN: 64,
            BK: 16,
            W: DType::Int(6),
        },
        Config {
            BM: 32,
            BN: 128,
            BK: 32,
            W: DType::Int(6),
        },
        Config {
            BM: 64,
            BN: 64,
            BK: 64,
            W: DType::Int(4),
        },
        Config {
            BM: 16,
            BN: 128,
            BK: 32,
            W: DType::UInt(4),
        },
        Config {
            BM: 32,
            BN: 64,
            BK: 16,
            W: DType::Int(8),
        },
    ];
    for cfg in &configs {
        assert!(cfg.index().is_some(), "{cfg} is in the space");
        // m not a multiple of BM: the last block row is masked.
        let err = fig2::check(cfg, 40, 128, 128);
        assert!(err < 1e-2, "{cfg}: relative error {err}");
    }
}

#[test]
fn fig8_relayout_is_exact() {
    use fig8::relayout::Config;
    let configs = [
        Config {
            BK: 16,
            BN: 64,
            W: DType::Int(6),
        },
        Config {
            BK: 32,
            BN: 128,
            W: DType::Int(4),
        },
        Config {
            BK: 64,
            BN: 64,
            W: DType::UInt(4),
        },
        Config {
            BK: 16,
            BN: 128,
            W: DType::Int(8),
        },
    ];
    for cfg in &configs {
        assert_eq!(fig8::check(cfg, 128, 256), 0, "{cfg}: bytes differ");
    }
}

#[test]
fn fig8_output_feeds_fig2() {
    // End to end with both macro kernels: re-lay out with Figure 8, multiply with Figure 2.
    use rand::Rng;
    use tilus::prelude::f16;
    let (m, n, k) = (32, 128, 64);
    let mut rng = rand::rng();
    for w in [DType::Int(6), DType::UInt(4)] {
        let rcfg = fig8::relayout::Config {
            BK: 32,
            BN: 64,
            W: w,
        };
        let mcfg = fig2::matmul_f16_w::Config {
            BM: 16,
            BN: 64,
            BK: 32,
            W: w,
        };
        let codes: Vec<u32> = (0..k * n)
            .map(|_| rng.random_range(0..1u32 << w.bits()))
            .collect();
        let packed = tilus::core::storage::pack(w, &codes);
        let tiled = fig8::run_relayout(&rcfg, k, n, &packed);
        let a = fig2::random_f16(&mut rng, m * k);
        let mut c = vec![f16::NAN; m * n];
        fig2::matmul_f16_w::interpret(&mcfg, m as i32, n as i32, k as i32, &a, &tiled, &mut c)
            .unwrap();
        let (mut num, mut den) = (0.0, 0.0);
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k)
                    .map(|p| a[i * k + p].to_f64() * w.decode(codes[p * n + j]))
                    .sum();
                num += (c[i * n + j].to_f64() - r).powi(2);
                den += r * r;
            }
        }
        let err = (num / den).sqrt();
        assert!(err < 1e-2, "{w}: relative error {err}");
    }
}

#[test]
fn fig14_pipelined_matmul() {
    use fig14::matmul_pipelined::Config;
    for (bm, bn, bk, stages) in [
        (16, 64, 16, 2),
        (32, 64, 32, 3),
        (64, 128, 16, 4),
        (16, 128, 32, 4),
    ] {
        let cfg = Config {
            BM: bm,
            BN: bn,
            BK: bk,
            STAGES: stages,
        };
        let err = fig14::check(&cfg, 48, 128, 96);
        assert!(err < 1e-2, "{cfg}: relative error {err}");
    }
}

#[test]
fn embedded_programs_match_the_builder_versions() {
    // Same semantics as tilus::programs: compare the interpreted outputs bit for bit is
    // done above; here the programs must at least verify and have the builder's shape.
    use fig14::matmul_pipelined::{program, Config};
    let p = program(&Config {
        BM: 32,
        BN: 64,
        BK: 32,
        STAGES: 3,
    })
    .unwrap();
    let q = tilus::programs::matmul_f16_pipelined(32, 64, 32, 3);
    assert_eq!(p.params.len(), q.params.len());
    assert_eq!(p.num_threads, q.num_threads);
    tilus::core::verify::verify(&p, &Default::default()).unwrap();
}
