//! The bit operators `& | ^ << >>` on run-time integer scalars, through the macro's expansion:
//! accepted on `i32` and `i64` (mixed too), refused on `f32` and `bool` with the operand named.

use proc_macro2::TokenStream;

fn expand(item: &str) -> String {
    let attr: TokenStream = "grid = [1], warps = 1".parse().unwrap();
    let item: TokenStream = item.parse().unwrap();
    tilus_lang::kernel(attr, item).to_string()
}

#[test]
fn integer_scalars_take_bit_operators() {
    let out = expand(
        "pub fn k(n: i32, w: i64, y: GlobalMut<i32>) {
            let [bi] = block_indices();
            let parity = bi & 1;
            let field = (n >> 4) & 15 | (n << 2) ^ 7;
            let wide = (w & 255) | (bi << 8);
            let narrow = 1 << (w & 7);
            let v = parity + field + (wide as i32) + narrow;
            store_global(register::<i32>(layout!(spatial(32)), 0) + v, view_global(y, [32]), [0]);
        }",
    );
    assert!(!out.contains("compile_error"), "{out}");
}

#[test]
fn float_and_bool_scalars_do_not() {
    let out = expand(
        "pub fn k(s: f32, y: GlobalMut<f32>) {
            let v = s & 1;
        }",
    );
    assert!(
        out.contains("`&` applies to integer tensors (write `and(x, y)`) and integer scalars, found an f32 scalar on the left"),
        "{out}"
    );
    let out = expand(
        "pub fn k(n: i32, y: GlobalMut<f32>) {
            let v = (n < 3) << 1;
        }",
    );
    assert!(out.contains("`<<` applies to integer tensors"), "{out}");
}
