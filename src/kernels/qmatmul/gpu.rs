//! The quantized matmul on the GPU: the same verified programs as the CPU runner, compiled by
//! the codegen and launched through the runtime, with every argument checked first.

use super::config::{QMatmulConfig, QMatmulError};
use super::cpu::{decode_half, OperandBytes, PreparedWeight};
use super::program::{config_name, QMatmulKernel};
use crate::gpu::{GpuArg, GpuProgram};
use crate::kernels::linear::Activation;
use std::sync::Mutex;
use tilus_runtime::{Context, DeviceBuffer, Element};

/// The weight operands in device memory: re-laid-out codes, scales and zero points in the
/// activation type `T`.
pub struct DeviceWeight<T: Element> {
    pub k: usize,
    pub n: usize,
    pub b: DeviceBuffer<u8>,
    pub scales: DeviceBuffer<T>,
    pub zeros: Option<DeviceBuffer<T>>,
}

impl<T: Element + Activation> DeviceWeight<T> {
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

    /// Bytes the kernel must read for the weight (codes, scales, zero points).
    pub fn bytes(&self) -> usize {
        self.b.len() + 2 * self.scales.len() + self.zeros.as_ref().map_or(0, |z| 2 * z.len())
    }
}

/// A member of the family compiled for the GPU.
pub struct GpuQMatmul {
    kernel: QMatmulKernel,
    main: GpuProgram,
    reduce: Option<GpuProgram>,
    /// Split-k partial sums, kept between calls (grown on demand).
    workspace: Mutex<Option<DeviceBuffer<f32>>>,
}

impl GpuQMatmul {
    /// Generate the CUDA of `kernel`'s programs (NVRTC compiles them at the first launch).
    pub fn new(kernel: &QMatmulKernel) -> Result<GpuQMatmul, QMatmulError> {
        let name = config_name(&kernel.config);
        let main = GpuProgram::new(&kernel.main, &name)?;
        let reduce = match &kernel.reduce {
            Some(p) => Some(GpuProgram::new(p, &name)?),
            None => None,
        };
        Ok(GpuQMatmul {
            kernel: kernel.clone(),
            main,
            reduce,
            workspace: Mutex::new(None),
        })
    }

    pub fn config(&self) -> &QMatmulConfig {
        &self.kernel.config
    }

    /// The generated main program (for inspection: source, shared memory, assumptions).
    pub fn main_program(&self) -> &GpuProgram {
        &self.main
    }

    /// Compile and load the programs on `ctx` now instead of at the first launch.
    pub fn load(&self, ctx: &Context) -> Result<(), QMatmulError> {
        self.main.load(ctx)?;
        if let Some(r) = &self.reduce {
            r.load(ctx)?;
        }
        Ok(())
    }

    /// `c = a · dequant(w)` on `ctx`'s stream; `a` is `[m, k]`, `c` is `[m, n]`, row-major.
    /// Shapes and lengths are checked (errors name `m`, `n`, `k`, `a`, `b`, `scales`, `zeros`,
    /// `c`) before anything is launched. Returns when the work is queued.
    pub fn run<T: Element + Activation>(
        &self,
        ctx: &Context,
        m: usize,
        a: &DeviceBuffer<T>,
        w: &DeviceWeight<T>,
        c: &mut DeviceBuffer<T>,
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
            a: a.len() * 2,
            b: w.b.len(),
            scales: w.scales.len() * 2,
            zeros: w.zeros.as_ref().map(|z| z.len() * 2),
            c: c.len() * 2,
        };
        self.kernel.check_lengths(m, w.n, w.k, &bytes)?;
        if m == 0 {
            return Ok(());
        }
        let (n, k) = (w.n as i32, w.k as i32);
        let mut args = vec![
            GpuArg::I32(m as i32),
            GpuArg::I32(n),
            GpuArg::I32(k),
            GpuArg::In(a),
            GpuArg::In(&w.b),
            GpuArg::In(&w.scales),
        ];
        if let Some(z) = &w.zeros {
            args.push(GpuArg::In(z));
        }
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
