//! `#[kernel]`: Tilus VM programs written as Rust functions, checked and compiled to CUDA C at
//! build time. A thin proc-macro shell: the language (attribute, signature, translation,
//! diagnostics, the generated API) lives in `tilus-lang`, which the facade also uses to
//! instantiate `#[kernel(lazy, ..)]` kernels at run time. See `docs/macro.md`.

/// Define a kernel; see `tilus_lang` and `docs/macro.md`.
#[proc_macro_attribute]
pub fn kernel(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    tilus_lang::kernel(attr.into(), item.into()).into()
}

/// Share the `#[helper]` functions of an inline module with every `#[kernel]` in it; see
/// `docs/macro.md`, "Helper functions".
#[proc_macro_attribute]
pub fn helpers(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    tilus_lang::helpers(attr.into(), item.into()).into()
}
