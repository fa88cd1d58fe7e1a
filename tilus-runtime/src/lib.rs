//! The tilus runtime: turns generated CUDA C++ into launched kernels.
//!
//! The code generator produces, per kernel and tile configuration, a [`KernelSource`] (CUDA
//! source text, `extern "C"` entry point, parameter list, and labels). The runtime
//!
//! 1. opens a device ([`Context::new`]) after checking that the driver library is there
//!    (a machine without one gets an error with a hint, never a panic),
//! 2. compiles the source with NVRTC to a CUBIN for the device (`sm_90a` on Hopper), caching
//!    the result in memory (once per context, also under concurrent first use) and on disk
//!    (content-addressed, verified, atomic writes; see [`disk_cache`]),
//! 3. moves data in typed buffers ([`DeviceBuffer`], [`PackedTensor`] for sub-byte data), and
//! 4. launches with checked arguments and shapes ([`LoadedKernel::args`], [`check_len`],
//!    [`check_align`], [`check_divisible`]); launch errors name the argument.
//!
//!    Kernels that copy with TMA take tensor maps, encoded per launch with
//!    [`encode_tiled`] and passed with [`KernelArgs::tensor_map`].
//!
//! 5. autotunes: [`Tuner`] measures candidate configurations once per (kernel, shape bucket,
//!    GPU, driver) and persists the winner next to the kernel cache ([`autotune`]).
//!
//! Compile-only use needs NVRTC but no GPU: [`compile_ptx`], [`compile_cubin`].
//!
//! Nothing CUDA is needed to build this crate: cudarc loads `libcuda` and `libnvrtc` at run
//! time. How they and the CUDA headers are found is described in [`discover`].
//!
//! Environment:
//!
//! | variable | effect |
//! | --- | --- |
//! | `TILUS_CUDA_INCLUDE` | CUDA header directory (first choice) |
//! | `CUDA_PATH`, `CUDA_HOME` | toolkit roots (`include/`, `lib64/`) |
//! | `TILUS_PYTHON_SITE` | `:`-separated site directories holding `nvidia/...` wheels |
//! | `TILUS_NVRTC_LIB` | the NVRTC library file, if the loader cannot find it |
//! | `TILUS_CACHE_DIR` | disk cache directory (default: user cache dir + `/tilus`) |
//! | `TILUS_CACHE=off` | no disk cache |

pub mod autotune;
pub mod bench;
pub mod blas;
pub mod buffer;
pub mod checks;
pub mod context;
pub mod device;
pub mod discover;
pub mod disk_cache;
pub mod element;
pub mod error;
pub mod graph;
pub mod kernel;
pub mod launch;
mod linking;
pub mod loaded;
pub mod nvrtc;
pub mod tensor_map;
#[cfg(test)]
mod test_util;
pub mod timing;

pub use autotune::{
    Measurement, TuneCandidate, TuneKey, TuneOutcome, TuneRecord, TuneSource, TuneStats, Tuner,
};
pub use bench::{copy_bandwidth, copy_time, time_runs, L2Flush, L2Mode, Timing};
pub use blas::{Cublas, GemmElement};
pub use buffer::{
    check_packed_len, packed_byte_len, DeviceBuffer, DeviceView, DeviceViewMut, PackedTensor,
};
pub use checks::{check_align, check_divisible, check_len, check_min_len};
pub use context::{CacheStats, Context, ContextBuilder};
pub use device::{device_count, driver_version, DeviceInfo};
pub use disk_cache::CacheState;
pub use element::{host_scalar, Element, HostElement, Scalar};
pub use error::{CompileFailure, Result, RuntimeError};
pub use graph::Graph;
pub use kernel::{KernelSource, Param, ParamType};
pub use launch::{
    check_dims, check_signature, DeviceRead, DeviceWrite, KernelArg, KernelArgMut, KernelArgs,
    LaunchDims,
};
pub use loaded::{LaunchLimits, LoadedKernel, Origin};
pub use nvrtc::{compile_cubin, compile_ptx, CompileOptions};
pub use tensor_map::{encode_tiled, TensorMap, TmaSwizzle};

/// Re-exported so callers can name `half::f16` buffers without their own dependency.
pub use cudarc::driver::CudaStream;
pub use half;
