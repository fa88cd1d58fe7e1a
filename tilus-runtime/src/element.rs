//! The element types of buffers and kernel parameters: [`Scalar`] (the C type), [`Element`]
//! (a Rust type that can live in device memory or be passed by value) and [`HostElement`] (an
//! `Element` that is a VM data type). This is the one place that says which Rust type is which
//! VM type and how it is encoded; `tilus_core::storage::HOST_TYPES` lists the same types for
//! the crates that cannot see this one (the `#[kernel]` macro).

use std::fmt;
use tilus_core::storage::host_storage;
use tilus_core::DType;

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

/// An [`Element`] that is a VM data type: what a host slice passed to a kernel, or an
/// activation of the library kernels, is made of. Implemented for exactly the types of
/// `tilus_core::storage::HOST_TYPES` (`f16`, `bf16`, `f32`, `i8`, `u8`, `i32`, `u32`).
pub trait HostElement: Element {
    /// The VM type of one element.
    const DTYPE: DType;
    /// Little-endian bytes of `data`, as the kernel sees them.
    fn to_bytes(data: &[Self]) -> Vec<u8>;
    /// Overwrite `out` from little-endian bytes (`bytes.len() == out.len() * size`).
    fn copy_from_bytes(bytes: &[u8], out: &mut [Self]);
    /// The value as an f32 (rounded for 32-bit integers).
    fn to_f32(self) -> f32;
    /// The nearest value to `v` (integers truncate toward zero and saturate; NaN is 0).
    fn from_f32(v: f32) -> Self;
}

macro_rules! host_element {
    ($($t:ty => $d:expr, |$a:ident| $to:expr, |$b:ident| $from:expr;)*) => {
        $(
            impl HostElement for $t {
                const DTYPE: DType = $d;
                fn to_bytes(data: &[Self]) -> Vec<u8> {
                    data.iter().flat_map(|x| x.to_le_bytes()).collect()
                }
                fn copy_from_bytes(bytes: &[u8], out: &mut [Self]) {
                    const N: usize = std::mem::size_of::<$t>();
                    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(N)) {
                        let mut a = [0u8; N];
                        a.copy_from_slice(c);
                        *o = <$t>::from_le_bytes(a);
                    }
                }
                fn to_f32(self) -> f32 {
                    let $a = self;
                    $to
                }
                fn from_f32(v: f32) -> Self {
                    let $b = v;
                    $from
                }
            }
        )*
        /// Each host element's VM type and C type, in the order of `HOST_TYPES`.
        const HOST_SCALARS: &[(DType, Scalar)] =
            &[$((<$t as HostElement>::DTYPE, <$t as Element>::SCALAR)),*];
    };
}

host_element! {
    half::f16 => DType::F16, |v| v.to_f32(), |v| half::f16::from_f32(v);
    half::bf16 => DType::BF16, |v| v.to_f32(), |v| half::bf16::from_f32(v);
    f32 => DType::F32, |v| v, |v| v;
    i8 => DType::Int(8), |v| v as f32, |v| v as i8;
    u8 => DType::UInt(8), |v| v as f32, |v| v as u8;
    i32 => DType::Int(32), |v| v as f32, |v| v as i32;
    u32 => DType::UInt(32), |v| v as f32, |v| v as u32;
}

/// The C type a kernel pointer to `dtype` is declared with: that of its host element type, or
/// `u8` for types that travel as packed bytes (see `tilus_core::storage::host_storage`).
pub fn host_scalar(dtype: DType) -> Scalar {
    let storage = host_storage(dtype);
    HOST_SCALARS
        .iter()
        .find(|(d, _)| *d == storage)
        .map_or(Scalar::U8, |&(_, s)| s)
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
    fn host_elements_are_the_core_host_types() {
        let dtypes: Vec<DType> = HOST_SCALARS.iter().map(|&(d, _)| d).collect();
        assert_eq!(dtypes, tilus_core::storage::HOST_TYPES);
        for &(d, s) in HOST_SCALARS {
            // The macro's host type names are the dtype names.
            assert_eq!(d.to_string(), s.name());
            assert_eq!(host_scalar(d), s);
        }
        assert_eq!(host_scalar(DType::Int(4)), Scalar::U8);
        assert_eq!(host_scalar(DType::F8E4M3), Scalar::U8);
    }

    #[test]
    fn bytes_round_trip_little_endian() {
        let v = [half::f16::from_f32(1.0), half::f16::from_f32(-2.5)];
        let bytes = HostElement::to_bytes(&v);
        assert_eq!(bytes[..2], [0x00, 0x3c]);
        let mut back = [half::f16::ZERO; 2];
        HostElement::copy_from_bytes(&bytes, &mut back);
        assert_eq!(back, v);
        assert_eq!(HostElement::to_bytes(&[-2i32]), [0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(<i8 as HostElement>::from_f32(300.0), 127);
        assert_eq!(<half::bf16 as HostElement>::from_f32(0.5).to_f32(), 0.5);
    }
}
