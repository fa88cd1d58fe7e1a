//! A kernel loaded on a device ([`LoadedKernel`]): its function handle, the limits its launches
//! are checked against, and where it came from. [`crate::Context::load`] makes them; launching
//! one is [`crate::launch`]'s business.

use crate::device::DeviceInfo;
use crate::error::{Result, RuntimeError};
use crate::kernel::{KernelSource, Param};
use cudarc::driver::{sys, CudaFunction, CudaStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a loaded kernel came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled by NVRTC in this process; `nvrtc` is the compile time alone.
    Compiled { nvrtc: Duration },
    /// Read from a verified disk cache entry.
    DiskCache,
}

/// What limits a launch of one kernel on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    pub max_grid: [u32; 3],
    pub max_block: [u32; 3],
    /// The kernel's own maximum threads per block (registers and `__launch_bounds__` count).
    pub max_threads: u32,
    /// Static shared memory the kernel declares.
    pub static_smem: u32,
    /// Shared memory per block after opting in.
    pub smem_optin: u32,
}

/// A kernel ready to launch. Obtained from [`crate::Context::load`].
pub struct LoadedKernel {
    /// What was compiled: names, entry point, declared parameters (shared, not copied).
    pub(crate) source: KernelSource,
    pub(crate) function: CudaFunction,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) limits: LaunchLimits,
    pub(crate) registers: u32,
    pub(crate) local_bytes: u32,
    /// Current `MAX_DYNAMIC_SHARED_SIZE_BYTES` of the function.
    pub(crate) dyn_smem_allowed: AtomicU32,
    pub(crate) opt_in: Mutex<()>,
    pub(crate) origin: Origin,
    pub(crate) load_time: Duration,
    /// Whether the device launches programmatic dependents (sm_90 and later), read once at
    /// load rather than per launch.
    pub(crate) dependent_launches: bool,
}

impl std::fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("kernel", &self.source.kernel())
            .field("config", &self.source.config())
            .field("entry", &self.source.entry())
            .field("origin", &self.origin)
            .field("registers", &self.registers)
            .finish_non_exhaustive()
    }
}

impl LoadedKernel {
    pub(crate) fn new(
        src: &KernelSource,
        function: CudaFunction,
        device: &DeviceInfo,
        stream: Arc<CudaStream>,
        origin: Origin,
        load_time: Duration,
    ) -> LoadedKernel {
        use sys::CUfunction_attribute as F;
        let attr = |a: F| function.get_attribute(a).map(|v| v.max(0) as u32);
        let static_smem = attr(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES).unwrap_or(0);
        let max_threads = attr(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .unwrap_or(device.max_threads_per_block);
        let dyn_default = attr(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
            .unwrap_or(device.smem_per_block.saturating_sub(static_smem));
        LoadedKernel {
            source: src.clone(),
            registers: attr(F::CU_FUNC_ATTRIBUTE_NUM_REGS).unwrap_or(0),
            local_bytes: attr(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES).unwrap_or(0),
            limits: LaunchLimits {
                max_grid: device.max_grid,
                max_block: device.max_block,
                max_threads,
                static_smem,
                smem_optin: device.smem_per_block_optin,
            },
            function,
            stream,
            dyn_smem_allowed: AtomicU32::new(dyn_default),
            opt_in: Mutex::new(()),
            origin,
            load_time,
            dependent_launches: device.compute_capability.0 >= 9,
        }
    }

    /// The source it was compiled from: kernel name, configuration, entry, parameters.
    pub fn source(&self) -> &KernelSource {
        &self.source
    }
    /// The declared parameters launches are checked against.
    pub fn params(&self) -> &[Param] {
        self.source.params()
    }
    /// Compiled now, or read from the disk cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }
    /// Time from asking for the kernel to having it loaded (compile or disk read, plus module
    /// load).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }
    /// Registers per thread.
    pub fn registers(&self) -> u32 {
        self.registers
    }
    /// Local memory per thread in bytes; non-zero usually means register spills.
    pub fn local_bytes(&self) -> u32 {
        self.local_bytes
    }
    /// The limits launches of this kernel are checked against.
    pub fn limits(&self) -> LaunchLimits {
        self.limits
    }
    /// cudarc's function handle, for what the runtime does not wrap.
    pub fn cuda_function(&self) -> &CudaFunction {
        &self.function
    }

    pub(crate) fn label(&self) -> String {
        let (kernel, config) = (self.source.kernel(), self.source.config());
        if config.is_empty() {
            format!("`{kernel}`")
        } else {
            format!("`{kernel}` [{config}]")
        }
    }

    /// Raise the function's dynamic shared memory limit to at least `bytes` if needed.
    pub(crate) fn ensure_dyn_smem(&self, bytes: u32) -> Result<()> {
        if bytes <= self.dyn_smem_allowed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.opt_in.lock().unwrap_or_else(|e| e.into_inner());
        if bytes <= self.dyn_smem_allowed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.function
            .set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .map_err(|e| {
                RuntimeError::driver(
                    format!(
                        "opting kernel {} into {bytes} bytes of dynamic shared memory",
                        self.label()
                    ),
                    e,
                )
            })?;
        self.dyn_smem_allowed.store(bytes, Ordering::Release);
        Ok(())
    }
}
