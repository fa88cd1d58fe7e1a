//! What the code generator hands the runtime ([`KernelSource`]) and the element types buffers
//! and kernel parameters are made of ([`Scalar`], [`Element`]).

use crate::disk_cache::CacheKey;
use std::fmt;
use std::sync::Arc;

/// The C element type of a buffer or a by-value parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl Scalar {
    /// Size in bytes.
    pub fn size(self) -> usize {
        match self {
            Scalar::U8 | Scalar::I8 => 1,
            Scalar::U16 | Scalar::I16 | Scalar::F16 | Scalar::BF16 => 2,
            Scalar::U32 | Scalar::I32 | Scalar::F32 => 4,
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
        }
    }

    /// Short name: `u8`, `f16`, ...
    pub fn name(self) -> &'static str {
        match self {
            Scalar::U8 => "u8",
            Scalar::I8 => "i8",
            Scalar::U16 => "u16",
            Scalar::I16 => "i16",
            Scalar::U32 => "u32",
            Scalar::I32 => "i32",
            Scalar::U64 => "u64",
            Scalar::I64 => "i64",
            Scalar::F16 => "f16",
            Scalar::BF16 => "bf16",
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can live in a [`crate::DeviceBuffer`] and be passed to a kernel by value.
/// Implemented for the integer and float types of [`Scalar`] (`half::f16`/`bf16` included).
pub trait Element:
    cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
    + Copy
    + Default
    + Send
    + Sync
    + fmt::Debug
    + 'static
    + sealed::Sealed
{
    const SCALAR: Scalar;
    /// The value's bytes, little-endian, zero-extended to 8 bytes (a kernel parameter slot).
    fn to_param_bits(self) -> u64;
}

macro_rules! element {
    ($($t:ty => $s:ident, |$v:ident| $bits:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const SCALAR: Scalar = Scalar::$s;
            fn to_param_bits(self) -> u64 {
                let $v = self;
                $bits
            }
        }
    )*};
}

element! {
    u8 => U8, |v| v as u64;
    i8 => I8, |v| v as u8 as u64;
    u16 => U16, |v| v as u64;
    i16 => I16, |v| v as u16 as u64;
    u32 => U32, |v| v as u64;
    i32 => I32, |v| v as u32 as u64;
    u64 => U64, |v| v;
    i64 => I64, |v| v as u64;
    half::f16 => F16, |v| v.to_bits() as u64;
    half::bf16 => BF16, |v| v.to_bits() as u64;
    f32 => F32, |v| v.to_bits() as u64;
    f64 => F64, |v| v.to_bits();
}

/// How a kernel parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `const T*`: pass a buffer with `.arg(&buf)` (a mutable one is accepted too).
    Ptr(Scalar),
    /// `T*` the kernel writes: pass with `.arg_mut(&mut buf)`.
    PtrMut(Scalar),
    /// `T` by value: pass with `.value(x)`.
    Value(Scalar),
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamType::Ptr(s) => write!(f, "const {s}*"),
            ParamType::PtrMut(s) => write!(f, "{s}*"),
            ParamType::Value(s) => write!(f, "{s}"),
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
    fn param_bits_are_little_endian_zero_extended() {
        assert_eq!((-1i8).to_param_bits(), 0xff);
        assert_eq!((-2i32).to_param_bits(), 0xffff_fffe);
        assert_eq!(1.0f32.to_param_bits(), 0x3f80_0000);
        assert_eq!(half::f16::from_f32(1.0).to_param_bits(), 0x3c00);
        assert_eq!((-1i64).to_param_bits(), u64::MAX);
    }

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(Scalar::F16.size(), std::mem::size_of::<half::f16>());
        assert_eq!(<u64 as Element>::SCALAR.size(), 8);
        assert_eq!(<i8 as Element>::SCALAR, Scalar::I8);
    }

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
    }
}
