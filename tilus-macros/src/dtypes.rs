//! Data type names as they appear in kernels, and the host types of kernel parameters.

use proc_macro2::TokenStream;
use quote::quote;
use tilus_core::DType;

/// Parse a dtype name (`i6`, `f16`, `f6e3m2`, ...) into a [`DType`], with a message naming
/// the known types when it is not one.
pub fn parse(name: &str) -> Result<DType, String> {
    name.parse::<DType>().map_err(|e| e.to_string())
}

/// Element types a `Global<T>` / `GlobalMut<T>` parameter may have: those with a host type.
/// Sub-byte types travel as `u8` storage and are reinterpreted in the kernel.
pub const PARAM_ELEMENTS: &[&str] = &["f16", "bf16", "f32", "i8", "u8", "i32", "u32"];

/// The host element type (`half::f16`, `f32`, ...) of a parameter element type.
pub fn host_type(name: &str) -> TokenStream {
    match name {
        "f16" => quote!(::tilus::prelude::f16),
        "bf16" => quote!(::tilus::prelude::bf16),
        "f32" => quote!(f32),
        "i8" => quote!(i8),
        "u8" => quote!(u8),
        "i32" => quote!(i32),
        "u32" => quote!(u32),
        _ => quote!(u8),
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
