//! The quantized matmul on the GPU: the same verified programs as the CPU runner, compiled by
//! the codegen and launched through the runtime, with every argument checked first.

use super::config::{QMatmulConfig, QMatmulError};
use super::cpu::{decode_half, OperandBytes, PreparedWeight};
use super::program::{config_name, QMatmulKernel, TARGET};
use crate::element::{Activation, Element};
use crate::gpu::{GpuArg, GpuKernel};
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

/// A member of the family compiled for the GPU.
pub struct GpuQMatmul {
    kernel: QMatmulKernel,
    main: GpuKernel,
    reduce: Option<GpuKernel>,
    /// Split-k partial sums, kept between calls (grown on demand).
    workspace: Mutex<Option<DeviceBuffer<f32>>>,
    /// With the dequantize-then-GEMM method: the dequantization program, the cuBLAS handle and
    /// the dense `[k, n]` weight (a `DeviceBuffer<T>` of the activation type `T` of the call
    /// that made it), all made on first use.
    dequant: Option<GpuKernel>,
    gemm: Mutex<Option<(Cublas, Box<dyn Any + Send>)>>,
}

impl GpuQMatmul {
    /// Generate the CUDA of `kernel`'s programs (NVRTC compiles them at the first launch).
    pub fn new(kernel: &QMatmulKernel) -> Result<GpuQMatmul, QMatmulError> {
        let name = config_name(&kernel.config);
        let main = GpuKernel::from_program(&kernel.main, &name, &TARGET)?;
        let reduce = match &kernel.reduce {
            Some(p) => Some(GpuKernel::from_program(p, &name, &TARGET)?),
            None => None,
        };
        let dequant = match &kernel.dequant {
            Some(p) => Some(GpuKernel::from_program(p, &name, &TARGET)?),
            None => None,
        };
        Ok(GpuQMatmul {
            kernel: kernel.clone(),
            main,
            reduce,
            workspace: Mutex::new(None),
            dequant,
            gemm: Mutex::new(None),
        })
    }

    /// Compile and load the programs on `ctx` now (otherwise the first [`run`](Self::run) does).
    pub fn load(&self, ctx: &Context) -> Result<(), QMatmulError> {
        if let Some(d) = &self.dequant {
            return Ok(d.load(ctx)?);
        }
        self.main.load(ctx)?;
        if let Some(r) = &self.reduce {
            r.load(ctx)?;
        }
        Ok(())
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
    /// `c`) before anything is launched. Returns when the work is queued.
    pub fn run<T: Activation>(
        &self,
        ctx: &Context,
        m: usize,
        a: &impl DeviceRead<T>,
        w: &DeviceWeight<T>,
        c: &mut impl DeviceWrite<T>,
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
        let mut args = vec![
            GpuArg::I32(m as i32),
            GpuArg::I32(n),
            GpuArg::I32(k),
            GpuArg::In(a),
        ];
        w.push_args(&mut args);
        match &self.reduce {
            None => {
                args.push(GpuArg::Out(c));
                self.main.launch(ctx, args)?;
            }
            Some(reduce) => {
                let need = cfg.split_k * m * w.n;
                let mut ws = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
                if ws.as_ref().is_none_or(|b| b.len() < need) {
                    *ws = Some(DeviceBuffer::zeros(ctx, need)?);
                }
                let buf = ws.as_mut().expect("allocated above");
                args.push(GpuArg::Out(buf));
                self.main.launch(ctx, args)?;
                let args = vec![
                    GpuArg::I32(m as i32),
                    GpuArg::I32(n),
                    GpuArg::In(&*buf),
                    GpuArg::Out(c),
                ];
                reduce.launch(ctx, args)?;
            }
        }
        Ok(())
    }
}
