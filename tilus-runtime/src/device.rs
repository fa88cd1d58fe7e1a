//! The driver and the devices it sees: loading the driver library, counting devices, and the
//! facts about one device ([`DeviceInfo`]) that launches are checked against.

use crate::error::{Result, RuntimeError};
use cudarc::driver::{sys, CudaContext};
use std::sync::OnceLock;

/// The driver library, loaded once per process, and its CUDA version (`13000` for 13.0).
/// A missing `libcuda` or an old driver is an error with a hint, never a panic.
pub fn driver_version() -> Result<i32> {
    static DRIVER: OnceLock<std::result::Result<i32, DriverProblem>> = OnceLock::new();
    match DRIVER.get_or_init(load_driver) {
        Ok(v) => Ok(*v),
        Err(DriverProblem::Missing) => Err(RuntimeError::LibraryMissing {
            library: "libcuda.so",
            hint: "no NVIDIA driver on this machine, so kernels cannot run here (they can still \
                   be compiled: compile-only checks need NVRTC alone). On a GPU machine install \
                   the NVIDIA driver (R580 or newer for CUDA 13.0), or put the directory holding \
                   libcuda.so.1 on LD_LIBRARY_PATH"
                .into(),
        }),
        Err(DriverProblem::Call(e)) => Err(RuntimeError::driver(
            "asking the driver for its version",
            *e,
        )),
        Err(DriverProblem::TooOld(v)) => Err(RuntimeError::DriverTooOld {
            found_major: v / 1000,
            found_minor: (v % 1000) / 10,
        }),
    }
}

#[derive(Debug)]
enum DriverProblem {
    Missing,
    Call(cudarc::driver::DriverError),
    TooOld(i32),
}

fn load_driver() -> std::result::Result<i32, DriverProblem> {
    if !crate::linking::driver_present() {
        return Err(DriverProblem::Missing);
    }
    let mut version = 0;
    // SAFETY: the library is present; valid out-pointer. cuDriverGetVersion works before cuInit.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(DriverProblem::Call)?;
    // The bindings are CUDA 13.0's; older drivers lack some entry points (cudarc would panic on
    // first use of one) and cannot load CUBINs from NVRTC 13.
    if version < 13000 {
        return Err(DriverProblem::TooOld(version));
    }
    Ok(version)
}

/// Number of CUDA devices visible to this process (0 when the driver sees none).
pub fn device_count() -> Result<usize> {
    driver_version()?;
    static INIT: OnceLock<std::result::Result<(), cudarc::driver::DriverError>> = OnceLock::new();
    match INIT.get_or_init(cudarc::driver::result::init) {
        Ok(()) => {}
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => return Ok(0),
        Err(e) => return Err(RuntimeError::driver("initializing the driver (cuInit)", *e)),
    }
    match CudaContext::device_count() {
        Ok(n) => Ok(n.max(0) as usize),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Err(e) => Err(RuntimeError::driver("counting devices", e)),
    }
}

/// Facts about one device (the one a [`crate::Context`] drives).
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability, e.g. `(9, 0)`.
    pub compute_capability: (i32, i32),
    /// NVRTC target: `sm_90a` on Hopper, `sm_XY` otherwise.
    pub arch: String,
    /// Driver's CUDA version, e.g. `13000`.
    pub driver_version: i32,
    pub multiprocessors: u32,
    pub max_grid: [u32; 3],
    pub max_block: [u32; 3],
    pub max_threads_per_block: u32,
    /// Shared memory a block may use without opting in (48 KiB).
    pub smem_per_block: u32,
    /// Shared memory a block may use after opting in (227 KiB on H100).
    pub smem_per_block_optin: u32,
    pub total_memory: usize,
}
