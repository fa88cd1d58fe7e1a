//! Data type names as they appear in kernels, and the host types of kernel parameters.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tilus_core::storage::{host_storage, HOST_TYPES};
use tilus_core::DType;

/// Parse a dtype name (`i6`, `f16`, `f6e3m2`, ...) into a [`DType`], with a message naming
/// the known types when it is not one.
pub fn parse(name: &str) -> Result<DType, String> {
    name.parse::<DType>().map_err(|e| e.to_string())
}

/// Whether `name` is an element type a `Global<T>` / `GlobalMut<T>` parameter may have: the
/// canonical name of a type with a host element type (`tilus_core::storage::HOST_TYPES`, the
/// types the runtime's `HostElement` is implemented for). Sub-byte types travel as `u8`
/// storage and are reinterpreted in the kernel.
pub fn is_param_element(name: &str) -> bool {
    parse(name).is_ok_and(|d| HOST_TYPES.contains(&d) && d.to_string() == name)
}

/// The names of the parameter element types, for messages: `f16, bf16, ...`.
pub fn param_element_names() -> String {
    HOST_TYPES.map(|d| d.to_string()).join(", ")
}

/// The host element type (`half::f16`, `f32`, ...) of a parameter element type: the Rust
/// types have the dtype names; `f16` and `bf16` are the facade's re-exports of `half`'s.
pub fn host_type(name: &str) -> TokenStream {
    let storage = parse(name).map_or(DType::UInt(8), host_storage);
    let t = format_ident!("{}", storage.to_string());
    match storage {
        DType::F16 | DType::BF16 => quote!(::tilus::prelude::#t),
        _ => quote!(#t),
    }
}

/// A Rust expression that builds `dtype` in a const context.
pub fn dtype_tokens(dtype: DType) -> TokenStream {
    match dtype {
        DType::UInt(b) => quote!(::tilus::DType::UInt(#b)),
        DType::Int(b) => quote!(::tilus::DType::Int(#b)),
        DType::Float { exp, man } => quote!(::tilus::DType::Float { exp: #exp, man: #man }),
        DType::F8E4M3 => quote!(::tilus::DType::F8E4M3),
        DType::F8E5M2 => quote!(::tilus::DType::F8E5M2),
        DType::F16 => quote!(::tilus::DType::F16),
        DType::BF16 => quote!(::tilus::DType::BF16),
        DType::F32 => quote!(::tilus::DType::F32),
    }
}
