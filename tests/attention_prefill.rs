//! Causal prefill attention (`tilus::kernels::attention::prefill`) on the CPU interpreter
//! against an f64 reference (`common/prefill_ref.rs`: softmax(scale q k^T, causal) v per head
//! with grouped-query KV heads, and the derived bound on the kernel's rounding), on fresh
//! seeded random inputs with the output poisoned (0xFF bytes: NaN in f16 and bf16) before the
//! run; and the host API's argument checks, each error naming its argument.

#[allow(dead_code)]
#[path = "common/prefill_ref.rs"]
mod prefill_ref;

use prefill_ref::{assert_close, Case};
use std::time::Instant;
use tilus::kernels::attention::prefill::{
    default_config, prefill_attention_cpu, prefill_configs, program, PrefillConfig, PrefillShape,
};
use tilus::DType;

fn run(case: &Case, cfg: Option<&PrefillConfig>, seed: u64) {
    let t = Instant::now();
    let x = case.inputs(seed);
    let scale = 1.0 / (case.d as f32).sqrt();
    let shape = PrefillShape {
        cu_seqlens: &x.cu,
        q_heads: case.q_heads,
        kv_heads: case.kv_heads,
        head_dim: case.d,
        dtype: case.dtype,
        scale,
    };
    let mut o = vec![0xFFu8; x.tokens * case.q_heads * case.d * 2];
    prefill_attention_cpu(cfg, &shape, &x.q, &x.k, &x.v, &mut o).unwrap();
    let (want, tol) = case.reference(&x, scale);
    let what = format!(
        "{case:?} {}",
        cfg.map_or("default".to_string(), |c| c.to_string())
    );
    assert_close(&what, case, &o, &want, &tol);
    eprintln!("{what}: {:.2} s", t.elapsed().as_secs_f64());
}

fn case(lens: &[usize], q_heads: usize, kv_heads: usize, d: usize, dtype: DType) -> Case {
    Case {
        lens: lens.to_vec(),
        q_heads,
        kv_heads,
        d,
        dtype,
    }
}

/// The ragged batch of lengths 1, 17, 40 (one block per sequence and head, only diagonal
/// tiles) with the default configurations: both head dimensions, both types, GQA ratios 4
/// and 1.
#[test]
fn f16_d64_gqa4_ragged() {
    run(&case(&[1, 17, 40], 4, 1, 64, DType::F16), None, 1);
}

/// With an empty sequence in the batch (all its blocks exit).
#[test]
fn bf16_d64_gqa1_ragged() {
    run(&case(&[1, 0, 17, 40], 2, 2, 64, DType::BF16), None, 2);
}

#[test]
fn f16_d128_gqa1_ragged() {
    run(&case(&[1, 17, 40], 2, 2, 128, DType::F16), None, 3);
}

#[test]
fn bf16_d128_gqa4_ragged() {
    run(&case(&[40, 1, 17], 4, 1, 128, DType::BF16), None, 4);
}

/// Longer sequences with 64-query blocks: several blocks per sequence, unmasked tiles before
/// the diagonal, more tiles than pipeline stages (the stages wrap), a block whose rows end
/// inside its tile, a sequence starting mid-buffer; 2 and 3 stages.
#[test]
fn multi_block_pipeline_d64() {
    for (i, cfg) in prefill_configs(64, DType::F16)
        .unwrap()
        .into_iter()
        .filter(|c| c.BM == 64)
        .enumerate()
    {
        run(
            &case(&[3, 200], 1, 1, 64, DType::F16),
            Some(&cfg),
            10 + i as u64,
        );
    }
}

#[test]
fn multi_block_pipeline_d128_bf16() {
    let cfg = prefill_configs(128, DType::BF16)
        .unwrap()
        .into_iter()
        .find(|c| c.BM == 64 && c.STAGES == 3)
        .unwrap();
    run(&case(&[150, 9], 2, 1, 128, DType::BF16), Some(&cfg), 20);
}

/// 128-query blocks over a sequence of 300: the second block has two unmasked tiles and two
/// diagonal ones (the first wholly masked for half of the rows).
#[test]
fn bm128_two_blocks_d64() {
    let cfg = default_config(64, DType::F16).unwrap();
    assert_eq!(cfg.BM, 128);
    run(&case(&[300], 1, 1, 64, DType::F16), Some(&cfg), 30);
}

/// Each bad argument is refused before anything runs, with an error naming it.
#[test]
fn bad_arguments_name_the_argument() {
    let cu = [0, 5, 12];
    let good = PrefillShape {
        cu_seqlens: &cu,
        q_heads: 4,
        kv_heads: 2,
        head_dim: 64,
        dtype: DType::F16,
        scale: 0.125,
    };
    let q_bytes = 12 * 4 * 64 * 2;
    let kv_bytes = 12 * 2 * 64 * 2;
    let (q, k, v) = (
        vec![0x3Cu8; q_bytes],
        vec![0x3Cu8; kv_bytes],
        vec![0x3Cu8; kv_bytes],
    );
    let err = |shape: PrefillShape, cfg: Option<&PrefillConfig>, lens: [usize; 4]| -> String {
        let mut o = vec![0u8; lens[3]];
        prefill_attention_cpu(
            cfg,
            &shape,
            &q[..lens[0]],
            &k[..lens[1]],
            &v[..lens[2]],
            &mut o,
        )
        .unwrap_err()
        .to_string()
    };
    let full = [q_bytes, kv_bytes, kv_bytes, q_bytes];
    let expect = |msg: String, words: &[&str]| {
        for w in words {
            assert!(msg.contains(w), "`{w}` missing from: {msg}");
        }
    };
    expect(
        err(
            PrefillShape {
                dtype: DType::F32,
                ..good
            },
            None,
            full,
        ),
        &["dtype = f32", "f16 or bf16"],
    );
    expect(
        err(
            PrefillShape {
                head_dim: 96,
                ..good
            },
            None,
            full,
        ),
        &["head_dim = 96", "64 and 128"],
    );
    expect(
        err(
            PrefillShape {
                q_heads: 6,
                kv_heads: 4,
                ..good
            },
            None,
            full,
        ),
        &["q_heads = 6", "kv_heads = 4"],
    );
    expect(
        err(
            PrefillShape {
                kv_heads: 0,
                ..good
            },
            None,
            full,
        ),
        &["kv_heads = 0"],
    );
    expect(
        err(
            PrefillShape {
                scale: f32::NAN,
                ..good
            },
            None,
            full,
        ),
        &["scale = NaN"],
    );
    expect(
        err(
            PrefillShape {
                cu_seqlens: &[0],
                ..good
            },
            None,
            full,
        ),
        &["cu_seqlens has 1 entries"],
    );
    expect(
        err(
            PrefillShape {
                cu_seqlens: &[0, 7, 5],
                ..good
            },
            None,
            full,
        ),
        &["cu_seqlens is not non-decreasing", "cu_seqlens[2] = 5"],
    );
    expect(
        err(
            PrefillShape {
                cu_seqlens: &[-1, 5],
                ..good
            },
            None,
            full,
        ),
        &["cu_seqlens[0] = -1"],
    );
    expect(
        err(good, None, [q_bytes - 2, kv_bytes, kv_bytes, q_bytes]),
        &["q holds 6142 bytes", "6144"],
    );
    expect(
        err(good, None, [q_bytes, kv_bytes, kv_bytes - 1, q_bytes]),
        &["v holds"],
    );
    expect(
        err(good, None, [q_bytes, kv_bytes, kv_bytes, 100]),
        &["o holds 100 bytes"],
    );
    let cfg128 = default_config(128, DType::F16).unwrap();
    expect(
        err(good, Some(&cfg128), full),
        &["config is for D = 128", "head_dim = 64"],
    );
    let chunk8 = PrefillConfig {
        KC: 8,
        ..default_config(64, DType::F16).unwrap()
    };
    expect(err(good, Some(&chunk8), full), &["config: KC = 8"]);
    // The kernel itself refuses more than 4 chunks when instantiated (for direct callers).
    let chunk16 = PrefillConfig {
        KC: 16,
        ..default_config(128, DType::F16).unwrap()
    };
    let msg = program(&chunk16).unwrap_err().to_string();
    assert!(msg.contains("extent must be positive"), "{msg}");
    let bf = default_config(64, DType::BF16).unwrap();
    expect(
        err(good, Some(&bf), full),
        &["config", "bf16", "dtype = f16"],
    );
    // And the good shape runs: with every input 0x3C3C (1.0586 in f16) all scores are equal,
    // so each output is exactly that value.
    let mut o = vec![0xFFu8; q_bytes];
    prefill_attention_cpu(None, &good, &q, &k, &v, &mut o).unwrap();
    assert!(o.chunks(2).all(|b| b == [0x3C, 0x3C]));
}

/// The sweep's chunk variants (D in chunks of 64, and unchunked at D = 128), instantiated on
/// first use: two blocks of a 70-token sequence plus a short one.
#[test]
fn chunk_variants() {
    for (d, dtype, seed) in [(128, DType::F16, 40), (64, DType::BF16, 41)] {
        for cfg in prefill_configs(d, dtype)
            .unwrap()
            .into_iter()
            .filter(|c| c.KC != 32)
        {
            let bm64 = PrefillConfig { BM: 64, ..cfg };
            run(&case(&[70, 5], 2, 1, d, dtype), Some(&bm64), seed);
        }
    }
}

/// A batch of empty sequences has nothing to compute: accepted, nothing written.
#[test]
fn empty_batch_is_a_no_op() {
    let shape = PrefillShape {
        cu_seqlens: &[0, 0, 0],
        q_heads: 2,
        kv_heads: 1,
        head_dim: 128,
        dtype: DType::BF16,
        scale: 0.1,
    };
    let mut o = vec![0xABu8; 8];
    prefill_attention_cpu(None, &shape, &[], &[], &[], &mut o).unwrap();
    assert!(o.iter().all(|&b| b == 0xAB));
}
