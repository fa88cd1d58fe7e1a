//! The macro's expansion, driven as a library (what `tilus-macros` does inside the compiler):
//! lazy kernels are checked over their whole space at build time and embed only their text.

use proc_macro2::TokenStream;

fn expand(attr: &str, item: &str) -> String {
    let attr: TokenStream = attr.parse().unwrap();
    let item: TokenStream = item.parse().unwrap();
    tilus_lang::kernel(attr, item).to_string()
}

const COPY: &str = "
    pub fn scaled_copy<const BLOCK: i32, A: DTypeParam>(n: i32, x: Global<A>, y: GlobalMut<A>) {
        let [bi] = block_indices();
        let r = load_global(view_global(x, [n]), layout!(local(BLOCK / 32).spatial(32)), [bi * BLOCK]);
        store_global(r, view_global(y, [n]), [bi * BLOCK]);
    }";

#[test]
fn lazy_embeds_text_not_configurations() {
    let eager = expand(
        "grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32, 64]), dtypes(A = [f16, bf16])",
        COPY,
    );
    let lazy = expand("lazy, grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32, 64]), dtypes(A = [f16, bf16])", COPY);
    assert!(!eager.contains("compile_error"), "{eager}");
    assert!(!lazy.contains("compile_error"), "{lazy}");
    assert!(
        eager.contains("Meta"),
        "eager kernels embed per-configuration data"
    );
    assert!(!lazy.contains("Meta"), "lazy kernels embed none");
    assert!(lazy.contains("LazySource"));
    assert!(lazy.contains("pub fn translate"));
    // The space is still enumerated for `SPACE` (2 x 2 configurations).
    assert_eq!(lazy.matches("BLOCK : 64").count(), 2, "{lazy}");
}

#[test]
fn lazy_space_is_checked_at_build_time() {
    // BLOCK = 16: `local(BLOCK / 32)` has a zero extent in that configuration.
    let out = expand(
        "lazy, grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [16, 64]), dtypes(A = [f16])",
        COPY,
    );
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("extent must be positive"), "{out}");
    assert!(
        out.contains("BLOCK=16"),
        "the message names the configuration: {out}"
    );
}

#[test]
fn global_of_a_dtype_parameter_needs_host_types() {
    let out = expand(
        "grid = [cdiv(n, BLOCK)], warps = 1, space(BLOCK = [32]), dtypes(A = [f16, u4])",
        COPY,
    );
    assert!(out.contains("compile_error"), "{out}");
    assert!(
        out.contains("`A` may be `u4`, which has no host type"),
        "{out}"
    );
}

#[test]
fn a_run_time_if_value_has_no_statements() {
    let out = expand(
        "grid = [cdiv(n, 32)], warps = 1, space(B = [32])",
        "pub fn k<const B: i32>(n: i32, x: Global<f32>, y: GlobalMut<f32>) {
            let [bi] = block_indices();
            let off = if n > 64 { let a = bi * 2; a } else { bi };
            let r = load_global(view_global(x, [n]), layout!(spatial(32)), [off * 32]);
            store_global(r, view_global(y, [n]), [bi * 32]);
        }",
    );
    assert!(out.contains("compile_error"), "{out}");
    assert!(
        out.contains("both branches are evaluated"),
        "the message says why: {out}"
    );
}

/// `fence()` takes nothing and gives nothing: an argument is an error quoting its usage, and a
/// program with fences expands cleanly.
#[test]
fn fence_takes_no_arguments() {
    let body = |stmt: &str| {
        format!(
            "pub fn f(n: i32, y: GlobalMut<f32>) {{
                let [bi] = block_indices();
                {stmt}
                store_global(register::<f32>(layout!(spatial(32)), 1.0), view_global(y, [n]), [bi * 32]);
            }}"
        )
    };
    let attr = "grid = [cdiv(n, 32)], warps = 1";
    let ok = expand(attr, &body("sync(); fence();"));
    assert!(!ok.contains("compile_error"), "{ok}");
    let bad = expand(attr, &body("fence(bi);"));
    assert!(bad.contains("compile_error"), "{bad}");
    assert!(
        bad.contains("`fence` takes 0 arguments: `fence()`; found 1"),
        "{bad}"
    );
}
