//! The runtime's one error type.
//!
//! Every failure the runtime can meet on an ordinary machine (no driver, no GPU, no NVRTC, a
//! compile error, a bad launch argument) is a [`RuntimeError`], never a panic. Messages say what
//! to do next where there is something to do.

use std::fmt;

/// Result alias used across the runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A CUDA shared library (`libcuda`, `libnvrtc`) could not be opened.
    #[error("{library} not found: {hint}")]
    LibraryMissing {
        /// File name that was looked for, e.g. `libcuda.so`.
        library: &'static str,
        /// What it means and what to do.
        hint: String,
    },

    /// The driver is present but too old for the CUDA version the runtime is built against.
    #[error(
        "the NVIDIA driver supports CUDA {found_major}.{found_minor}, but tilus needs CUDA 13.0 \
         or newer (driver R580+): update the driver"
    )]
    DriverTooOld { found_major: i32, found_minor: i32 },

    /// A CUDA driver call failed.
    #[error("CUDA driver error while {during}: {source}")]
    Driver {
        /// What the runtime was doing, e.g. `opening device 0`.
        during: String,
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// The requested device ordinal does not exist.
    #[error("no CUDA device {ordinal}: {count} device(s) visible{hint}")]
    NoDevice {
        ordinal: usize,
        count: usize,
        /// Extra context, e.g. about `CUDA_VISIBLE_DEVICES`.
        hint: String,
    },

    /// An NVRTC call other than compilation itself failed (e.g. out of memory).
    #[error("NVRTC error while {during}: {message}")]
    Nvrtc { during: String, message: String },

    /// NVRTC rejected a kernel's source. Boxed: the report carries the log and a source excerpt.
    #[error("{0}")]
    Compile(Box<CompileFailure>),

    /// The kernel source, entry name or options cannot be handed to NVRTC/the driver as given.
    #[error("invalid kernel `{kernel}`: {reason}")]
    InvalidKernel { kernel: String, reason: String },

    /// A launch argument or launch dimension failed validation. `arg` names it.
    #[error("argument `{arg}`: {reason}")]
    InvalidArgument { arg: String, reason: String },

    /// Autotuning found no usable configuration (every candidate failed) or was given none.
    #[error("autotuning `{kernel}` for [{bucket}]: {message}")]
    Tune {
        kernel: String,
        bucket: String,
        message: String,
    },

    /// A call into a CUDA library other than the driver and NVRTC (cuBLAS) failed.
    #[error("{library} error: {message}")]
    Library {
        library: &'static str,
        message: String,
    },

    /// A CUDA graph could not be captured (see [`crate::Context::capture`]).
    #[error("graph capture: {reason}")]
    Capture { reason: String },
}

impl RuntimeError {
    /// The argument an [`RuntimeError::InvalidArgument`] names, if this is one.
    pub fn arg(&self) -> Option<&str> {
        match self {
            RuntimeError::InvalidArgument { arg, .. } => Some(arg),
            _ => None,
        }
    }

    /// True for errors that mean "this machine cannot run GPU code" (no driver library, no
    /// device, driver too old), as opposed to a bug or a bad argument. Tests use it to skip.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            RuntimeError::LibraryMissing { .. }
                | RuntimeError::NoDevice { .. }
                | RuntimeError::DriverTooOld { .. }
        ) || matches!(self, RuntimeError::Driver { source, .. } if no_usable_gpu(source.0))
    }

    pub(crate) fn invalid_arg(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        RuntimeError::InvalidArgument {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn driver(during: impl Into<String>, source: cudarc::driver::DriverError) -> Self {
        RuntimeError::Driver {
            during: during.into(),
            source,
        }
    }
}

/// Driver results that mean "no usable GPU here" rather than a bug: no device, the toolkit's
/// stub `libcuda` instead of a driver, a driver/kernel-module mismatch, a device that is busy
/// or unsupported.
fn no_usable_gpu(result: cudarc::driver::sys::CUresult) -> bool {
    use cudarc::driver::sys::CUresult as R;
    matches!(
        result,
        R::CUDA_ERROR_NO_DEVICE
            | R::CUDA_ERROR_STUB_LIBRARY
            | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
            | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
            | R::CUDA_ERROR_DEVICE_UNAVAILABLE
    )
}

/// A failed NVRTC compilation: which kernel and configuration, for which target, NVRTC's log,
/// and the numbered source lines around the first error the log reports.
#[derive(Debug, Clone)]
pub struct CompileFailure {
    /// Kernel name (for people; not the entry symbol).
    pub kernel: String,
    /// Configuration key, e.g. `BM=16,BN=64` (may be empty).
    pub config: String,
    /// Target, e.g. `sm_90a` or `compute_80`.
    pub arch: String,
    /// NVRTC's program log, verbatim.
    pub log: String,
    /// First source line (1-based) the log reports an error on, if any.
    pub line: Option<usize>,
    /// Numbered source lines around `line` (empty when `line` is `None`).
    pub excerpt: String,
}

impl fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NVRTC failed to compile kernel `{}`", self.kernel)?;
        if !self.config.is_empty() {
            write!(f, " (configuration {})", self.config)?;
        }
        writeln!(f, " for {}:", self.arch)?;
        writeln!(f, "{}", self.log.trim_end())?;
        if let Some(line) = self.line {
            writeln!(f, "source around line {line}:")?;
            write!(f, "{}", self.excerpt)?;
        }
        Ok(())
    }
}
