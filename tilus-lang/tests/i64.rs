//! `i64` scalars in the kernel language, through the macro's expansion: what is accepted, and
//! the errors for the places that stay `i32` (view extents, loop bounds, tensor operands,
//! shared-memory offsets), each naming the argument.

use proc_macro2::TokenStream;

fn expand(item: &str) -> String {
    let attr: TokenStream = "grid = [1], warps = 1".parse().unwrap();
    let item: TokenStream = item.parse().unwrap();
    tilus_lang::kernel(attr, item).to_string()
}

#[test]
fn i64_parameters_literals_and_conversions_translate() {
    let out = expand(
        "pub fn k(n: i32, off: i64, x: Global<f32>, y: GlobalMut<f32>) {
            let big = 3000000000;
            let w = 5i64 * n + off;
            let back = (w - big) as i32;
            let f = off as f32;
            let m = if w < big { w } else { n };
            let t = load_global(view_global(x, [n, 64]), layout!(spatial(1, 32)), [m / 64, m % 64]);
            store_global(t * f, view_global(y, [n, 64]), [back, 0]);
        }",
    );
    assert!(!out.contains("compile_error"), "{out}");
    // The host API takes an i64.
    assert!(out.contains("off : i64"), "{out}");
}

#[test]
fn view_extents_are_i32() {
    let out = expand(
        "pub fn k(m: i64, x: Global<f32>) {
            let g = view_global(x, [4, m]);
        }",
    );
    assert!(
        out.contains("view extents are i32; extent 1 of `view_global` (`m`) is an i64 scalar"),
        "{out}"
    );
}

#[test]
fn loop_bounds_are_i32() {
    let out = expand(
        "pub fn k(m: i64, x: Global<f32>) {
            for i in 0..m { }
        }",
    );
    assert!(out.contains("loop bounds are i32"), "{out}");
}

#[test]
fn tensor_operands_and_shared_offsets_are_i32() {
    let out = expand(
        "pub fn k(m: i64, x: Global<f32>, y: GlobalMut<f32>) {
            let t = load_global(view_global(x, [32]), layout!(spatial(32)), [0]);
            store_global(t + m, view_global(y, [32]), [0]);
        }",
    );
    assert!(
        out.contains("expected a tensor, an i32 or f32 scalar or a constant, found an i64 scalar"),
        "{out}"
    );
    let out = expand(
        "pub fn k(m: i64, y: GlobalMut<f32>) {
            let s = shared::<f32>([64]);
            let t = load_shared(s, layout!(spatial(32)), [m]);
            store_global(t, view_global(y, [32]), [0]);
        }",
    );
    assert!(
        out.contains("an offset of load_shared must be i32, found i64"),
        "{out}"
    );
}

#[test]
fn constant_i64_overflow_and_narrowing_are_build_errors() {
    let out = expand(
        "pub fn k(x: Global<f32>) {
            let a = 9223372036854775807i64 + 1;
        }",
    );
    assert!(out.contains("overflows i64"), "{out}");
    let out = expand(
        "pub fn k(x: Global<f32>) {
            let a = 3000000000 as i32;
        }",
    );
    assert!(out.contains("3000000000 does not fit an i32"), "{out}");
}
