//! A device, its stream, and the kernels loaded on it.

use crate::autotune::Tuner;
pub use crate::device::{device_count, driver_version, DeviceInfo};
use crate::disk_cache::{CacheKey, CacheState, DiskCache, Lookup};
use crate::error::{Result, RuntimeError};
use crate::kernel::KernelSource;
use crate::loaded::LoadedKernel;
use crate::nvrtc::{self, CompileOptions, Output};
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Counters of how kernels were obtained. Per [`Context`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// NVRTC compilations.
    pub compiles: u64,
    /// Kernels loaded from a verified disk entry.
    pub disk_hits: u64,
    /// Loads answered from memory.
    pub memory_hits: u64,
    /// Disk entries found corrupt (or rejected by the driver), deleted and rebuilt.
    pub disk_rejected: u64,
}

#[derive(Default)]
struct Counters {
    compiles: AtomicU64,
    disk_hits: AtomicU64,
    memory_hits: AtomicU64,
    disk_rejected: AtomicU64,
}

/// How the disk cache is chosen.
#[derive(Clone, Debug, Default)]
enum CacheChoice {
    /// `TILUS_CACHE` / `TILUS_CACHE_DIR` / the user cache directory.
    #[default]
    FromEnv,
    Dir(PathBuf),
    Off,
}

/// Options for [`Context`]; start with [`Context::builder`].
#[derive(Clone, Debug)]
pub struct ContextBuilder {
    ordinal: usize,
    /// A stream (and with it a device context) to share instead of opening the device.
    stream: Option<Arc<CudaStream>>,
    cache: CacheChoice,
    lineinfo: bool,
    fast_math: bool,
    extra_options: Vec<String>,
    /// Open a stream of our own instead of using the legacy default stream.
    own_stream: bool,
}

impl ContextBuilder {
    /// Put the disk cache in `dir` (ignores `TILUS_CACHE_DIR`/`TILUS_CACHE`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = CacheChoice::Dir(dir.into());
        self
    }
    /// No disk cache: compile once per context, keep in memory.
    pub fn no_disk_cache(mut self) -> Self {
        self.cache = CacheChoice::Off;
        self
    }
    /// Compile with `-lineinfo` (for profilers).
    pub fn lineinfo(mut self, on: bool) -> Self {
        self.lineinfo = on;
        self
    }
    /// Compile with `--use_fast_math`.
    pub fn fast_math(mut self, on: bool) -> Self {
        self.fast_math = on;
        self
    }
    /// Extra NVRTC options, appended last (part of the cache key).
    pub fn nvrtc_option(mut self, option: impl Into<String>) -> Self {
        self.extra_options.push(option.into());
        self
    }
    /// Launch on a stream of the context's own instead of CUDA's legacy default stream, which
    /// graph capture refuses: needed for [`Context::capture`]. The context is then the only
    /// user of its CUDA context, and every buffer and launch of it is on that one stream, so
    /// cudarc's cross-stream event tracking is turned off (events recorded outside a capture
    /// cannot be waited on inside it). Ignored by [`Context::builder_on`], which launches on
    /// the stream it is given.
    pub fn own_stream(mut self, on: bool) -> Self {
        self.own_stream = on;
        self
    }

    /// Open the device. Fails with a hint when there is no driver, no such device, or the
    /// driver is too old; NVRTC is needed only from the first [`Context::load`].
    pub fn build(self) -> Result<Arc<Context>> {
        let driver_version = driver_version()?;
        let count = device_count()?;
        if self.ordinal >= count {
            let hint = match std::env::var("CUDA_VISIBLE_DEVICES") {
                Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v})"),
                Err(_) => String::new(),
            };
            return Err(RuntimeError::NoDevice {
                ordinal: self.ordinal,
                count,
                hint,
            });
        }
        let during = format!("opening device {}", self.ordinal);
        let cuda = match &self.stream {
            Some(stream) => stream.context().clone(),
            None => CudaContext::new(self.ordinal)
                .map_err(|e| RuntimeError::driver(during.clone(), e))?,
        };
        let attr = |a: sys::CUdevice_attribute| {
            cuda.attribute(a)
                .map(|v| v.max(0) as u32)
                .map_err(|e| RuntimeError::driver(during.clone(), e))
        };
        use sys::CUdevice_attribute as A;
        let compute_capability = cuda
            .compute_capability()
            .map_err(|e| RuntimeError::driver(during.clone(), e))?;
        let device = DeviceInfo {
            ordinal: self.ordinal,
            name: cuda.name().unwrap_or_else(|_| "unknown".into()),
            compute_capability,
            arch: nvrtc::arch_for(compute_capability.0, compute_capability.1),
            driver_version,
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_grid: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_block: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            smem_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            smem_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            total_memory: cuda.total_mem().unwrap_or(0),
        };
        let stream = match self.stream {
            Some(stream) => stream,
            None if self.own_stream => {
                // SAFETY: nothing of this CUDA context exists yet but the context itself, and
                // everything this runtime makes on it uses the one stream opened here.
                unsafe { cuda.disable_event_tracking() };
                cuda.new_stream()
                    .map_err(|e| RuntimeError::driver("opening a stream", e))?
            }
            None => cuda.default_stream(),
        };
        let mut options = CompileOptions::new(device.arch.clone());
        options.lineinfo = self.lineinfo;
        options.fast_math = self.fast_math;
        options.extra = self.extra_options;
        let disk = match self.cache {
            CacheChoice::FromEnv => DiskCache::from_env(),
            CacheChoice::Dir(dir) => DiskCache::at(dir),
            CacheChoice::Off => DiskCache::disabled(),
        };
        Ok(Arc::new(Context {
            cuda,
            stream,
            device,
            options,
            disk,
            kernels: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            tuner: OnceLock::new(),
        }))
    }
}

type Slot = Arc<Mutex<Option<Arc<LoadedKernel>>>>;

const ELF_MAGIC: &[u8] = b"\x7fELF";

/// One CUDA device: its stream, its compile options, and a two-level kernel cache (memory, then
/// disk, then NVRTC). Share it as `Arc<Context>`; every method takes `&self` and is thread-safe.
///
/// Each kernel source is compiled at most once per context, also when many threads ask for it
/// at the same time: loads of one source wait on a per-source lock, loads of different sources
/// proceed in parallel.
pub struct Context {
    cuda: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    device: DeviceInfo,
    options: CompileOptions,
    disk: DiskCache,
    kernels: Mutex<HashMap<CacheKey, Slot>>,
    counters: Counters,
    tuner: OnceLock<Tuner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device)
            .field("cache", &self.disk.state())
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Open device `ordinal` with default options (disk cache from the environment).
    pub fn new(ordinal: usize) -> Result<Arc<Context>> {
        Context::builder(ordinal).build()
    }

    /// Options for a context that shares `stream` and its device context with another library
    /// (candle, say): kernels launch on that stream, buffers are allocated on it, and memory the
    /// other library owns can be passed in place ([`crate::DeviceView::from_cuda`]).
    pub fn builder_on(stream: Arc<CudaStream>) -> ContextBuilder {
        let ordinal = stream.context().ordinal();
        ContextBuilder {
            stream: Some(stream),
            ..Context::builder(ordinal)
        }
    }

    /// Options for opening device `ordinal`.
    pub fn builder(ordinal: usize) -> ContextBuilder {
        ContextBuilder {
            ordinal,
            stream: None,
            cache: CacheChoice::FromEnv,
            lineinfo: false,
            fast_math: false,
            extra_options: Vec::new(),
            own_stream: false,
        }
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// The NVRTC target kernels are compiled for (`sm_90a` on H100).
    pub fn arch(&self) -> &str {
        &self.device.arch
    }

    /// The NVRTC options every kernel of this context is compiled with.
    pub fn compile_options(&self) -> &CompileOptions {
        &self.options
    }

    /// Whether and where compiled kernels are cached on disk.
    pub fn cache_state(&self) -> CacheState {
        self.disk.state()
    }

    /// The disk cache directory in use, if any.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.disk.dir()
    }

    /// The autotuner of this context: winners remembered in memory for the context's life and
    /// on disk under `<cache dir>/tune` (see [`crate::autotune`]).
    pub fn tuner(&self) -> &Tuner {
        self.tuner
            .get_or_init(|| Tuner::for_cache_dir(self.cache_dir()))
    }

    /// How kernels were obtained so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        CacheStats {
            compiles: c.compiles.load(Ordering::SeqCst),
            disk_hits: c.disk_hits.load(Ordering::SeqCst),
            memory_hits: c.memory_hits.load(Ordering::SeqCst),
            disk_rejected: c.disk_rejected.load(Ordering::SeqCst),
        }
    }

    /// Wait for all work on this context's stream; reports errors of kernels that faulted.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| {
            RuntimeError::driver(
                "waiting for the GPU (an earlier launch may have faulted)",
                e,
            )
        })
    }

    /// cudarc's context, for what the runtime does not wrap.
    pub fn cuda(&self) -> &Arc<CudaContext> {
        &self.cuda
    }

    /// A new stream on this context's device, for launches that should overlap with the
    /// context's own stream ([`crate::KernelArgs::launch_on`], `#[kernel]`'s `launch_on`).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.stream
            .context()
            .new_stream()
            .map_err(|e| RuntimeError::driver("creating a stream", e))
    }

    /// The stream all work of this context goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The kernel for `src`: from memory, else from the disk cache, else compiled by NVRTC (and
    /// then stored on disk). Compile errors name the kernel and configuration and quote the
    /// source around the first error.
    pub fn load(&self, src: &KernelSource) -> Result<Arc<LoadedKernel>> {
        let slot: Slot = {
            let mut map = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(src.content_key()).or_default().clone()
        };
        // Held while building: a second thread asking for the same source waits here and then
        // finds it built; other sources do not wait.
        let mut entry = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kernel) = entry.as_ref() {
            self.counters.memory_hits.fetch_add(1, Ordering::SeqCst);
            return Ok(kernel.clone());
        }
        let kernel = Arc::new(self.build(src)?);
        *entry = Some(kernel.clone());
        Ok(kernel)
    }

    /// The disk cache key: everything that determines the CUBIN bytes.
    fn disk_key(&self, src: &KernelSource, nvrtc_version: (i32, i32)) -> CacheKey {
        let args = self.options.args(Output::Cubin).join("\n");
        let version = format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1);
        CacheKey::of(&[
            src.source().as_bytes(),
            args.as_bytes(),
            version.as_bytes(),
            self.device.arch.as_bytes(),
        ])
    }

    fn build(&self, src: &KernelSource) -> Result<LoadedKernel> {
        if src.entry().contains('\0') {
            return Err(RuntimeError::InvalidKernel {
                kernel: src.kernel().into(),
                reason: "entry name contains a NUL byte".into(),
            });
        }
        let started = Instant::now();
        let info = nvrtc::nvrtc()?;
        let key = self.disk_key(src, info.version);
        match self.disk.load(&key) {
            // The driver takes anything that is not an ELF image for NUL-terminated PTX text and
            // would read past the buffer: only hand it what looks like a CUBIN.
            Lookup::Hit(cubin) if !cubin.starts_with(ELF_MAGIC) => {
                self.disk.remove(&key);
                self.counters.disk_rejected.fetch_add(1, Ordering::SeqCst);
            }
            Lookup::Hit(cubin) => match self.instantiate(src, &cubin) {
                Ok(parts) => {
                    self.counters.disk_hits.fetch_add(1, Ordering::SeqCst);
                    return Ok(LoadedKernel::new(
                        src,
                        parts,
                        &self.device,
                        self.stream.clone(),
                        crate::loaded::Origin::DiskCache,
                        started.elapsed(),
                    ));
                }
                // Verified bytes the driver still rejects (e.g. written by another build of the
                // driver): drop the entry and rebuild. A missing entry point is the source's
                // fault, not the cache's, and recompiling would not help.
                Err(e @ RuntimeError::InvalidKernel { .. }) => return Err(e),
                Err(_) => {
                    self.disk.remove(&key);
                    self.counters.disk_rejected.fetch_add(1, Ordering::SeqCst);
                }
            },
            Lookup::Corrupt(_) => {
                self.counters.disk_rejected.fetch_add(1, Ordering::SeqCst);
            }
            Lookup::Miss => {}
        }
        let compile_started = Instant::now();
        let compiled = nvrtc::compile(
            src.kernel(),
            src.config(),
            src.source(),
            &self.options,
            Output::Cubin,
        )?;
        self.counters.compiles.fetch_add(1, Ordering::SeqCst);
        let nvrtc_time = compile_started.elapsed();
        if !compiled.image.starts_with(ELF_MAGIC) {
            return Err(RuntimeError::Nvrtc {
                during: format!("compiling kernel {}", src.label()),
                message: "NVRTC returned something that is not a CUBIN".into(),
            });
        }
        let parts = self.instantiate(src, &compiled.image)?;
        self.disk.store(&key, &compiled.image);
        Ok(LoadedKernel::new(
            src,
            parts,
            &self.device,
            self.stream.clone(),
            crate::loaded::Origin::Compiled { nvrtc: nvrtc_time },
            started.elapsed(),
        ))
    }

    /// Load a CUBIN into the driver and look up the entry point.
    fn instantiate(
        &self,
        src: &KernelSource,
        cubin: &[u8],
    ) -> Result<cudarc::driver::CudaFunction> {
        let during = format!("loading the module of kernel {}", src.label());
        let module = self
            .cuda
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec()))
            .map_err(|e| RuntimeError::driver(during, e))?;
        module.load_function(src.entry()).map_err(|e| {
            if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND {
                RuntimeError::InvalidKernel {
                    kernel: src.kernel().into(),
                    reason: format!(
                        "entry point `{}` is not in the compiled module (it must be an \
                         `extern \"C\" __global__` function)",
                        src.entry()
                    ),
                }
            } else {
                RuntimeError::driver(format!("looking up `{}`", src.entry()), e)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On any machine (this one may have no driver, no GPU, or a GPU), opening devices and
    /// counting them gives a value or an error, never a panic.
    #[test]
    fn opening_devices_never_panics() {
        let count = match device_count() {
            Ok(n) => n,
            Err(e) => {
                assert!(e.is_unavailable(), "unexpected error kind: {e}");
                eprintln!("no GPU here: {e}");
                0
            }
        };
        match Context::builder(0).no_disk_cache().build() {
            Ok(ctx) => {
                assert!(count > 0);
                assert!(ctx.arch().starts_with("sm_"));
            }
            Err(e) => assert!(e.is_unavailable(), "unexpected error kind: {e}"),
        }
        let e = Context::builder(usize::MAX)
            .no_disk_cache()
            .build()
            .unwrap_err();
        assert!(e.is_unavailable(), "{e}");
    }
}
