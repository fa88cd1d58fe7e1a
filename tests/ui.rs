//! Compile-time behaviour of `#[kernel]`: every case in `tests/ui/fail` must fail with exactly
//! the reviewed `.stderr`; every case in `tests/ui/pass` must compile. The `.stderr` files depend
//! on the pinned rustc (rust-toolchain.toml).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
