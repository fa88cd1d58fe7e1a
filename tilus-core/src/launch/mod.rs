//! What launching a generated kernel takes, as data: the [`LaunchSpec`].
//!
//! Code generation produces one per kernel; `#[kernel]` embeds it per configuration; the one
//! launcher in the facade (`tilus::gpu`) consumes it. It holds the entry point's parameters in
//! call order (the program's own, then one hidden pointer per `AllocateGlobal` workspace), the
//! grid, the block size, the dynamic shared memory, the [`Assumption`]s the generated code relies
//! on, and the global views of the parameter buffers. From these the launcher checks every
//! argument *before* the launch, so a bad argument is an error naming it, never a fault that
//! poisons the CUDA context.
//!
//! Everything here is evaluated with the IR's one checked evaluator ([`Expr::eval`]).

mod assume;

pub use assume::{ArgValue, Assumption};

use crate::ir::{Expr, GridDependency, Instruction, Program, ScalarType, VarId, VarType};
use crate::storage;
use crate::target::{Arch, Target};
use crate::DType;

/// One parameter of the generated entry function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelParam {
    /// Name in the generated source (the IR name, sanitized).
    pub name: String,
    /// Name of the IR variable (for error messages that name the argument).
    pub ir_name: String,
    pub kind: ParamKind,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ParamKind {
    /// An `int` argument: the program's scalar parameter `var`.
    I32 { var: VarId },
    /// A `float` argument: the program's scalar parameter `var`.
    F32 { var: VarId },
    /// A `long long` argument (8 bytes): the program's scalar parameter `var`.
    I64 { var: VarId },
    /// A `bool` argument, passed as an `int` 0 or 1: the program's scalar parameter `var`.
    Bool { var: VarId },
    /// A device pointer (`const uint8_t*` or `uint8_t*` in the source): the program's pointer
    /// parameter `var`.
    Pointer {
        var: VarId,
        dtype: DType,
        mutable: bool,
    },
    /// A hidden pointer to a zero-initialised scratch buffer for an `AllocateGlobal`, one per
    /// launch, of `packed_len(dtype, product(shape))` bytes; `shape` is over scalar parameters.
    Workspace { dtype: DType, shape: Vec<Expr> },
    /// A hidden CUDA tensor map (`CUtensorMap`, 128 bytes, passed by value as a
    /// `__grid_constant__`) that the launcher encodes for a `tma_load` or `tma_store`: the buffer passed for
    /// pointer parameter `param` (an index into [`LaunchSpec::params`]) viewed row-major as
    /// `dtype` with `shape` (extents over the scalar parameters, outermost first), copied in
    /// boxes of `box_shape` elements (outermost first) laid out in shared memory with `swizzle`.
    /// Elements outside the view read as zero, and are not written.
    TensorMap {
        param: usize,
        dtype: DType,
        shape: Vec<Expr>,
        box_shape: Vec<u32>,
        swizzle: TmaSwizzle,
    },
}

/// How a tensor-map copy lays a box out in shared memory: row-major, and with a swizzle the
/// 16-byte chunks of each row of `span` bytes exchanged by XOR with the row index modulo
/// `span / 16` (the box's inner extent is then exactly `span` bytes). The same patterns as
/// the VM's `swizzle(b, log2(16 / element bytes), 3)` with `b` = 1, 2, 3 on a tensor placed on
/// a multiple of `span * 8` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TmaSwizzle {
    /// The swizzle span in bytes (0 without one).
    pub fn span(self) -> usize {
        match self {
            TmaSwizzle::None => 0,
            TmaSwizzle::B32 => 32,
            TmaSwizzle::B64 => 64,
            TmaSwizzle::B128 => 128,
        }
    }
}

impl ParamKind {
    /// Whether the caller passes this parameter (the launcher makes workspaces and tensor maps).
    pub fn is_user(&self) -> bool {
        !matches!(
            self,
            ParamKind::Workspace { .. } | ParamKind::TensorMap { .. }
        )
    }
}

/// A global view of a pointer parameter whose extents depend only on scalar parameters: the
/// buffer passed for it must hold at least `product(shape)` elements of `dtype`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BufferView {
    /// Index into [`LaunchSpec::params`] of the pointer parameter.
    pub param: usize,
    pub dtype: DType,
    pub shape: Vec<Expr>,
}

/// Everything a launcher needs besides the CUDA source.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LaunchSpec {
    /// The architecture the code was generated for; the launcher refuses a device that cannot
    /// run it.
    pub arch: Arch,
    /// Name of the `extern "C" __global__` function.
    pub entry: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory, in bytes (the launcher must raise the function's dynamic shared
    /// memory limit when this exceeds 48 KiB).
    pub shared_bytes: usize,
    /// The kernel's parameters in call order, workspaces included.
    pub params: Vec<KernelParam>,
    /// Grid extents (1 to 3; launched as x, y, z), over the program's scalar parameters.
    pub grid: Vec<Expr>,
    /// Conditions on the arguments that the generated code relies on.
    pub assumptions: Vec<Assumption>,
    /// Sizes the parameter buffers must have.
    pub views: Vec<BufferView>,
    /// Whether the program executes `wait_prior_grid()`: only such a kernel may be launched as a
    /// programmatic dependent of the kernel before it (launched otherwise, the wait is a no-op).
    pub waits_prior_grid: bool,
    /// Registers per thread the compiled kernel must hold for its `specialize!` roles to
    /// re-size theirs (`setmaxnreg`; 0 without): an `.inc` waits for registers the other
    /// roles' `.dec` return to the block's pool, so with fewer it would wait forever. The
    /// launcher refuses the kernel then ([`min_registers`]).
    pub min_registers: u32,
}

impl LaunchSpec {
    /// The spec of `program` as the interpreter runs it: its own parameters, grid, block size
    /// and buffer views; no source, entry, assumptions or workspaces (the interpreter allocates
    /// those itself and needs no vector-access assumptions).
    pub fn of_program(program: &Program) -> LaunchSpec {
        let params: Vec<KernelParam> = program
            .params
            .iter()
            .map(|p| {
                let var = program.var(p.var);
                let kind = match &var.ty {
                    VarType::Pointer { dtype, mutable } => ParamKind::Pointer {
                        var: p.var,
                        dtype: *dtype,
                        mutable: *mutable,
                    },
                    VarType::Scalar(ScalarType::F32) => ParamKind::F32 { var: p.var },
                    VarType::Scalar(ScalarType::Bool) => ParamKind::Bool { var: p.var },
                    VarType::Scalar(ScalarType::I64) => ParamKind::I64 { var: p.var },
                    _ => ParamKind::I32 { var: p.var },
                };
                KernelParam {
                    name: var.name.clone(),
                    ir_name: var.name.clone(),
                    kind,
                }
            })
            .collect();
        let views = buffer_views(program, &|v| program.params.iter().position(|p| p.var == v));
        LaunchSpec {
            arch: Target::default().arch,
            entry: program.name.clone(),
            block_threads: program.num_threads,
            shared_bytes: 0,
            params,
            grid: program.grid.clone(),
            assumptions: Vec::new(),
            views,
            waits_prior_grid: waits_prior_grid(program),
            min_registers: 0,
        }
    }

    /// The index of the parameter that carries program variable `var`.
    pub fn param_index(&self, var: VarId) -> Option<usize> {
        self.params.iter().position(|p| match p.kind {
            ParamKind::I32 { var: v }
            | ParamKind::I64 { var: v }
            | ParamKind::F32 { var: v }
            | ParamKind::Bool { var: v }
            | ParamKind::Pointer { var: v, .. } => v == var,
            ParamKind::Workspace { .. } | ParamKind::TensorMap { .. } => false,
        })
    }

    /// The parameters the caller supplies (all but the hidden workspaces and tensor maps), in
    /// call order.
    pub fn user_params(&self) -> impl Iterator<Item = &KernelParam> {
        self.params.iter().filter(|p| p.kind.is_user())
    }

    /// Check every assumption against the launch arguments (one per entry of
    /// [`LaunchSpec::params`], in order). The error names the argument.
    pub fn check_args(&self, args: &[ArgValue]) -> Result<(), String> {
        if args.len() != self.params.len() {
            return Err(format!(
                "kernel {} takes {} arguments, got {}",
                self.entry,
                self.params.len(),
                args.len()
            ));
        }
        for a in &self.assumptions {
            a.check(self, args)?;
        }
        Ok(())
    }

    /// Check that each buffer holds its views: `sizes[i]` is the size in bytes of the buffer
    /// passed for parameter `i` (ignored for scalars and workspaces).
    pub fn check_buffers(&self, args: &[ArgValue], sizes: &[usize]) -> Result<(), String> {
        for v in &self.views {
            let (Some(p), Some(&bytes)) = (self.params.get(v.param), sizes.get(v.param)) else {
                return Err(format!(
                    "kernel {}: a buffer view names parameter {} of {}",
                    self.entry,
                    v.param,
                    self.params.len()
                ));
            };
            let extents = v
                .shape
                .iter()
                .map(|e| self.eval(e, args))
                .collect::<Result<Vec<i32>, String>>()
                .map_err(|m| format!("a view of `{}`: {m}", p.ir_name))?;
            // The generated code keeps row strides in `int` (a 64-bit stride turns every
            // address's 32x32-bit multiply into a 64-bit one, 3% of the i4 matmul): a stride
            // past i32 would overflow, so such a view is refused here. Offsets themselves are
            // 64-bit, so a rank-2 view may still exceed 2^31 elements.
            let mut stride: i64 = 1;
            for d in (1..extents.len()).rev() {
                stride = stride.saturating_mul(i64::from(extents[d].max(0)));
                if stride > i64::from(i32::MAX) {
                    return Err(format!(
                        "a view of `{}` as {}{extents:?}: the stride of dimension {} is {stride} \
                         elements, more than an i32; merge its trailing dimensions or split the \
                         tensor (rank-2 views may exceed 2^31 elements)",
                        p.ir_name,
                        v.dtype,
                        d - 1
                    ));
                }
            }
            let mut needed = view_bytes(v.dtype, &extents);
            // Sub-byte stores update whole 32-bit words atomically (other threads may write
            // the neighbouring bits of a word at the same time), so a writable sub-byte view
            // needs its bytes rounded up to a whole word.
            let writable = matches!(p.kind, ParamKind::Pointer { mutable: true, .. });
            if writable && v.dtype.bits() < 8 {
                needed = needed.and_then(|n| n.checked_next_multiple_of(4));
            }
            if needed.is_none_or(|needed| needed > bytes) {
                let needed = needed.map_or("more than can be addressed".into(), |n| {
                    format!("{n} bytes")
                });
                let words = if writable && v.dtype.bits() < 8 {
                    " (rounded up to whole 32-bit words: sub-byte stores update words atomically)"
                } else {
                    ""
                };
                return Err(format!(
                    "`{}` holds {bytes} bytes, but the kernel views it as {}{extents:?}, which \
                     needs {needed}{words}",
                    p.ir_name, v.dtype
                ));
            }
        }
        Ok(())
    }

    /// Bytes of each workspace parameter (in parameter order) for the given arguments.
    pub fn workspace_bytes(&self, args: &[ArgValue]) -> Result<Vec<usize>, String> {
        let mut out = Vec::new();
        for p in &self.params {
            if let ParamKind::Workspace { dtype, shape } = &p.kind {
                let extents = shape
                    .iter()
                    .map(|e| self.eval(e, args))
                    .collect::<Result<Vec<i32>, String>>()
                    .map_err(|m| format!("workspace `{}`: {m}", p.ir_name))?;
                if let Some(x) = extents.iter().find(|&&x| x < 0) {
                    return Err(format!(
                        "workspace `{}` has a negative extent ({x}) in {extents:?}",
                        p.ir_name
                    ));
                }
                let bytes = view_bytes(*dtype, &extents).ok_or_else(|| {
                    format!(
                        "workspace `{}` of {dtype}{extents:?} is too large",
                        p.ir_name
                    )
                })?;
                out.push(bytes);
            }
        }
        Ok(out)
    }

    /// Evaluate an expression over the scalar parameters (a workspace extent, a grid extent)
    /// for the given arguments; overflow and division by zero are errors.
    pub fn eval(&self, e: &Expr, args: &[ArgValue]) -> Result<i32, String> {
        assume::eval_param_expr(self, e, args)
    }

    /// Evaluate the grid for the given arguments: `[x, y, z]`.
    pub fn grid_dims(&self, args: &[ArgValue]) -> Result<[u32; 3], String> {
        let mut dims = [1u32; 3];
        for (d, e) in self.grid.iter().enumerate().take(3) {
            let v = self.eval(e, args)?;
            if v < 0 {
                return Err(format!("grid extent {d} is negative ({v})"));
            }
            dims[d] = v as u32;
        }
        Ok(dims)
    }
}

/// Bytes of `product(extents)` packed elements of `dtype` (a negative extent counts as empty);
/// `None` when that is not addressable (no buffer can hold it).
fn view_bytes(dtype: DType, extents: &[i32]) -> Option<usize> {
    let numel = extents
        .iter()
        .try_fold(1usize, |n, &x| n.checked_mul(x.max(0) as usize))?;
    storage::try_packed_len(dtype, numel).ok()
}

/// The registers per thread a kernel compiled from `program` must hold for its roles'
/// `setmaxnreg` ([`LaunchSpec::min_registers`]): the roles that set a count take their
/// registers from the block's pool of `threads x R`, so `R` must be at least their
/// thread-weighted average, and at least every count a role lowers to (`.dec` below the
/// current count); 0 when no role sets one.
pub fn min_registers(program: &Program) -> u32 {
    let cap =
        crate::verify::specialize::kernel_register_cap(program.num_threads, program.blocks_per_sm);
    let mut need = 0u64;
    for s in &program.body {
        let crate::ir::StmtKind::Specialize { roles } = &s.kind else {
            continue;
        };
        let (mut threads, mut regs) = (0u64, 0u64);
        for r in roles {
            if let Some(n) = r.registers {
                let t = r.warps as u64 * 32;
                threads += t;
                regs += t * n as u64;
                if n < cap {
                    need = need.max(n as u64);
                }
            }
        }
        if threads > 0 {
            need = need.max(regs.div_ceil(threads));
        }
    }
    need as u32
}

/// Whether `program` executes `wait_prior_grid()` anywhere ([`LaunchSpec::waits_prior_grid`]).
pub fn waits_prior_grid(program: &Program) -> bool {
    let mut waits = false;
    program.visit_instructions(&mut |i| {
        waits |= matches!(i, Instruction::GridDependency(GridDependency::Wait));
    });
    waits
}

/// The global views of `program`'s pointer parameters whose extents read only scalar
/// parameters (those a launcher can check before the launch). `param_of` maps a parameter
/// variable to its index in the launch's parameter list.
pub fn buffer_views(
    program: &Program,
    param_of: &dyn Fn(VarId) -> Option<usize>,
) -> Vec<BufferView> {
    let is_scalar_param = |v: VarId| {
        program.params.iter().any(|p| p.var == v) && matches!(program.ty(v), VarType::Scalar(_))
    };
    let mut out: Vec<BufferView> = Vec::new();
    program.visit_instructions(&mut |i| {
        let Instruction::ViewGlobal {
            ptr, dtype, shape, ..
        } = i
        else {
            return;
        };
        let Some(param) = param_of(*ptr) else { return };
        let mut known = true;
        for e in shape {
            e.visit_vars(&mut |v| known &= is_scalar_param(v));
        }
        let view = BufferView {
            param,
            dtype: *dtype,
            shape: shape.clone(),
        };
        if known && !out.contains(&view) {
            out.push(view);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ProgramBuilder;
    use crate::Layout;

    /// A u4 view of `[n, n]` needs `n * n / 2` bytes, also for the largest `n`; the grid reads
    /// the same arguments.
    #[test]
    fn buffers_are_checked_against_their_packed_views() {
        let mut b = ProgramBuilder::new("k", 32);
        let n = b.param_i32("n");
        let x = b.param_ptr("x", DType::UInt(4), false);
        b.grid(vec![n.into()]);
        let gx = b.view_global("gx", x, DType::UInt(4), vec![n.into(), n.into()]);
        b.load_global("r", gx, Layout::spatial(&[32]), vec![0.into(), 0.into()]);
        let spec = LaunchSpec::of_program(&b.finish());
        let args = [ArgValue::I32(64), ArgValue::Pointer(0)];
        assert!(spec.check_buffers(&args, &[0, 2048]).is_ok());
        let e = spec.check_buffers(&args, &[0, 2047]).unwrap_err();
        assert!(
            e.contains("`x` holds 2047 bytes") && e.contains("needs 2048 bytes"),
            "{e}"
        );
        assert_eq!(spec.grid_dims(&args), Ok([64, 1, 1]));
        let huge = [ArgValue::I32(i32::MAX), ArgValue::Pointer(0)];
        let e = spec.check_buffers(&huge, &[0, 1 << 20]).unwrap_err();
        assert!(e.contains("needs 2305843007066210305 bytes"), "{e}");
    }

    /// A view's row strides must fit an i32 (the generated code keeps them in `int`); rank-2
    /// views may exceed 2^31 elements, since their one stride is an extent.
    #[test]
    fn strides_past_i32_are_refused_naming_the_buffer() {
        let mut b = ProgramBuilder::new("k", 32);
        let (p, q, r) = (b.param_i32("p"), b.param_i32("q"), b.param_i32("r"));
        let x = b.param_ptr("x", DType::UInt(8), false);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, DType::UInt(8), vec![p.into(), q.into(), r.into()]);
        b.load_global(
            "t",
            gx,
            Layout::spatial(&[32]),
            vec![0.into(), 0.into(), 0.into()],
        );
        let spec = LaunchSpec::of_program(&b.finish());
        let args = |a: i32, b: i32, c: i32| {
            [
                ArgValue::I32(a),
                ArgValue::I32(b),
                ArgValue::I32(c),
                ArgValue::Pointer(0),
            ]
        };
        let four_gib = [0, 0, 0, 1usize << 32];
        assert!(spec
            .check_buffers(&args(65536, 1, 65536), &four_gib)
            .is_ok());
        let e = spec
            .check_buffers(&args(2, 32768, 65536), &four_gib)
            .unwrap_err();
        assert!(
            e.contains("`x`") && e.contains("2147483648 elements, more than an i32"),
            "{e}"
        );
        assert!(spec
            .check_buffers(&args(2, 32767, 65536), &four_gib)
            .is_ok());
    }

    /// A writable sub-byte view needs whole 32-bit words (its stores are word atomics); a
    /// read-only one needs only its packed bytes.
    #[test]
    fn writable_sub_byte_views_need_whole_words() {
        let mut b = ProgramBuilder::new("k", 32);
        let x = b.param_ptr("x", DType::UInt(1), false);
        let y = b.param_ptr("y", DType::UInt(1), true);
        b.grid(vec![1.into()]);
        let gx = b.view_global("gx", x, DType::UInt(1), vec![8.into()]);
        let gy = b.view_global("gy", y, DType::UInt(1), vec![8.into()]);
        let r = b.load_global("r", gx, Layout::spatial(&[8]), vec![0.into()]);
        b.store_global(r, gy, vec![0.into()]);
        let spec = LaunchSpec::of_program(&b.finish());
        let args = [ArgValue::Pointer(0), ArgValue::Pointer(0)];
        assert!(spec.check_buffers(&args, &[1, 4]).is_ok());
        let e = spec.check_buffers(&args, &[1, 1]).unwrap_err();
        assert!(
            e.contains("`y` holds 1 bytes")
                && e.contains("needs 4 bytes (rounded up to whole 32-bit words"),
            "{e}"
        );
    }
}
