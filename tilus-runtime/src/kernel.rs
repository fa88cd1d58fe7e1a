//! What the code generator hands the runtime ([`KernelSource`]) and the kernel parameters it
//! declares ([`Param`]); their element types are in [`crate::element`].

use crate::disk_cache::CacheKey;
use crate::element::{Element, Scalar};
use std::fmt;
use std::sync::Arc;

/// How a kernel parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `const T*`: pass a buffer with `.arg(&buf)` (a mutable one is accepted too).
    Ptr(Scalar),
    /// `T*` the kernel writes: pass with `.arg_mut(&mut buf)`.
    PtrMut(Scalar),
    /// `T` by value: pass with `.value(x)`.
    Value(Scalar),
    /// A `CUtensorMap` by value (a `const __grid_constant__` parameter of 128 bytes): pass
    /// with `.tensor_map(map)`, the map from [`crate::encode_tiled`].
    TensorMap,
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamType::Ptr(s) => write!(f, "const {s}*"),
            ParamType::PtrMut(s) => write!(f, "{s}*"),
            ParamType::Value(s) => write!(f, "{s}"),
            ParamType::TensorMap => write!(f, "CUtensorMap"),
        }
    }
}

/// One kernel parameter: its name (used in error messages) and how it is passed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
}

impl Param {
    /// A read-only pointer to `T`.
    pub fn ptr<T: Element>(name: impl Into<String>) -> Param {
        Param {
            name: name.into(),
            ty: ParamType::Ptr(T::SCALAR),
        }
    }
    /// A pointer to `T` the kernel writes.
    pub fn ptr_mut<T: Element>(name: impl Into<String>) -> Param {
        Param {
            name: name.into(),
            ty: ParamType::PtrMut(T::SCALAR),
        }
    }
    /// A `T` passed by value.
    pub fn value<T: Element>(name: impl Into<String>) -> Param {
        Param {
            name: name.into(),
            ty: ParamType::Value(T::SCALAR),
        }
    }
    /// A tensor map passed by value.
    pub fn tensor_map(name: impl Into<String>) -> Param {
        Param {
            name: name.into(),
            ty: ParamType::TensorMap,
        }
    }
}

/// A kernel as the code generator produces it: CUDA C++ source text, the `extern "C"` entry
/// point, its parameters, and labels for people (kernel name, configuration key).
///
/// Construction hashes the source once; keep a `KernelSource` around (e.g. in a `static
/// OnceLock`) and pass it to [`crate::Context::load`] on every launch: after the first load
/// that is a hash-map lookup.
#[derive(Clone, Debug)]
pub struct KernelSource {
    kernel: Arc<str>,
    config: Arc<str>,
    entry: Arc<str>,
    source: Arc<str>,
    params: Arc<[Param]>,
    key: CacheKey,
}

impl KernelSource {
    /// `kernel`: name for messages (e.g. `matmul_f16_i6`); `config`: configuration key (e.g.
    /// `BM=16,BN=64`, may be empty); `entry`: the `extern "C" __global__` function to launch;
    /// `source`: complete CUDA C++ translation unit; `params`: the entry's parameters in order.
    pub fn new(
        kernel: impl Into<Arc<str>>,
        config: impl Into<Arc<str>>,
        entry: impl Into<Arc<str>>,
        source: impl Into<Arc<str>>,
        params: impl Into<Arc<[Param]>>,
    ) -> KernelSource {
        let (kernel, config, entry, source, params) = (
            kernel.into(),
            config.into(),
            entry.into(),
            source.into(),
            params.into(),
        );
        let signature = format!("{params:?}");
        let key = CacheKey::of(&[source.as_bytes(), entry.as_bytes(), signature.as_bytes()]);
        KernelSource {
            kernel,
            config,
            entry,
            source,
            params,
            key,
        }
    }

    pub fn kernel(&self) -> &str {
        &self.kernel
    }
    pub fn config(&self) -> &str {
        &self.config
    }
    pub fn entry(&self) -> &str {
        &self.entry
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn params(&self) -> &[Param] {
        &self.params
    }
    /// Hash of (source, entry, parameters): the in-memory cache key.
    pub fn content_key(&self) -> CacheKey {
        self.key
    }
    pub(crate) fn label(&self) -> String {
        if self.config.is_empty() {
            format!("`{}`", self.kernel)
        } else {
            format!("`{}` [{}]", self.kernel, self.config)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_source_entry_and_params_only() {
        let p = || vec![Param::ptr::<f32>("x")];
        let a = KernelSource::new("k", "A=1", "e", "src", p());
        let b = KernelSource::new("other label", "A=2", "e", "src", p());
        assert_eq!(a.content_key(), b.content_key());
        let c = KernelSource::new("k", "A=1", "e2", "src", p());
        assert_ne!(a.content_key(), c.content_key());
        let d = KernelSource::new("k", "A=1", "e", "src2", p());
        assert_ne!(a.content_key(), d.content_key());
        let e = KernelSource::new("k", "A=1", "e", "src", vec![Param::ptr_mut::<f32>("x")]);
        assert_ne!(a.content_key(), e.content_key());
        assert_eq!(a.label(), "`k` [A=1]");
    }

    #[test]
    fn param_type_display() {
        assert_eq!(Param::ptr::<half::f16>("a").ty.to_string(), "const f16*");
        assert_eq!(Param::ptr_mut::<u8>("b").ty.to_string(), "u8*");
        assert_eq!(Param::value::<i32>("m").ty.to_string(), "i32");
        assert_eq!(Param::tensor_map("t").ty.to_string(), "CUtensorMap");
    }
}
