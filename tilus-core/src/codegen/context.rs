//! The emitters' shared state: the program, names, scalar facts, layouts, global and shared
//! tensors, assumptions, and the output writer. Every instruction family (`emitters/`) works on
//! a [`Ctx`]; the driver (`program.rs`) walks the statements and dispatches. This module calls
//! no emitter, so the families and the driver depend on it and never the other way round.

use super::expr::{c_expr, c_float_expr, involves_f32, is_f32, Divisible, ScalarFacts};
use super::names::Namer;
use super::prelude::Features;
use super::regmap::LayoutMap;
use super::smem::SharedPlan;
use super::writer::Writer;
use super::{Assumption, CodegenError, KernelParam};
use crate::ir::{Expr, Program, ScalarType, SpanId, ValueRanges, VarId, VarType};
use crate::layout::{Layout, SharedLayout};
use crate::target::Target;
use crate::DType;
use std::collections::{BTreeMap, HashMap};

/// A register layout used by the kernel: its affine form and the names of its thread parts.
pub(crate) struct LayoutInfo {
    pub(crate) map: LayoutMap,
    /// Per dimension: the `const int` holding `A(tid)[d]`, or `"0"`.
    pub(crate) dims: Vec<String>,
}

/// A global tensor (a view of a pointer parameter, or a workspace).
#[derive(Clone)]
pub(crate) struct GlobalInfo {
    pub(crate) dtype: DType,
    /// The `uint8_t*` the view reads through.
    pub(crate) ptr: String,
    /// IR name of the pointer parameter (for alignment assumptions); `None` for workspaces,
    /// which the runtime allocates itself.
    pub(crate) ptr_param: Option<String>,
    /// `int` extents and row strides (`strides[last] == "1"`; the launcher checks that the
    /// strides fit).
    pub(crate) dims: Vec<String>,
    pub(crate) strides: Vec<String>,
    pub(crate) shape: Vec<Expr>,
}

/// A shared tensor: an allocation or a slice of one.
#[derive(Clone)]
pub(crate) struct SharedInfo {
    pub(crate) dtype: DType,
    pub(crate) root_layout: SharedLayout,
    /// Byte offset of the root allocation in the dynamic shared buffer.
    pub(crate) root_offset: usize,
    /// Index (in root coordinates) of this tensor's first element.
    pub(crate) origin: Vec<Expr>,
    /// This tensor's shape (it covers the trailing `shape.len()` dims of the root).
    pub(crate) shape: Vec<usize>,
}

/// Emitter state.
pub(crate) struct Ctx<'p> {
    pub(crate) p: &'p Program,
    /// What instruction selection may use.
    pub(crate) target: Target,
    pub(crate) namer: Namer,
    pub(super) names: Vec<String>,
    pub(crate) facts: ScalarFacts,
    /// The integer variables' value ranges (bounds checks they prove are not emitted).
    pub(crate) ranges: ValueRanges,
    pub(crate) block_threads: usize,
    pub(super) layout_ids: HashMap<Layout, usize>,
    pub(crate) layouts: Vec<LayoutInfo>,
    /// `(name, line)`: thread parts of layouts, declared only when the body uses `name`.
    pub(super) layout_decls: Vec<(String, String)>,
    pub(crate) assumptions: Vec<Assumption>,
    pub(crate) plan: SharedPlan,
    pub(crate) globals: HashMap<VarId, GlobalInfo>,
    pub(crate) shared: HashMap<VarId, SharedInfo>,
    pub(crate) features: Features,
    /// Device functions of vectorized casts, by name.
    pub(crate) cast_fns: BTreeMap<String, String>,
    pub(crate) w: Writer,
    pub(crate) span: SpanId,
    pub(super) workspaces: Vec<KernelParam>,
    /// Hidden tensor-map parameters of the `tma_load`s, after the workspaces.
    pub(crate) tensor_maps: Vec<KernelParam>,
    /// The program has a `dot` with shared operands (wgmma): barriers carry the async-proxy
    /// fence (`emitters::wgmma`).
    pub(crate) uses_wgmma: bool,
    /// The barriers that need no async-proxy fence although `uses_wgmma` (`super::proxy`).
    pub(crate) unfenced_barriers: std::collections::HashSet<*const crate::ir::Instruction>,
    /// The program has a `tma_store`: thread 0 waits for its reads before the kernel ends.
    pub(crate) uses_tma_store: bool,
    /// The accumulators `dot_async` writes: a `dot_wait` fences their registers.
    pub(crate) async_accumulators: Vec<VarId>,
    /// The register tensors that are a fresh zero tile (`emitters::wgmma::zero_registers`).
    pub(crate) zero_registers: std::collections::HashSet<VarId>,
    /// Inside a role of a `specialize!` region: its named barrier and thread count.
    pub(crate) role: Option<(u32, usize)>,
    /// Remarks on slow lowerings ([`super::CudaKernel::notes`]).
    pub(crate) notes: Vec<super::CodegenNote>,
}

/// The name of the thread index in generated code.
pub(crate) const TID: &str = "tid";
/// The dynamic shared buffer.
pub(crate) const SMEM: &str = "tilus_smem";

impl<'p> Ctx<'p> {
    /// The statement that synchronizes the block's threads (a role's, inside a `specialize!`
    /// region: its named barrier, since the other roles never reach it).
    pub(crate) fn block_barrier(&self) -> String {
        match self.role {
            None => "__syncthreads();".to_string(),
            Some((id, threads)) => {
                format!("asm volatile(\"bar.sync {id}, {threads};\\n\" ::: \"memory\");")
            }
        }
    }

    pub(crate) fn err(&self, message: impl Into<String>) -> CodegenError {
        CodegenError::new(self.span, message)
    }

    /// Record a remark on the current instruction's generated code.
    pub(crate) fn note(&mut self, message: impl Into<String>) {
        self.notes.push(super::CodegenNote {
            span: self.span,
            message: message.into(),
        });
    }

    /// The C identifier of variable `v`.
    pub(crate) fn name(&self, v: VarId) -> String {
        self.names
            .get(v.0 as usize)
            .cloned()
            .unwrap_or_else(|| format!("undefined_{}", v.0))
    }

    /// The IR name of `v` (for comments and messages).
    pub(crate) fn ir_name(&self, v: VarId) -> String {
        self.p.var_name(v)
    }

    pub(crate) fn fresh(&mut self, base: &str) -> String {
        self.namer.fresh(base)
    }

    /// A scalar expression as C.
    pub(crate) fn expr(&self, e: &Expr) -> String {
        let is_f32 = |v: VarId| matches!(self.p.ty(v), VarType::Scalar(ScalarType::F32));
        let is_i64 = |v: VarId| matches!(self.p.ty(v), VarType::Scalar(ScalarType::I64));
        // `i32` operands mixed with `i64` ones get explicit `(long long)` casts.
        let wide;
        let e = if e.involves_i64(&|v| self.scalar_ty(v)) {
            wide = e.with_explicit_widening(&|v| self.scalar_ty(v));
            &wide
        } else {
            e
        };
        if involves_f32(e, &is_f32) {
            c_float_expr(e, &|v| self.name(v), &is_f32, &is_i64)
        } else {
            c_expr(e, &|v| self.name(v))
        }
    }

    /// The scalar type of variable `v`, if it is a scalar.
    fn scalar_ty(&self, v: VarId) -> Option<ScalarType> {
        match self.p.ty(v) {
            VarType::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    /// Whether scalar expression `e` has type `i64` (its C type is `long long`).
    pub(crate) fn is_i64(&self, e: &Expr) -> bool {
        e.scalar_type(&|v| self.scalar_ty(v)) == Some(ScalarType::I64)
    }

    /// Whether scalar expression `e` has type `f32` (else `i32`).
    pub(crate) fn is_f32(&self, e: &Expr) -> bool {
        is_f32(e, &|v| {
            matches!(self.p.ty(v), VarType::Scalar(ScalarType::F32))
        })
    }

    /// The dtype and layout of register tensor `v`.
    pub(crate) fn reg(&self, v: VarId) -> Result<(DType, Layout), CodegenError> {
        match self.p.ty(v) {
            VarType::Register(r) => Ok((r.dtype, r.layout.clone())),
            other => Err(self.err(format!(
                "{} must be a register tensor, but it is {}",
                self.ir_name(v),
                other.describe()
            ))),
        }
    }

    /// Register `layout` (computing its thread parts at kernel entry); returns its id.
    pub(crate) fn layout(&mut self, layout: &Layout) -> Result<usize, CodegenError> {
        if let Some(&id) = self.layout_ids.get(layout) {
            return Ok(id);
        }
        let map = LayoutMap::analyze(layout).map_err(|e| self.err(e))?;
        if !self.block_threads.is_multiple_of(map.threads) && map.threads < self.block_threads {
            return Err(self.err(format!(
                "a layout of {} threads does not divide the block's {}",
                map.threads, self.block_threads
            )));
        }
        let id = self.layouts.len();
        let mut dims = Vec::new();
        let text = layout.to_expr();
        for d in 0..map.rank() {
            let e = map.thread_expr(d, TID, self.block_threads);
            if e == "0" {
                dims.push("0".to_string());
                continue;
            }
            let n = self.namer.fresh(&format!("lay{id}_d{d}"));
            self.layout_decls.push((
                n.clone(),
                format!("const int {n} = {e};  // {text}: index {d} of a thread's local 0"),
            ));
            dims.push(n);
        }
        self.layouts.push(LayoutInfo { map, dims });
        self.layout_ids.insert(layout.clone(), id);
        Ok(id)
    }

    /// Record the launch conditions a divisibility proof relies on.
    pub(crate) fn assume(&mut self, d: &Divisible) {
        if let Divisible::If(conds) = d {
            for (e, k) in conds {
                let text = c_expr(e, &|v| self.ir_name(v));
                let a = Assumption::Divisible {
                    expr: e.clone(),
                    text,
                    divisor: *k,
                };
                if !self.assumptions.contains(&a) {
                    self.assumptions.push(a);
                }
            }
        }
    }

    /// Record that pointer parameter `param` must be aligned to `bytes`.
    pub(crate) fn assume_aligned(&mut self, param: &Option<String>, bytes: u32) {
        let Some(param) = param else { return };
        if bytes <= 1 {
            return;
        }
        // Keep the strongest requirement per pointer.
        for a in &mut self.assumptions {
            if let Assumption::Aligned { param: p, bytes: b } = a {
                if p == param {
                    *b = (*b).max(bytes);
                    return;
                }
            }
        }
        self.assumptions.push(Assumption::Aligned {
            param: param.clone(),
            bytes,
        });
    }

    pub(crate) fn global(&self, v: VarId) -> Result<GlobalInfo, CodegenError> {
        self.globals.get(&v).cloned().ok_or_else(|| {
            self.err(format!(
                "{} must be a global tensor defined before this instruction",
                self.ir_name(v)
            ))
        })
    }

    pub(crate) fn shared_info(&self, v: VarId) -> Result<SharedInfo, CodegenError> {
        self.shared.get(&v).cloned().ok_or_else(|| {
            self.err(format!(
                "{} must be a shared tensor defined before this instruction",
                self.ir_name(v)
            ))
        })
    }
}
