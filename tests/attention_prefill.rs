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
    default_config, prefill_attention_cpu, prefill_configs, PrefillConfig, PrefillShape,
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

#[test]
fn f16_d64_gqa4_ragged() {
    let case = Case {
        lens: vec![1, 17, 40],
        q_heads: 4,
        kv_heads: 1,
        d: 64,
        dtype: DType::F16,
    };
    run(&case, None, 1);
}
