//! The quantized matmul family: `C[m, n] = A[m, k] · dequant(W)[k, n]` for weights of any type
//! of 1 to 8 bits, f16 or bf16 activations, group-wise or per-channel scales and optional zero
//! points (paper sections 6.2 and 8).
//!
//! - [`QMatmulConfig`] picks the tiles; [`QMatmulConfig::tiling`] validates them.
//! - [`build`] makes the verified VM programs ([`QMatmulKernel`]): the main pipeline, which
//!   with `split_k > 1` also sums the f32 partial sums (the last block of each output tile
//!   does, in the same launch, through the split-k workspace and semaphores).
//! - [`relayout`] / [`relayout_inverse`] are the offline weight transform (Figure 8), and
//!   [`build_relayout_program`] the same transform as a VM program.
//! - [`prepare`] turns a [`crate::quant::QuantizedWeight`] into kernel operands, and
//!   [`QMatmulKernel::run_cpu`] runs the programs on the interpreter.
//!
//! ```no_run
//! use tilus::kernels::qmatmul::{build, prepare, QMatmulConfig};
//! use tilus::quant::{Group, QuantizedWeight};
//! use tilus::DType;
//! let (m, n, k) = (4, 256, 512);
//! let w: Vec<f32> = (0..k * n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
//! let q = QuantizedWeight::quantize(&w, k, n, DType::Int(4), Group::Rows(128), DType::F16, false)?;
//! let cfg = QMatmulConfig::for_shape(DType::Int(4), DType::F16, Some(128), false, n, k)?;
//! let kernel = build(&cfg)?;
//! let weight = prepare(&q, &cfg)?;
//! let a = [0x00, 0x3C].repeat(m * k); // f16 1.0 (0x3C00), little-endian
//! let mut c = vec![0u8; m * n * 2];
//! kernel.run_cpu(m, &a, &weight, &mut c)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`tune`] picks the configuration per shape bucket on the GPU and persists the winner
//! (`docs/autotune.md`).
//!
//! See `docs/qmatmul.md` for the template, the layouts per bit width and the expected codegen.

pub mod bench;
mod config;
mod cpu;
mod dequant;
mod gpu;
mod imma;
mod kernel;
mod layouts;
mod lut;
mod program;
mod relayout;
pub mod tune;

pub(crate) use config::size_product;
pub use config::{
    is_weight_type, kernel_codes, weight_types, QMatmulConfig, QMatmulError, QMatmulMethod, Tiling,
    WEIGHT_TYPE_NAMES,
};
pub use cpu::{decode_half, encode_half, prepare, HostSplitScratch, OperandBytes, PreparedWeight};
pub use gpu::{DeviceWeight, GpuQMatmul};
pub use imma::{gemv_imma_bk, MAX_SLICE as GEMV_IMMA_MAX_SLICE};
pub use kernel::qmatmul_main;
pub use layouts::{pack_split, QMatmulLayouts};
pub use lut::{relayout_lut, relayout_lut_inverse};
pub use program::{a_swizzle, build, config_name, runs_on, target, QMatmulKernel, TARGET};
pub(crate) use relayout::relayout_kernel_codes;
pub use relayout::{build_relayout_program, relayout, relayout_inverse};
