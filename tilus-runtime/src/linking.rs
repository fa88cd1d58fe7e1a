//! How the CUDA libraries reach the process, and whether each one can be used.
//!
//! By default cudarc opens `libcuda`, `libnvrtc` and `libcublas` at run time (building needs no
//! CUDA), and a missing library is an error with a hint. With the `linked-cuda` feature the
//! binary links against them instead: the dynamic loader resolves them at process start, so
//! once the program runs they are present. That is how candle's `cuda` feature builds cudarc,
//! and one process cannot mix the two (cudarc allows one mode per build), so tilus's
//! `candle-cuda` feature turns `linked-cuda` on.

/// The driver library (`libcuda.so.1`) is there.
pub(crate) fn driver_present() -> bool {
    #[cfg(not(feature = "linked-cuda"))]
    // SAFETY: opening the library runs its initializers, which is what using it means.
    return unsafe { cudarc::driver::sys::is_culib_present() };
    #[cfg(feature = "linked-cuda")]
    true
}

/// NVRTC (`libnvrtc.so.13`) is there.
pub(crate) fn nvrtc_present() -> bool {
    #[cfg(not(feature = "linked-cuda"))]
    // SAFETY: as above; NVRTC's initializers are benign.
    return unsafe { cudarc::nvrtc::sys::is_culib_present() };
    #[cfg(feature = "linked-cuda")]
    true
}

/// cuBLAS (`libcublas.so.13`) is there.
pub(crate) fn cublas_present() -> bool {
    #[cfg(not(feature = "linked-cuda"))]
    // SAFETY: as above.
    return unsafe { cudarc::cublas::sys::is_culib_present() };
    #[cfg(feature = "linked-cuda")]
    true
}
