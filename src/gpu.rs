//! The one launch path. Every kernel, whether written with `#[kernel]` (its [`LaunchSpec`] and
//! source are embedded per configuration) or built at run time by the kernel library (generated
//! here from a [`Program`]), launches through [`GpuKernel::launch`], which before anything
//! reaches the driver:
//! - checks the argument count against the entry's own parameters (the runtime's parameter list
//!   is derived from the same [`LaunchSpec`] that lists the entry's parameters, hidden
//!   workspaces included, so the two cannot disagree);
//! - checks every buffer against the kernel's global views, and every assumption of the
//!   generated code (alignment, divisibility);
//! - evaluates the grid (a zero extent launches nothing) and leaves the device limits to the
//!   runtime's `check_dims`;
//! - allocates and zeroes the `AllocateGlobal` workspaces;
//! - encodes a tensor map (`CUtensorMap`) per TMA view, from the buffer's address and the view's
//!   extents for this launch, after checking the buffer holds the view;
//! - launches on the context's stream or on a stream the caller gives.
//!
//! Every failure is an error naming the argument; nothing a caller passes can fault the kernel
//! on what these checks cover.

use std::sync::Arc;

use tilus_core::codegen;
use tilus_core::ir::Program;
use tilus_core::launch::{ArgValue, LaunchSpec, ParamKind};
use tilus_core::{DType, Target};
use tilus_runtime::{
    Context, CudaStream, DeviceBuffer, KernelArg, KernelArgMut, KernelSource, LaunchDims, Param,
    ParamType, RuntimeError, TensorMap,
};

/// Errors of [`GpuKernel`]; argument errors name the argument.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("code generation for `{program}` failed: {message}")]
    Codegen { program: String, message: String },
    #[error("kernel `{kernel}`{}: {message}", config_label(.config))]
    Arguments {
        kernel: String,
        config: String,
        message: String,
    },
    #[error(transparent)]
    Runtime(#[from] tilus_runtime::RuntimeError),
}

fn config_label(config: &str) -> String {
    if config.is_empty() {
        String::new()
    } else {
        format!(" ({config})")
    }
}

/// One launch argument, in the kernel's own parameter order.
pub enum GpuArg<'a> {
    I32(i32),
    /// A `long long` parameter (8 bytes on the ABI).
    I64(i64),
    F32(f32),
    Bool(bool),
    /// A pointer parameter the kernel only reads.
    In(&'a dyn KernelArg),
    /// A pointer parameter the kernel writes.
    Out(&'a mut dyn KernelArgMut),
    /// Bytes for a read-only pointer parameter of the configuration's element type
    /// (`Global<A>` with `A` a dtype parameter), or any buffer's bytes for a `Global<u8>`
    /// parameter; checked against the views in bytes.
    InBytes(&'a dyn KernelArg),
    /// Bytes for a written pointer parameter of the configuration's element type.
    OutBytes(&'a mut dyn KernelArgMut),
}

impl GpuArg<'_> {
    fn value(&self) -> ArgValue {
        match self {
            GpuArg::I32(v) => ArgValue::I32(*v),
            GpuArg::I64(v) => ArgValue::I64(*v),
            GpuArg::F32(v) => ArgValue::F32(*v),
            GpuArg::Bool(v) => ArgValue::Bool(*v),
            GpuArg::In(b) | GpuArg::InBytes(b) => ArgValue::Pointer(b.address()),
            GpuArg::Out(b) | GpuArg::OutBytes(b) => ArgValue::Pointer(b.address()),
        }
    }
    fn size_bytes(&self) -> usize {
        match self {
            GpuArg::I32(_) | GpuArg::I64(_) | GpuArg::F32(_) | GpuArg::Bool(_) => 0,
            GpuArg::In(b) | GpuArg::InBytes(b) => b.size_bytes(),
            GpuArg::Out(b) | GpuArg::OutBytes(b) => b.size_bytes(),
        }
    }
}

/// A kernel ready to launch (NVRTC runs at the first launch on a context, then the runtime's
/// memory and disk caches serve it).
pub struct GpuKernel {
    spec: Arc<LaunchSpec>,
    source: KernelSource,
}

/// A pointer parameter of `dtype`: typed by its host element type (sub-byte data travels as
/// bytes, see [`tilus_runtime::host_scalar`]).
fn runtime_param(name: &str, dtype: DType, mutable: bool) -> Param {
    let scalar = tilus_runtime::host_scalar(dtype);
    Param {
        name: name.to_string(),
        ty: if mutable {
            ParamType::PtrMut(scalar)
        } else {
            ParamType::Ptr(scalar)
        },
    }
}

/// How [`GpuKernel::launch_with`] (and a `#[kernel]`'s `launch_with`) launches.
#[derive(Clone, Copy, Debug, Default)]
pub struct LaunchOptions<'s> {
    /// A stream of the context (`ctx.new_stream()`), or the context's own when `None`.
    pub stream: Option<&'s Arc<CudaStream>>,
    /// Launch as a programmatic dependent of the kernel before it on the stream (sm_90): the
    /// kernel may start while that one runs (once each of its blocks has executed
    /// `launch_dependents()` or ended) and must execute `wait_prior_grid()` before it touches
    /// anything that kernel writes, or reads where this one writes. The launcher refuses a
    /// kernel without the wait; which memory the two share is the caller's contract. On a
    /// device before sm_90, or when the launch needs a fresh workspace, the launch is an
    /// ordinary one (the wait then returns at once).
    pub dependent: bool,
}

impl GpuKernel {
    /// Verify `program` for `target` and generate its CUDA; `config` labels it in caches and
    /// error messages. The launch checks that the device can run code for `target`
    /// ([`Target::for_compute_capability`] gives the best target for a device).
    pub fn from_program(
        program: &Program,
        config: &str,
        target: &Target,
    ) -> Result<GpuKernel, GpuError> {
        // Programs built at run time may not have been verified; codegen relies on it.
        tilus_core::verify::verify(program, target).map_err(|diags| GpuError::Codegen {
            program: program.name.clone(),
            message: format!(
                "the program does not verify: {}",
                diags
                    .iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })?;
        let kernel = codegen::emit(program, target).map_err(|e| GpuError::Codegen {
            program: program.name.clone(),
            message: e.message,
        })?;
        GpuKernel::new(
            &program.name,
            config,
            Arc::new(kernel.launch),
            kernel.source,
        )
    }

    /// A kernel from its launch spec and source (what `#[kernel]` embeds). The spec must list
    /// exactly the parameters of the source's entry point (checked: a launch can never push a
    /// parameter list that differs from the CUDA entry's).
    pub fn new(
        name: &str,
        config: &str,
        spec: Arc<LaunchSpec>,
        source: impl Into<Arc<str>>,
    ) -> Result<GpuKernel, GpuError> {
        let source: Arc<str> = source.into();
        match entry_param_count(&source, &spec.entry) {
            Some(n) if n == spec.params.len() => {}
            found => {
                let declared = found.map_or("no such entry".to_string(), |n| n.to_string());
                let message = format!(
                    "the launch spec lists {} parameters for entry `{}`, the source declares \
                     {declared}",
                    spec.params.len(),
                    spec.entry,
                );
                return Err(GpuError::Codegen {
                    program: name.to_string(),
                    message,
                });
            }
        }
        // The runtime checks every launch against this list, which has one entry per parameter
        // of the CUDA entry, workspaces included.
        let params: Vec<Param> = spec
            .params
            .iter()
            .map(|p| match &p.kind {
                ParamKind::I32 { .. } => Param::value::<i32>(&p.ir_name),
                ParamKind::I64 { .. } => Param::value::<i64>(&p.ir_name),
                ParamKind::F32 { .. } => Param::value::<f32>(&p.ir_name),
                ParamKind::Bool { .. } => Param::value::<i32>(&p.ir_name),
                ParamKind::Pointer { dtype, mutable, .. } => {
                    runtime_param(&p.ir_name, *dtype, *mutable)
                }
                ParamKind::Workspace { .. } => Param::ptr_mut::<u8>(&p.ir_name),
                // Encoded per launch by `launch_on`.
                ParamKind::TensorMap { .. } => Param::tensor_map(&p.ir_name),
            })
            .collect();
        let source = KernelSource::new(
            name.to_string(),
            config.to_string(),
            spec.entry.clone(),
            source,
            params,
        );
        Ok(GpuKernel { spec, source })
    }

    /// Compile (or find in the caches) and load the kernel on `ctx` now instead of at the first
    /// launch, e.g. to compile many kernels from several threads at once.
    pub fn load(&self, ctx: &Context) -> Result<(), GpuError> {
        ctx.load(&self.source)?;
        Ok(())
    }

    /// The launch metadata: parameters, grid, shared memory, assumptions, buffer views.
    pub fn spec(&self) -> &LaunchSpec {
        &self.spec
    }

    /// The CUDA source and its runtime parameter list.
    pub fn source(&self) -> &KernelSource {
        &self.source
    }

    fn arg_error(&self, message: impl Into<String>) -> GpuError {
        GpuError::Arguments {
            kernel: self.source.kernel().to_string(),
            config: self.source.config().to_string(),
            message: message.into(),
        }
    }

    /// Check `args` and launch on `ctx`'s stream. `args` holds the kernel's own parameters in
    /// order (not the hidden workspaces, which are allocated here, zeroed, per launch). A grid
    /// with a zero extent launches nothing. The launch is asynchronous: a fault inside the
    /// kernel surfaces at the next synchronizing call (`ctx.synchronize()`).
    pub fn launch(&self, ctx: &Context, args: Vec<GpuArg<'_>>) -> Result<(), GpuError> {
        self.launch_on(ctx, None, args)
    }

    /// [`GpuKernel::launch`] on `stream` (a stream of `ctx`, e.g. from `ctx.new_stream()`), or
    /// on `ctx`'s own stream when `None`.
    pub fn launch_on(
        &self,
        ctx: &Context,
        stream: Option<&Arc<CudaStream>>,
        args: Vec<GpuArg<'_>>,
    ) -> Result<(), GpuError> {
        let how = LaunchOptions {
            stream,
            dependent: false,
        };
        self.launch_with(ctx, how, args)
    }

    /// [`GpuKernel::launch`] as `how` says: on its stream, and as a programmatic dependent of
    /// the stream's prior kernel ([`LaunchOptions::dependent`]; refused for a kernel that
    /// never executes `wait_prior_grid()`).
    pub fn launch_with(
        &self,
        ctx: &Context,
        how: LaunchOptions<'_>,
        args: Vec<GpuArg<'_>>,
    ) -> Result<(), GpuError> {
        let LaunchOptions { stream, dependent } = how;
        let spec = &*self.spec;
        if dependent && !spec.waits_prior_grid {
            return Err(self.arg_error(
                "argument `dependent`: the kernel never executes `wait_prior_grid()`, so launched \
                 as a dependent it could read the prior kernel's output before that is written",
            ));
        }
        let (major, minor) = ctx.device().compute_capability;
        if !spec.arch.runs_on(major.max(0) as u32, minor.max(0) as u32) {
            return Err(self.arg_error(format!(
                "generated for {}, which device {} (compute capability {major}.{minor}) cannot run",
                spec.arch.name(),
                ctx.device().name
            )));
        }
        let own = spec.user_params().count();
        if args.len() != own {
            let names: Vec<&str> = spec.user_params().map(|p| p.ir_name.as_str()).collect();
            return Err(self.arg_error(format!(
                "takes {own} arguments ({}), {} were passed",
                names.join(", "),
                args.len()
            )));
        }
        // Arguments as the checks see them, one per entry parameter; fresh workspaces are
        // aligned and sized by us, and stand in as address 0, as do the tensor maps (encoded
        // below, once the buffers are checked).
        let mut values = Vec::with_capacity(spec.params.len());
        let mut sizes = Vec::with_capacity(spec.params.len());
        let mut supplied = args.iter();
        for p in &spec.params {
            if let ParamKind::Workspace { .. } | ParamKind::TensorMap { .. } = p.kind {
                values.push(ArgValue::Pointer(0));
                sizes.push(0);
                continue;
            }
            let a = supplied.next().expect("counted above");
            let expected = match (&p.kind, a) {
                (ParamKind::I32 { .. }, GpuArg::I32(_))
                | (ParamKind::I64 { .. }, GpuArg::I64(_))
                | (ParamKind::F32 { .. }, GpuArg::F32(_))
                | (ParamKind::Bool { .. }, GpuArg::Bool(_))
                | (ParamKind::Pointer { mutable: false, .. }, GpuArg::In(_) | GpuArg::InBytes(_))
                | (ParamKind::Pointer { .. }, GpuArg::Out(_) | GpuArg::OutBytes(_)) => None,
                (ParamKind::I32 { .. }, _) => Some("an i32 value"),
                (ParamKind::I64 { .. }, _) => Some("an i64 value"),
                (ParamKind::F32 { .. }, _) => Some("an f32 value"),
                (ParamKind::Bool { .. }, _) => Some("a bool value"),
                (ParamKind::Pointer { mutable: true, .. }, _) => Some("a writable device buffer"),
                _ => Some("a device buffer"),
            };
            if let Some(expected) = expected {
                return Err(
                    self.arg_error(format!("argument `{}`: expected {expected}", p.ir_name))
                );
            }
            values.push(a.value());
            sizes.push(a.size_bytes());
        }
        spec.check_args(&values).map_err(|m| self.arg_error(m))?;
        spec.check_buffers(&values, &sizes)
            .map_err(|m| self.arg_error(m))?;
        let grid = spec.grid_dims(&values).map_err(|m| self.arg_error(m))?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut workspaces = Vec::new();
        for bytes in spec
            .workspace_bytes(&values)
            .map_err(|m| self.arg_error(m))?
        {
            workspaces.push(DeviceBuffer::<u8>::zeros(ctx, bytes.max(1))?);
        }
        let maps = self.tensor_maps(ctx, &values, &sizes, &workspaces)?;
        let shared = u32::try_from(spec.shared_bytes)
            .map_err(|_| self.arg_error(format!("{} bytes of shared memory", spec.shared_bytes)))?;
        let loaded = ctx.load(&self.source)?;
        if loaded.registers() < spec.min_registers {
            // The roles' `setmaxnreg.inc` would wait forever for registers the block never had.
            return Err(self.arg_error(format!(
                "the compiled kernel holds {} registers per thread, but its specialize! roles \
                 re-size theirs as if it held at least {} (setmaxnreg would wait forever); \
                 lower the roles' `registers` or raise the kernel's register use",
                loaded.registers(),
                spec.min_registers
            )));
        }
        let mut builder = loaded.args();
        let mut supplied = args.into_iter();
        let zeroed_workspaces = !workspaces.is_empty();
        let mut scratch = workspaces.iter_mut();
        let mut maps = maps.into_iter();
        for p in &spec.params {
            let element = match p.kind {
                ParamKind::Pointer { dtype, .. } => tilus_runtime::host_scalar(dtype),
                _ => tilus_runtime::Scalar::U8,
            };
            builder = match p.kind {
                ParamKind::Workspace { .. } => {
                    builder.arg_mut(scratch.next().expect("one per workspace parameter"))
                }
                ParamKind::TensorMap { .. } => {
                    builder.tensor_map(maps.next().expect("one per tensor map parameter"))
                }
                _ => match supplied.next().expect("counted above") {
                    GpuArg::I32(v) => builder.value(v),
                    GpuArg::I64(v) => builder.value(v),
                    GpuArg::F32(v) => builder.value(v),
                    GpuArg::Bool(v) => builder.value(v as i32),
                    GpuArg::In(b) => builder.arg_dyn(b),
                    GpuArg::Out(b) => builder.arg_mut_dyn(b),
                    GpuArg::InBytes(b) => builder.arg_bytes_as(b, element),
                    GpuArg::OutBytes(b) => builder.arg_mut_bytes_as(b, element),
                },
            };
        }
        // A fresh workspace is zeroed on the stream: the prior kernel is not the one the
        // dependent follows then, so the launch is an ordinary one.
        let builder = builder.dependent(dependent && !zeroed_workspaces);
        let dims = LaunchDims::new(grid, [spec.block_threads, 1, 1]).with_dyn_smem(shared);
        match stream {
            Some(s) => builder.launch_on(s, dims)?,
            None => builder.launch(dims)?,
        }
        Ok(())
    }

    /// One encoded tensor map per [`ParamKind::TensorMap`] parameter, in parameter order, for
    /// the launch's `values` and buffer `sizes` (one per parameter) and its fresh `workspaces`.
    fn tensor_maps(
        &self,
        ctx: &Context,
        values: &[ArgValue],
        sizes: &[usize],
        workspaces: &[DeviceBuffer<u8>],
    ) -> Result<Vec<TensorMap>, GpuError> {
        let spec = &*self.spec;
        let workspaces: Vec<(u64, usize)> = workspaces
            .iter()
            .map(|w| (w.device_ptr(), w.len()))
            .collect();
        let mut maps = Vec::new();
        if spec
            .params
            .iter()
            .any(|p| matches!(p.kind, ParamKind::TensorMap { .. }))
        {
            // The encoding is a driver call: make the launch's context current on this thread
            // (the caller may have made the context on another).
            ctx.stream()
                .context()
                .bind_to_thread()
                .map_err(|source| RuntimeError::Driver {
                    during: "making the context current to encode tensor maps".into(),
                    source,
                })?;
        }
        for (i, p) in spec.params.iter().enumerate() {
            let ParamKind::TensorMap { param, swizzle, .. } = &p.kind else {
                continue;
            };
            let view =
                tma_view(spec, i, values, sizes, &workspaces).map_err(|m| self.arg_error(m))?;
            let map = tilus_runtime::encode_tiled(
                &spec.params[*param].ir_name,
                view.address,
                view.element_bytes,
                &view.shape,
                &view.box_shape,
                *swizzle,
            )
            .map_err(|e| match e {
                // Bad views are argument errors like the other checks here; a driver failure
                // stays a runtime error (so "no GPU" is still recognisable).
                RuntimeError::InvalidArgument { .. } => {
                    self.arg_error(format!("tensor map `{}`: {e}", p.ir_name))
                }
                e => GpuError::Runtime(e),
            })?;
            maps.push(map);
        }
        Ok(maps)
    }
}

/// What the tensor map of parameter `index` describes for one launch, in the map's elements
/// (bytes innermost, for sub-byte ones).
#[derive(Debug, PartialEq)]
struct TmaView {
    address: u64,
    element_bytes: usize,
    /// Extents, outermost first.
    shape: Vec<u64>,
    /// The box, outermost first.
    box_shape: Vec<u32>,
}

/// The buffer and extents of the tensor map parameter `index` for the launch's `values` and
/// `sizes` (one per parameter; workspaces take their (address, bytes) from `workspaces`, one per
/// workspace parameter), checking that the buffer holds the whole view: TMA reads every element
/// inside the view's extents, so a view past the buffer's end would read out of bounds. Errors
/// name the pointer argument.
fn tma_view(
    spec: &LaunchSpec,
    index: usize,
    values: &[ArgValue],
    sizes: &[usize],
    workspaces: &[(u64, usize)],
) -> Result<TmaView, String> {
    let p = &spec.params[index];
    let ParamKind::TensorMap {
        param,
        dtype,
        shape,
        box_shape,
        ..
    } = &p.kind
    else {
        return Err(format!("`{}` is not a tensor map", p.ir_name));
    };
    let source = spec.params.get(*param);
    let (name, address, bytes) = match source.map(|s| &s.kind) {
        Some(ParamKind::Pointer { .. }) => {
            let Some(ArgValue::Pointer(address)) = values.get(*param) else {
                return Err(format!("tensor map `{}`: no pointer argument", p.ir_name));
            };
            let bytes = sizes.get(*param).copied().unwrap_or(0);
            (&spec.params[*param].ir_name, *address, bytes)
        }
        Some(ParamKind::Workspace { .. }) => {
            let k = spec.params[..*param]
                .iter()
                .filter(|q| matches!(q.kind, ParamKind::Workspace { .. }))
                .count();
            let &(address, bytes) = workspaces
                .get(k)
                .ok_or_else(|| format!("tensor map `{}`: workspace {k} missing", p.ir_name))?;
            (&spec.params[*param].ir_name, address, bytes)
        }
        _ => {
            return Err(format!(
                "tensor map `{}` views parameter {param}, which is not a buffer",
                p.ir_name
            ))
        }
    };
    let bits = dtype.bits() as u64;
    if !matches!(bits, 1 | 2 | 4) && !bits.is_multiple_of(8) {
        return Err(format!(
            "`{name}` viewed as {dtype} by tensor map `{}`: TMA copies whole bytes; view \
             such codes as bytes",
            p.ir_name
        ));
    }
    // Sub-byte elements are copied as bytes: the map's innermost extent counts bytes.
    let per_byte = (8 / bits).max(1);
    let element_bytes = (bits / 8).max(1) as usize;
    let mut extents = Vec::with_capacity(shape.len());
    for (i, e) in shape.iter().enumerate() {
        let x = spec
            .eval(e, values)
            .map_err(|m| format!("`{name}` (tensor map `{}`): {m}", p.ir_name))?;
        let x = u64::try_from(x).map_err(|_| {
            format!(
                "`{name}` (tensor map `{}`): the view has a negative extent ({x})",
                p.ir_name
            )
        })?;
        if i + 1 == shape.len() && !x.is_multiple_of(per_byte) {
            return Err(format!(
                "`{name}` (tensor map `{}`): the innermost extent {x} of a {dtype} view is not \
                 whole bytes (a multiple of {per_byte})",
                p.ir_name
            ));
        }
        extents.push(if i + 1 == shape.len() {
            x / per_byte
        } else {
            x
        });
    }
    let needed = extents
        .iter()
        .try_fold(element_bytes as u64, |n, &x| n.checked_mul(x));
    if needed.is_none_or(|n| n > bytes as u64) {
        let needed = needed.map_or("more than can be addressed".into(), |n| {
            format!("{n} bytes")
        });
        return Err(format!(
            "`{name}` holds {bytes} bytes, but tensor map `{}` views it as {dtype}{extents:?}, \
             which needs {needed}",
            p.ir_name
        ));
    }
    let mut box_shape = box_shape.clone();
    if let Some(inner) = box_shape.last_mut() {
        // The verifier made the box's inner extent whole 16-byte chunks.
        *inner /= per_byte as u32;
    }
    Ok(TmaView {
        address,
        element_bytes,
        shape: extents,
        box_shape,
    })
}

/// The number of parameters of the `extern "C"` function `entry` in `source` (`None` when it is
/// not there). Generated parameter lists hold no parentheses or commas of their own.
fn entry_param_count(source: &str, entry: &str) -> Option<usize> {
    let decl = source
        .match_indices("extern \"C\"")
        .map(|(i, _)| &source[i..])
        .find_map(|rest| {
            let line = rest.lines().next()?;
            let at = line.find(&format!(" {entry}("))?;
            Some(&line[at + entry.len() + 2..])
        })?;
    let list = &decl[..decl.find(')')?];
    Some(if list.trim().is_empty() {
        0
    } else {
        list.split(',').count()
    })
}

#[cfg(test)]
mod tests {
    use super::{entry_param_count, tma_view, GpuError, GpuKernel, TmaView};
    use std::sync::Arc;
    use tilus_core::ir::ProgramBuilder;
    use tilus_core::launch::{ArgValue, KernelParam, LaunchSpec, ParamKind, TmaSwizzle};
    use tilus_core::{DType, Layout, Target};
    use tilus_runtime::ParamType;

    /// `k(m, k, a: const f16*, x: i32 scalar)` plus a hidden workspace and tensor maps of `a`
    /// as `[m, k]` f16 (`tma_a`), of the workspace (`tma_w`), of the scalar (`tma_bad`) and
    /// of `a` as u4 (`tma_u4`).
    fn tma_spec() -> LaunchSpec {
        let mut b = ProgramBuilder::new("k", 128);
        let m = b.param_i32("m");
        let k = b.param_i32("k");
        b.param_ptr("a", DType::F16, false);
        b.grid(vec![m.into()]);
        let mut spec = LaunchSpec::of_program(&b.finish());
        let map = |name: &str, param: usize, dtype: DType| KernelParam {
            name: name.into(),
            ir_name: name.into(),
            kind: ParamKind::TensorMap {
                param,
                dtype,
                shape: vec![m.into(), k.into()],
                box_shape: vec![64, 64],
                swizzle: TmaSwizzle::B128,
            },
        };
        spec.params.push(KernelParam {
            name: "ws".into(),
            ir_name: "ws".into(),
            kind: ParamKind::Workspace {
                dtype: DType::F16,
                shape: vec![m.into(), k.into()],
            },
        });
        spec.params.push(map("tma_a", 2, DType::F16));
        spec.params.push(map("tma_w", 3, DType::F16));
        spec.params.push(map("tma_bad", 0, DType::F16));
        spec.params.push(map("tma_u4", 2, DType::UInt(4)));
        spec.params.push(map("tma_u3", 2, DType::UInt(3)));
        spec
    }

    fn values(m: i32, k: i32) -> Vec<ArgValue> {
        let mut v = vec![
            ArgValue::I32(m),
            ArgValue::I32(k),
            ArgValue::Pointer(0x7000_0000),
        ];
        v.extend([ArgValue::Pointer(0); 6]);
        v
    }

    /// A tensor map describes the pointer argument's buffer at this launch's extents; a
    /// buffer smaller than the view, a negative extent, a sub-byte view of part of a byte, a
    /// view of codes the copy engine cannot move or a map of a scalar is an error naming the
    /// argument. Sub-byte views are bytes innermost.
    #[test]
    fn tensor_maps_view_checked_buffers() {
        let spec = tma_spec();
        let (m, k) = (100, 264);
        let bytes = (m * k * 2) as usize;
        let sizes = [0, 0, bytes, 0, 0, 0, 0, 0, 0];
        let ws = [(0x9000_0000, bytes)];
        let view = tma_view(&spec, 4, &values(m, k), &sizes, &ws).unwrap();
        let want = |address| TmaView {
            address,
            element_bytes: 2,
            shape: vec![m as u64, k as u64],
            box_shape: vec![64, 64],
        };
        assert_eq!(view, want(0x7000_0000));
        let view = tma_view(&spec, 5, &values(m, k), &sizes, &ws).unwrap();
        assert_eq!(view, want(0x9000_0000));

        let small = [0, 0, bytes - 1, 0, 0, 0, 0, 0, 0];
        let e = tma_view(&spec, 4, &values(m, k), &small, &ws).unwrap_err();
        assert!(
            e.contains(&format!("`a` holds {} bytes", bytes - 1))
                && e.contains(&format!("needs {bytes} bytes")),
            "{e}"
        );
        let e = tma_view(&spec, 5, &values(m, k), &sizes, &[(0x9000_0000, 8)]).unwrap_err();
        assert!(e.contains("`ws` holds 8 bytes"), "{e}");
        let e = tma_view(&spec, 4, &values(m, -3), &sizes, &ws).unwrap_err();
        assert!(
            e.contains("`a`") && e.contains("negative extent (-3)"),
            "{e}"
        );
        let e = tma_view(&spec, 6, &values(m, k), &sizes, &ws).unwrap_err();
        assert!(e.contains("tma_bad") && e.contains("not a buffer"), "{e}");
        // Two 4-bit codes a byte: the map is [m, k / 2] bytes in boxes of [64, 32].
        let view = tma_view(&spec, 7, &values(m, k), &sizes, &ws).unwrap();
        let bytes_view = TmaView {
            address: 0x7000_0000,
            element_bytes: 1,
            shape: vec![m as u64, k as u64 / 2],
            box_shape: vec![64, 32],
        };
        assert_eq!(view, bytes_view);
        let e = tma_view(&spec, 7, &values(m, k - 1), &sizes, &ws).unwrap_err();
        assert!(
            e.contains("`a`") && e.contains("innermost extent 263") && e.contains("whole bytes"),
            "{e}"
        );
        let e = tma_view(&spec, 8, &values(m, k), &sizes, &ws).unwrap_err();
        assert!(
            e.contains("`a` viewed as u3") && e.contains("whole bytes"),
            "{e}"
        );
    }

    /// The runtime's parameter list passes tensor maps by value, in the entry's order.
    #[test]
    fn tensor_map_parameters_are_passed_by_value() {
        let mut spec = tma_spec();
        spec.params.truncate(5);
        spec.entry = "k".into();
        let src = "extern \"C\" __global__ void k(int m, int k, const uint8_t* a, uint8_t* ws, \
                   const __grid_constant__ tilus_tensor_map tma_a) {}";
        let kernel = GpuKernel::new("k", "", Arc::new(spec), src).unwrap();
        let types: Vec<ParamType> = kernel.source().params().iter().map(|p| p.ty).collect();
        assert_eq!(types.len(), 5);
        assert_eq!(types[4], ParamType::TensorMap);
        assert_eq!(kernel.source().params()[4].name, "tma_a");
    }

    /// A program built at run time is verified before code generation: a bad one is an error,
    /// not a panic in the generator (no GPU needed: nothing is compiled or launched).
    #[test]
    fn unverified_programs_are_errors() {
        let mut b = ProgramBuilder::new("k", 32);
        let n = b.param_i32("n");
        let x = b.param_ptr("x", DType::Int(1), false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, DType::Int(1), vec![n.into()]);
        b.load_global("r", gx, Layout::spatial(&[64]), vec![0.into()]);
        let err = GpuKernel::from_program(&b.finish(), "", &Target::SM80)
            .err()
            .expect("rejected");
        assert!(
            matches!(&err, GpuError::Codegen { message, .. } if message.contains("does not verify")),
            "{err}"
        );
    }

    #[test]
    fn counts_the_entry_parameters() {
        let src = "__device__ int f(int a, int b) { return a; }\n\
                   extern \"C\" __global__ void __launch_bounds__(128, 1) k(int m, const uint8_t* __restrict__ a, uint8_t* __restrict__ w) {\n}\n";
        assert_eq!(entry_param_count(src, "k"), Some(3));
        assert_eq!(entry_param_count(src, "f"), None);
        assert_eq!(
            entry_param_count("extern \"C\" __global__ void e() {}", "e"),
            Some(0)
        );
    }
}
