//! The quantized matmul on the GPU: the same verified programs as the CPU runner, compiled by
//! the codegen and launched through the runtime, with every argument checked first.

use super::config::{shape_err, QMatmulConfig, QMatmulError};
use super::cpu::{check_split_scratch, decode_half, OperandBytes, PreparedWeight};
use super::program::{config_name, target, QMatmulKernel, TARGET};
use crate::element::{Activation, Element};
use crate::gpu::{GpuArg, GpuKernel, LaunchOptions};
use std::any::Any;
use std::sync::Mutex;
use tilus_runtime::{Context, Cublas, DeviceBuffer, DeviceRead, DeviceWrite};

/// The weight operands in device memory: re-laid-out codes, scales and zero points in the
/// activation type `T`.
pub struct DeviceWeight<T: Element> {
    pub k: usize,
    pub n: usize,
    pub b: DeviceBuffer<u8>,
    pub scales: DeviceBuffer<T>,
    pub zeros: Option<DeviceBuffer<T>>,
}

impl<T: Activation> DeviceWeight<T> {
    /// Copy a prepared weight to the device. `T` must be the weight's scale type.
    pub fn upload(ctx: &Context, w: &PreparedWeight) -> Result<Self, QMatmulError> {
        let halves = |bytes: &[u8]| -> Vec<T> {
            decode_half(bytes, T::DTYPE)
                .into_iter()
                .map(T::from_f32)
                .collect()
        };
        Ok(DeviceWeight {
            k: w.k,
            n: w.n,
            b: DeviceBuffer::from_host(ctx, &w.b)?,
            scales: DeviceBuffer::from_host(ctx, &halves(&w.scales))?,
            zeros: match &w.zeros {
                Some(z) => Some(DeviceBuffer::from_host(ctx, &halves(z))?),
                None => None,
            },
        })
    }

    /// The weight's kernel arguments, in the programs' parameter order: codes, scales, zero
    /// points. Without zero points the programs view `zeros` with no rows, so the scales stand
    /// in (nothing reads them through that parameter).
    fn push_args<'a>(&'a self, args: &mut Vec<GpuArg<'a>>) {
        args.push(GpuArg::In(&self.b));
        args.push(GpuArg::In(&self.scales));
        args.push(GpuArg::In(self.zeros.as_ref().unwrap_or(&self.scales)));
    }

    /// Bytes the kernel must read for the weight (codes, scales, zero points).
    pub fn bytes(&self) -> usize {
        self.b.len() + 2 * self.scales.len() + self.zeros.as_ref().map_or(0, |z| 2 * z.len())
    }
}

/// The split-k buffers of one [`GpuQMatmul`] ([`QMatmulConfig::split_buffers`]): made by
/// [`GpuQMatmul::reserve`], never by a run. With `split_k = 1` they are one-element
/// placeholders (the program takes the parameters but does not read them).
struct SplitBuffers {
    max_m: usize,
    n: usize,
    workspace: DeviceBuffer<f32>,
    /// One counter per output tile, zero between launches: the last block of a tile resets
    /// its counter, so no launch needs a memset (and a CUDA graph can replay the launch).
    semaphores: DeviceBuffer<i32>,
}

/// A member of the family compiled for the GPU.
///
/// With `split_k > 1`, [`GpuQMatmul::reserve`] must make the split-k workspace and semaphores
/// for the most rows a run will have before the first [`GpuQMatmul::run`]; `run` itself then
/// allocates nothing and does not synchronize with the host, so it can be captured in a CUDA
/// graph. The semaphores belong to this object: two runs of one `GpuQMatmul` must not be in
/// flight at once on different streams (they would count on the same semaphores and write the
/// same workspace); separate objects (two layers, two buckets of a layer) never share them.
pub struct GpuQMatmul {
    kernel: QMatmulKernel,
    main: GpuKernel,
    split: Mutex<Option<SplitBuffers>>,
    /// With the dequantize-then-GEMM method: the dequantization program, the cuBLAS handle and
    /// the dense `[k, n]` weight (a `DeviceBuffer<T>` of the activation type `T` of the call
    /// that made it), all made on first use.
    dequant: Option<GpuKernel>,
    gemm: Mutex<Option<(Cublas, Box<dyn Any + Send>)>>,
    /// With the integer-mma gemv for several tokens a block: the pre-pass splitting the
    /// activations into digits, and its buffers (made by the first run that needs more than
    /// they hold: a warm-up run before a CUDA graph's capture makes them).
    digits: Option<GpuKernel>,
    digit_buffers: Mutex<Option<DigitBuffers>>,
}

/// The pre-pass buffers of one [`GpuQMatmul`] ([`QMatmulConfig::digit_buffers`]).
struct DigitBuffers {
    max_m: usize,
    k: usize,
    digits: DeviceBuffer<u8>,
    side: DeviceBuffer<f32>,
}

impl GpuQMatmul {
    /// Generate the CUDA of `kernel`'s programs (NVRTC compiles them at the first launch).
    pub fn new(kernel: &QMatmulKernel) -> Result<GpuQMatmul, QMatmulError> {
        let name = config_name(&kernel.config);
        let main = GpuKernel::from_program(&kernel.main, &name, &target(&kernel.config))?;
        let dequant = match &kernel.dequant {
            Some(p) => Some(GpuKernel::from_program(p, &name, &TARGET)?),
            None => None,
        };
        let digits = match &kernel.digits {
            Some(p) => Some(GpuKernel::from_program(p, &name, &TARGET)?),
            None => None,
        };
        Ok(GpuQMatmul {
            kernel: kernel.clone(),
            main,
            split: Mutex::new(None),
            dequant,
            gemm: Mutex::new(None),
            digits,
            digit_buffers: Mutex::new(None),
        })
    }

    /// Compile and load the programs on `ctx` now (otherwise the first [`run`](Self::run) does).
    pub fn load(&self, ctx: &Context) -> Result<(), QMatmulError> {
        if let Some(d) = &self.dequant {
            return Ok(d.load(ctx)?);
        }
        if let Some(d) = &self.digits {
            d.load(ctx)?;
        }
        Ok(self.main.load(ctx)?)
    }

    /// Make the split-k workspace and semaphores for runs of up to `max_m` rows of an
    /// `n`-column weight (zeroed; with `split_k = 1`, one-element placeholders). Keeps the
    /// buffers it has when they already serve `max_m` rows of `n` columns. Errors name `m` or
    /// `n`. Call it before the first run (and before capturing runs in a CUDA graph): a run
    /// allocates nothing, and one with more rows than reserved is an error naming `m`.
    pub fn reserve(&self, ctx: &Context, max_m: usize, n: usize) -> Result<(), QMatmulError> {
        let cfg = &self.kernel.config;
        let (ws, sems) = cfg.split_buffers(max_m, n)?;
        let mut split = self.split.lock().unwrap_or_else(|p| p.into_inner());
        if split.as_ref().is_some_and(|b| {
            b.n == n && b.max_m >= max_m && b.workspace.len() >= ws && b.semaphores.len() >= sems
        }) {
            return Ok(());
        }
        // Replaced only after the new buffers exist, so an allocation failure keeps the old.
        *split = Some(SplitBuffers {
            max_m,
            n,
            workspace: DeviceBuffer::zeros(ctx, ws.max(1))?,
            semaphores: DeviceBuffer::zeros(ctx, sems.max(1))?,
        });
        Ok(())
    }

    /// Make the digits' pre-pass buffers of the integer-mma gemv with several tokens a block
    /// for runs of up to `max_m` rows of a `k`-row weight (nothing for other configurations).
    /// A run makes them itself when they are missing or too small, so this is for callers that
    /// must not allocate later (a CUDA graph's capture). Errors name `m` or `k`.
    pub fn reserve_digits(
        &self,
        ctx: &Context,
        max_m: usize,
        k: usize,
    ) -> Result<(), QMatmulError> {
        if self.digits.is_none() {
            return Ok(());
        }
        let mut pre = self.digit_buffers.lock().unwrap_or_else(|p| p.into_inner());
        self.make_digit_buffers(ctx, &mut pre, max_m, k)
    }

    /// Replace `pre` with buffers for `max_m` rows of `k` unless it already serves them
    /// (capacity counts whole 32-row blocks, as the kernels pad).
    fn make_digit_buffers(
        &self,
        ctx: &Context,
        pre: &mut Option<DigitBuffers>,
        max_m: usize,
        k: usize,
    ) -> Result<(), QMatmulError> {
        if pre
            .as_ref()
            .is_some_and(|d| d.k == k && d.max_m.div_ceil(32) >= max_m.div_ceil(32))
        {
            return Ok(());
        }
        let (nd, ns) = self.kernel.config.digit_buffers(max_m, k)?;
        // Replaced only after the new buffers exist, so an allocation failure keeps the old.
        *pre = Some(DigitBuffers {
            max_m,
            k,
            digits: DeviceBuffer::zeros(ctx, nd)?,
            side: DeviceBuffer::zeros(ctx, ns)?,
        });
        Ok(())
    }

    /// The rows the split-k buffers were reserved for (`None` before [`Self::reserve`]).
    pub fn reserved_rows(&self) -> Option<usize> {
        let split = self.split.lock().unwrap_or_else(|p| p.into_inner());
        split.as_ref().map(|b| b.max_m)
    }

    pub fn config(&self) -> &QMatmulConfig {
        &self.kernel.config
    }

    /// The generated main program (for inspection: source, shared memory, assumptions).
    pub fn main_program(&self) -> &GpuKernel {
        &self.main
    }

    /// `c = a · dequant(w)` on `ctx`'s stream; `a` is `[m, k]`, `c` is `[m, n]`, row-major.
    /// Shapes and lengths are checked (errors name `m`, `n`, `k`, `a`, `b`, `scales`, `zeros`,
    /// `c`) before anything is launched. Returns when the work is queued: one launch, also
    /// with `split_k > 1` (two for the integer-mma gemv with several tokens a block: the
    /// digits' pre-pass, whose buffers the first run with more rows than they hold makes), whose workspace must have been reserved for at least `m` rows of
    /// `w`'s columns ([`Self::reserve`]; an error naming `m` otherwise). With `split_k = 1`
    /// and no reservation, the first run makes the two one-element placeholders.
    pub fn run<T: Activation>(
        &self,
        ctx: &Context,
        m: usize,
        a: &impl DeviceRead<T>,
        w: &DeviceWeight<T>,
        c: &mut impl DeviceWrite<T>,
    ) -> Result<(), QMatmulError> {
        self.run_with(ctx, m, a, w, c, false)
    }

    /// Whether [`Self::run_with`] can launch this configuration as a programmatic dependent
    /// ([`QMatmulKernel::takes_dependent`], read from the compiled launch spec: the gemv, the
    /// one-token integer-mma gemv and the look-up kernel).
    pub fn takes_dependent(&self) -> bool {
        self.main.spec().waits_prior_grid
    }

    /// [`Self::run`], with `dependent` launched as a programmatic dependent of the kernel
    /// before it on `ctx`'s stream (sm_90) where the configuration allows it
    /// ([`Self::takes_dependent`]; otherwise an ordinary launch): its blocks may start while
    /// that kernel ends and load their first weight tiles, then wait for it before they read
    /// `a` or write anything. The caller's contract: no kernel still running may write `w`
    /// (weights are written by host uploads, which a stream orders before any launch).
    pub fn run_with<T: Activation>(
        &self,
        ctx: &Context,
        m: usize,
        a: &impl DeviceRead<T>,
        w: &DeviceWeight<T>,
        c: &mut impl DeviceWrite<T>,
        dependent: bool,
    ) -> Result<(), QMatmulError> {
        let cfg = &self.kernel.config;
        if T::DTYPE != cfg.adtype {
            return Err(QMatmulError::Shape {
                arg: "a",
                reason: format!("the kernel computes in {}, not {}", cfg.adtype, T::DTYPE),
            });
        }
        // Lengths in bytes, checked with the same rules as the CPU runner.
        let bytes = OperandBytes {
            a: a.size_bytes(),
            b: w.b.len(),
            scales: w.scales.len() * 2,
            zeros: w.zeros.as_ref().map(|z| z.len() * 2),
            c: c.size_bytes(),
        };
        self.kernel.check_lengths(m, w.n, w.k, &bytes)?;
        if m == 0 {
            return Ok(());
        }
        let (n, k) = (w.n as i32, w.k as i32);
        if let Some(dequant) = &self.dequant {
            let mut gemm = self.gemm.lock().unwrap_or_else(|p| p.into_inner());
            if gemm
                .as_mut()
                .and_then(|(_, d)| d.downcast_mut::<DeviceBuffer<T>>())
                .is_none_or(|d| d.len() != w.k * w.n)
            {
                let dense = DeviceBuffer::<T>::zeros(ctx, w.k * w.n)?;
                let blas = match gemm.take() {
                    Some((blas, _)) => blas,
                    None => Cublas::new(ctx)?,
                };
                *gemm = Some((blas, Box::new(dense)));
            }
            let (blas, dense) = gemm.as_mut().expect("made above");
            let dense = dense
                .downcast_mut::<DeviceBuffer<T>>()
                .expect("made for T above");
            let mut args = vec![GpuArg::I32(n), GpuArg::I32(k)];
            w.push_args(&mut args);
            args.push(GpuArg::Out(dense));
            dequant.launch(ctx, args)?;
            blas.gemm(m, w.n, w.k, a, dense, c)?;
            return Ok(());
        }
        let mut split = self.split.lock().unwrap_or_else(|p| p.into_inner());
        if cfg.needs_split_buffers() {
            match split.as_ref() {
                Some(b) => check_split_scratch(m, w.n, b.max_m, b.n)?,
                None => {
                    return Err(shape_err(
                        "m",
                        format!(
                            "{m} rows, but no split-k workspace was reserved; call GpuQMatmul::reserve(ctx, max_m, n) before running split_k = {}",
                            cfg.split_k
                        ),
                    ))
                }
            }
        } else if split.is_none() {
            drop(split);
            self.reserve(ctx, m, w.n)?;
            split = self.split.lock().unwrap_or_else(|p| p.into_inner());
        }
        let bufs = split.as_mut().expect("reserved above");
        let mut pre = self.digit_buffers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(digits) = &self.digits {
            self.make_digit_buffers(ctx, &mut pre, m, w.k)?;
            let d = pre.as_mut().expect("made above");
            let args = vec![
                GpuArg::I32(m as i32),
                GpuArg::I32(k),
                GpuArg::In(a),
                GpuArg::Out(&mut d.digits),
                GpuArg::Out(&mut d.side),
            ];
            digits.launch(ctx, args)?;
        }
        let mut args = vec![
            GpuArg::I32(m as i32),
            GpuArg::I32(n),
            GpuArg::I32(k),
            GpuArg::In(a),
        ];
        w.push_args(&mut args);
        args.push(GpuArg::Out(c));
        args.push(GpuArg::Out(&mut bufs.workspace));
        args.push(GpuArg::Out(&mut bufs.semaphores));
        if let Some(d) = pre.as_ref() {
            args.push(GpuArg::In(&d.digits));
            args.push(GpuArg::In(&d.side));
        }
        let overlap = self.takes_dependent();
        let dependent = dependent && overlap;
        if overlap {
            args.push(GpuArg::I32(i32::from(dependent)));
        }
        let how = LaunchOptions {
            stream: None,
            dependent,
        };
        self.main.launch_with(ctx, how, args)?;
        Ok(())
    }
}
