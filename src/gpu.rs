//! Running a VM [`Program`] on the GPU: generate its CUDA ([`tilus_core::codegen`]), hand the
//! source to the runtime (NVRTC, caches), check the launch assumptions the generated code relies
//! on, evaluate the grid, allocate the scratch buffers of `AllocateGlobal`, and launch.
//!
//! This is the one bridge from programs to launches for code that builds programs at run time
//! (the kernel library); `#[kernel]` launchers go through the same runtime calls.

use tilus_core::codegen::{self, ArgValue, CudaKernel, ParamKind};
use tilus_core::ir::{BinaryOp, Expr, Program, UnaryOp};
use tilus_core::DType;
use tilus_runtime::{
    Context, DeviceBuffer, KernelArg, KernelArgMut, KernelSource, LaunchDims, Param,
};

/// Errors of [`GpuProgram`]; launch-argument errors name the argument.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("code generation for `{program}` failed: {message}")]
    Codegen { program: String, message: String },
    #[error("program `{program}`: {message}")]
    Arguments { program: String, message: String },
    #[error(transparent)]
    Runtime(#[from] tilus_runtime::RuntimeError),
}

/// One launch argument, in the program's parameter order.
pub enum GpuArg<'a> {
    I32(i32),
    /// A pointer parameter the program only reads.
    In(&'a dyn KernelArg),
    /// A pointer parameter the program writes.
    Out(&'a mut dyn KernelArgMut),
}

/// A program compiled for the GPU (lazily: NVRTC runs at the first launch on a context).
pub struct GpuProgram {
    kernel: CudaKernel,
    source: KernelSource,
    name: String,
}

/// The runtime's element type for a pointer of `dtype`: sub-byte data travels as bytes.
fn runtime_param(name: &str, dtype: DType, mutable: bool) -> Param {
    use half::{bf16, f16};
    macro_rules! typed {
        ($t:ty) => {
            if mutable {
                Param::ptr_mut::<$t>(name)
            } else {
                Param::ptr::<$t>(name)
            }
        };
    }
    match dtype {
        DType::F16 => typed!(f16),
        DType::BF16 => typed!(bf16),
        DType::F32 => typed!(f32),
        DType::Int(32) => typed!(i32),
        DType::UInt(32) => typed!(u32),
        DType::Int(8) => typed!(i8),
        _ => typed!(u8),
    }
}

impl GpuProgram {
    /// Generate the CUDA of `program`; `config` labels it in caches and error messages.
    pub fn new(program: &Program, config: &str) -> Result<GpuProgram, GpuError> {
        let kernel = codegen::emit(program).map_err(|e| GpuError::Codegen {
            program: program.name.clone(),
            message: e.message,
        })?;
        let params: Vec<Param> = kernel
            .params
            .iter()
            .map(|p| match &p.kind {
                ParamKind::I32 { .. } => Param::value::<i32>(&p.ir_name),
                ParamKind::Pointer { dtype, mutable, .. } => {
                    runtime_param(&p.ir_name, *dtype, *mutable)
                }
                ParamKind::Workspace { .. } => Param::ptr_mut::<u8>(&p.ir_name),
            })
            .collect();
        let source = KernelSource::new(
            program.name.clone(),
            config.to_string(),
            kernel.entry.clone(),
            kernel.source.clone(),
            params,
        );
        Ok(GpuProgram {
            kernel,
            source,
            name: program.name.clone(),
        })
    }

    /// Compile (or find in the caches) and load the kernel on `ctx` now instead of at the first
    /// launch, e.g. to compile many kernels from several threads at once.
    pub fn load(&self, ctx: &Context) -> Result<(), GpuError> {
        ctx.load(&self.source)?;
        Ok(())
    }

    /// The generated kernel (source, parameters, shared memory, assumptions).
    pub fn cuda(&self) -> &CudaKernel {
        &self.kernel
    }

    fn arg_error(&self, message: impl Into<String>) -> GpuError {
        GpuError::Arguments {
            program: self.name.clone(),
            message: message.into(),
        }
    }

    /// Evaluate a workspace extent, an expression over the scalar parameters.
    fn eval(&self, e: &Expr, values: &[ArgValue]) -> Result<i64, String> {
        let ev = |x: &Expr| self.eval(x, values);
        Ok(match e {
            Expr::Int(v) => *v as i64,
            Expr::Bool(b) => *b as i64,
            Expr::Var(var) => match self.kernel.param_index(*var).map(|i| values[i]) {
                Some(ArgValue::I32(v)) => v as i64,
                _ => {
                    return Err(format!(
                        "a workspace extent reads {var:?}, not a scalar parameter"
                    ))
                }
            },
            Expr::Unary(UnaryOp::Neg, x) => -ev(x)?,
            Expr::Unary(UnaryOp::Not, x) => (ev(x)? == 0) as i64,
            Expr::Select(c, a, b) => {
                if ev(c)? != 0 {
                    ev(a)?
                } else {
                    ev(b)?
                }
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (ev(a)?, ev(b)?);
                match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Sub => a - b,
                    BinaryOp::Mul => a * b,
                    BinaryOp::Div | BinaryOp::Mod if b == 0 => {
                        return Err("a workspace extent divides by zero".into())
                    }
                    BinaryOp::Div => a / b,
                    BinaryOp::Mod => a % b,
                    BinaryOp::Min => a.min(b),
                    BinaryOp::Max => a.max(b),
                    BinaryOp::Lt => (a < b) as i64,
                    BinaryOp::Le => (a <= b) as i64,
                    BinaryOp::Gt => (a > b) as i64,
                    BinaryOp::Ge => (a >= b) as i64,
                    BinaryOp::Eq => (a == b) as i64,
                    BinaryOp::Ne => (a != b) as i64,
                    BinaryOp::And => (a != 0 && b != 0) as i64,
                    BinaryOp::Or => (a != 0 || b != 0) as i64,
                }
            }
        })
    }

    /// Check `args` against the generated code's assumptions and launch on `ctx`'s stream.
    /// `args` holds the program's own parameters in order (not the hidden workspaces, which are
    /// allocated here, zeroed, per launch). A grid with a zero extent launches nothing.
    pub fn launch(&self, ctx: &Context, args: Vec<GpuArg<'_>>) -> Result<(), GpuError> {
        let own = self
            .kernel
            .params
            .iter()
            .filter(|p| !matches!(p.kind, ParamKind::Workspace { .. }))
            .count();
        if args.len() != own {
            return Err(
                self.arg_error(format!("takes {own} arguments, {} were passed", args.len()))
            );
        }
        // Values as the assumption checks see them; workspaces are freshly allocated and so
        // aligned, and stand in as address 0.
        let mut values = Vec::with_capacity(self.kernel.params.len());
        let mut supplied = args.iter();
        for p in &self.kernel.params {
            let v = match p.kind {
                ParamKind::Workspace { .. } => ArgValue::Pointer(0),
                _ => match supplied.next() {
                    Some(GpuArg::I32(v)) => ArgValue::I32(*v),
                    Some(GpuArg::In(b)) => ArgValue::Pointer(b.address()),
                    Some(GpuArg::Out(b)) => ArgValue::Pointer(b.address()),
                    None => unreachable!("counted above"),
                },
            };
            values.push(v);
        }
        self.kernel
            .check_args(&values)
            .map_err(|m| self.arg_error(m))?;
        let grid = self
            .kernel
            .grid_dims(&values)
            .map_err(|m| self.arg_error(m))?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut workspaces = Vec::new();
        for p in &self.kernel.params {
            if let ParamKind::Workspace { dtype, shape } = &p.kind {
                let mut numel = 1usize;
                for e in shape {
                    let v = self.eval(e, &values).map_err(|m| self.arg_error(m))?;
                    numel = numel.saturating_mul(v.max(0) as usize);
                }
                let bytes = tilus_core::storage::packed_len(*dtype, numel);
                workspaces.push(DeviceBuffer::<u8>::zeros(ctx, bytes.max(1))?);
            }
        }
        let loaded = ctx.load(&self.source)?;
        let mut builder = loaded.args();
        let mut supplied = args.into_iter();
        let mut scratch = workspaces.iter_mut();
        for p in &self.kernel.params {
            builder = match p.kind {
                ParamKind::Workspace { .. } => {
                    builder.arg_mut(scratch.next().expect("one per workspace parameter"))
                }
                _ => match supplied.next().expect("counted above") {
                    GpuArg::I32(v) => builder.value(v),
                    GpuArg::In(b) => builder.arg_dyn(b),
                    GpuArg::Out(b) => builder.arg_mut_dyn(b),
                },
            };
        }
        let dims = LaunchDims::new(grid, [self.kernel.block_threads, 1, 1])
            .with_dyn_smem(self.kernel.shared_bytes as u32);
        builder.launch(dims)?;
        Ok(())
    }
}
