//! `examples/first_kernel.rs`, the example of `docs/first-kernel.md`: it computes the right thing
//! on the interpreter (and on a GPU when there is one), and the guide quotes its code verbatim.

#[allow(dead_code)]
#[path = "../examples/first_kernel.rs"]
mod first_kernel;

mod common;

use first_kernel::{check_on_cpu, check_on_gpu, fma_f16, TOLERANCE};
use tilus::runtime::Context;

#[test]
fn every_configuration_matches_the_f64_reference_on_the_interpreter() {
    assert_eq!(fma_f16::SPACE.len(), 4);
    // m not a multiple of BM (masked rows), and m smaller than one tile.
    for (m, n) in [(100, 256), (5, 128)] {
        for cfg in fma_f16::SPACE {
            if n % cfg.BN as usize != 0 {
                continue;
            }
            let err = check_on_cpu(cfg, m, n).unwrap();
            assert!(err <= TOLERANCE, "{cfg} m={m} n={n}: relative error {err}");
        }
    }
}

#[test]
fn a_wrong_buffer_is_named() {
    let cfg = fma_f16::SPACE[0];
    let x = first_kernel::random_f16(64 * 64);
    let short = first_kernel::random_f16(64 * 64 - 1);
    let mut out = vec![tilus::prelude::f16::ZERO; 64 * 64];
    let err = fma_f16::interpret(&cfg, 64, 64, &x, &short, &x, &mut out).unwrap_err();
    assert!(err.to_string().contains("`y`"), "{err}");
}

#[test]
fn every_configuration_matches_the_f64_reference_on_the_gpu() {
    let Some(ctx) = common::gpu_context(
        "every_configuration_matches_the_f64_reference_on_the_gpu",
        Context::builder(0),
    ) else {
        return;
    };
    for cfg in fma_f16::SPACE {
        let err = check_on_gpu(&ctx, cfg, 100, 256).unwrap();
        assert!(err <= TOLERANCE, "{cfg}: relative error {err}");
    }
}

/// The text between `// ANCHOR: name` and `// ANCHOR_END: name` in `source`.
fn anchored<'a>(source: &'a str, name: &str) -> &'a str {
    let start = format!("// ANCHOR: {name}\n");
    let end = format!("// ANCHOR_END: {name}");
    let from = source.find(&start).expect("anchor start") + start.len();
    let to = from + source[from..].find(&end).expect("anchor end");
    &source[from..to]
}

#[test]
fn the_guide_quotes_the_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::fs::read_to_string(format!("{root}/examples/first_kernel.rs")).unwrap();
    let guide = std::fs::read_to_string(format!("{root}/docs/first-kernel.md")).unwrap();
    for name in ["kernel", "check", "main"] {
        let code = anchored(&example, name);
        assert!(code.lines().count() > 5, "{name}: {code}");
        assert!(
            guide.contains(&format!("```rust\n{code}```")),
            "docs/first-kernel.md must quote the `{name}` part of examples/first_kernel.rs \
             verbatim, in a ```rust block; copy it again:\n{code}"
        );
    }
}
