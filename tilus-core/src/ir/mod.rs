//! The thread-block-level program representation (paper section 5, Table 1).
//!
//! A [`Program`] is what one thread block executes: scalar code that is uniform across the block
//! (indices, loop counters, conditions) plus *instructions* over tensors that live in one of three
//! memory scopes: global, shared and registers. Every variable has one [`VarType`]; instructions
//! name their operands by [`VarId`]. An instruction may write a variable that already exists (the
//! accumulator of a loop, `acc = dot(a, b, acc)`) when the new value has the same type.
//!
//! Conventions every consumer (verifier, interpreter, codegen) shares:
//! - Scalars are `i32`, `f32` or `bool` (conditions); arithmetic that overflows `i32` is an
//!   error. Division and remainder truncate toward zero, as in C. `f32` arithmetic is IEEE
//!   (round to nearest even); a NaN result is an error.
//! - A register tile of rank `r` read from or written to a tensor of rank `R >= r` covers the
//!   trailing `r` dimensions; the offset has rank `R` and gives the tile's first element.
//! - Global loads and stores, and `CopyAsync`, are *masked by the view*: elements whose index
//!   falls outside the view's shape are read as zero and never written. Touching bytes outside the
//!   underlying buffer is an error, never undefined behaviour.
//! - Register storage is raw bits: thread `t` holds locals `0..L` of a `b`-bit type packed with no
//!   gaps in the compact-storage bit order (`crate::storage`). `View` reinterprets these bits.
//! - A register layout with fewer threads than the block is replicated: block thread `t` plays
//!   layout thread `t % layout.num_threads()`.

mod addressing;
mod builder;
mod display;
mod eval;
mod infer;
mod math;
mod names;
mod ranges;
mod reduce;
pub mod syntax;
mod wide;

pub use addressing::{
    gather_rows_layout, gather_rows_width, lookup_layout, warp_table, AtomicOp, WarpTable,
};
pub use builder::ProgramBuilder;
pub use eval::{EvalError, ScalarValue};
pub use ranges::{value_ranges, Range, ValueRanges};
pub(crate) use reduce::reduce_type;

use crate::layout::{Layout, SharedLayout};
use crate::DType;

/// Index of a variable in [`Program::vars`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct VarId(pub u32);

/// An opaque source location. The `#[kernel]` macro maps these back to the user's tokens; the
/// builder API hands them out in order (see [`ProgramBuilder::set_span`]).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SpanId(pub u32);

/// Types of scalar values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScalarType {
    I32,
    Bool,
    /// An IEEE binary32 value (a kernel parameter such as `eps`, or a constant computed from tile
    /// parameters); usable in scalar arithmetic and as the uniform operand of tensor instructions.
    F32,
    /// A 64-bit signed integer (a kernel parameter such as an element offset into a tensor of
    /// more than 2^31 elements). Mixing with `i32` promotes the `i32` operand exactly (C's usual
    /// arithmetic conversions); view extents and strides stay `i32`.
    I64,
}

/// The type of a variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum VarType {
    Scalar(ScalarType),
    /// A kernel parameter that points at device memory of `dtype` elements.
    Pointer {
        dtype: DType,
        mutable: bool,
    },
    /// A row-major view of global memory.
    Global(GlobalType),
    /// A tile in shared memory.
    Shared(SharedType),
    /// A tile distributed over the registers of the block's threads.
    Register(RegisterType),
    /// The builder could not infer a type (an operand was undefined); the verifier reports it.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GlobalType {
    pub dtype: DType,
    /// The pointer parameter the view reads through.
    pub ptr: VarId,
    pub mutable: bool,
    /// Extents, evaluated when the view is created (runtime values allowed).
    pub shape: Vec<Expr>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SharedType {
    pub dtype: DType,
    pub layout: SharedLayout,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RegisterType {
    pub dtype: DType,
    pub layout: Layout,
}

impl VarType {
    pub fn as_register(&self) -> Option<&RegisterType> {
        match self {
            VarType::Register(r) => Some(r),
            _ => None,
        }
    }
    pub fn as_shared(&self) -> Option<&SharedType> {
        match self {
            VarType::Shared(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_global(&self) -> Option<&GlobalType> {
        match self {
            VarType::Global(g) => Some(g),
            _ => None,
        }
    }
    /// The memory scope, for diagnostics ("a shared tensor", "a register tensor", ...).
    pub fn describe(&self) -> &'static str {
        match self {
            VarType::Scalar(_) => "a scalar",
            VarType::Pointer { .. } => "a pointer parameter",
            VarType::Global(_) => "a global tensor",
            VarType::Shared(_) => "a shared tensor",
            VarType::Register(_) => "a register tensor",
            VarType::Unknown => "an undefined value",
        }
    }
}

/// A variable: its name (for diagnostics and readable generated code) and type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Var {
    pub name: String,
    pub ty: VarType,
}

/// Uniform scalar expressions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Expr {
    Int(i32),
    /// An `i64` constant (a literal that needs 64 bits, or one typed `i64`).
    I64(i64),
    Bool(bool),
    /// An `f32` constant, held as its bits so that expressions stay `Eq` and `Hash`
    /// (see [`Expr::f32`]).
    F32(u32),
    Var(VarId),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `cond ? then : else`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum UnaryOp {
    Neg,
    Not,
    /// `i32` or `i64` to `f32`, rounding to nearest even (Rust's `as f32`, CUDA's `(float)`).
    ToF32,
    /// `f32` to `i32`, truncating toward zero; out of range or NaN is an error. `i64` to `i32`:
    /// a value outside the `i32` range is an error in the interpreter; the GPU's `(int)` keeps
    /// the low 32 bits (two's-complement wrap), so a verified-in-range value agrees.
    ToI32,
    /// `i32` to `i64` (sign extension, exact) or `f32` to `i64` (truncating toward zero; out of
    /// range or NaN is an error).
    ToI64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Truncating division.
    Div,
    /// Remainder with the sign of the dividend.
    Mod,
    Min,
    Max,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    /// Bitwise and, or and exclusive or of integers (two's complement; mixed widths promote
    /// like arithmetic).
    BitAnd,
    BitOr,
    BitXor,
    /// `a << s`: `a · 2^s`, the left operand's type; an amount outside `0..bits` or a result
    /// outside the type is an error (C leaves both undefined).
    Shl,
    /// `a >> s`: arithmetic (`floor(a / 2^s)`), the left operand's type; an amount outside
    /// `0..bits` is an error.
    Shr,
}

impl Expr {
    pub fn var(v: VarId) -> Expr {
        Expr::Var(v)
    }
    /// An `i64` constant.
    pub fn i64(v: i64) -> Expr {
        Expr::I64(v)
    }
    /// An `f32` constant.
    pub fn f32(v: f32) -> Expr {
        Expr::F32(v.to_bits())
    }
    pub fn binary(op: BinaryOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::Binary(op, Box::new(a.into()), Box::new(b.into()))
    }
    /// Ceiling division, `(a + b - 1) / b`, common in grid expressions.
    pub fn cdiv(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        let b = b.into();
        let num = Expr::binary(BinaryOp::Sub, Expr::binary(BinaryOp::Add, a, b.clone()), 1);
        Expr::binary(BinaryOp::Div, num, b)
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Expr {
        Expr::Int(v)
    }
}

impl From<VarId> for Expr {
    fn from(v: VarId) -> Expr {
        Expr::Var(v)
    }
}

macro_rules! expr_ops {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl<T: Into<Expr>> std::ops::$trait<T> for Expr {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary(BinaryOp::$op, self, rhs)
            }
        }
    )*};
}
expr_ops!(
    Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Mod,
    BitAnd bitand BitAnd, BitOr bitor BitOr, BitXor bitxor BitXor, Shl shl Shl, Shr shr Shr
);

/// The second operand of an elementwise instruction.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Operand {
    /// A register tensor whose shape broadcasts to the first operand's shape.
    Tensor(VarId),
    /// A uniform scalar (`i32` or `f32`), converted to the tensor's dtype per element.
    Scalar(Expr),
    /// An immediate constant, converted to the tensor's dtype.
    Imm(f64),
}

/// Elementwise arithmetic on register tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ElementOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Min,
    Max,
    /// Bitwise and, or, xor of integer tensors (on the two's-complement values).
    And,
    Or,
    Xor,
    /// Shift left of the code: bits shifted past the dtype's width are dropped (a bit
    /// operation, not arithmetic: no overflow error). The amount must lie in `0..bits` (the
    /// interpreter reports other amounts, the GPU reduces them modulo the width).
    Shl,
    /// Shift right: arithmetic for signed dtypes, logical for unsigned ones; the amount must lie
    /// in `0..bits`.
    Shr,
}

/// The two sides of a programmatic dependent launch (sm_90, `griddepcontrol`). A kernel launched
/// as a *dependent* of the kernel before it on the stream (the launcher's `dependent` option)
/// may start while that one still runs: its blocks are scheduled once every block of the prior
/// kernel has signalled [`GridDependency::LaunchDependents`] or exited, and whatever the
/// dependent does before [`GridDependency::Wait`] (barrier set-up, loads of data the prior
/// kernel does not write, such as weights) overlaps the prior kernel's tail. Launched
/// ordinarily, and below sm_90 (the generated code compiles them only from sm_90), both are
/// no-ops, as they are in the interpreter, which runs launches one after another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum GridDependency {
    /// `wait_prior_grid()`: block the thread until the prior kernel has completed and its
    /// memory operations are visible (`griddepcontrol.wait`). A dependent kernel must execute
    /// it, in every thread that touches memory the prior kernel writes (or reads, for this
    /// kernel's writes), before the first such access.
    Wait,
    /// `launch_dependents()`: this block lets the next kernel, if launched as a dependent,
    /// start (`griddepcontrol.launch_dependents`). It orders no memory: the dependent still
    /// waits for this whole kernel in [`GridDependency::Wait`].
    LaunchDependents,
}

pub use math::{CmpOp, MathOp, GELU_K0, GELU_K1};
/// The combining operator of a [`Instruction::Reduce`].
///
/// Accumulation semantics (the interpreter is exact; the GPU agrees as stated):
/// - `Max`, `Min`: exact. `-0` and `+0` compare equal; a zero result may carry either sign.
/// - `ArgMax`: the index along the reduced dimension of the largest element (an `i32`), the
///   smallest such index on ties; exact.
/// - `Any`, `All`: of `u1` elements, giving `u1`; exact.
/// - `Sum`: integers (8 to 32 bits) exact, and a result outside the dtype is an error in the
///   interpreter (the GPU clamps). Floats (`f16`, `bf16`, `f32`): the GPU accumulates in `f32`
///   in an unspecified order and rounds once to the dtype; the interpreter computes the exact
///   sum rounded to `f64` and rounds that through `f32` to the dtype. They differ by at most
///   `n * 2^-24 * sum|x|` plus one rounding of the dtype, for `n` summed elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    Any,
    All,
}

/// The operator of a [`Instruction::Scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScanOp {
    /// Inclusive prefix sum, with the accumulation semantics of [`ReduceOp::Sum`] for each
    /// prefix (`n` being the prefix's length).
    Sum,
}

/// The instructions of the VM. `out` is the variable written.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Instruction {
    /// The block's index in each grid dimension (`outs.len()` = grid rank), as i32 scalars.
    BlockIndices {
        outs: Vec<VarId>,
    },
    /// A zero-initialised scratch global tensor of `shape` owned by this launch.
    AllocateGlobal {
        out: VarId,
        dtype: DType,
        shape: Vec<Expr>,
    },
    /// A shared tile; its bytes are uninitialised.
    AllocateShared {
        out: VarId,
        dtype: DType,
        layout: SharedLayout,
    },
    /// A register tile, every element set to `init` (converted to `dtype`) or left undefined.
    AllocateRegister {
        out: VarId,
        dtype: DType,
        layout: Layout,
        init: Option<f64>,
    },
    /// A row-major view of `ptr` with `shape`, reinterpreting the bytes as `dtype`.
    ViewGlobal {
        out: VarId,
        ptr: VarId,
        dtype: DType,
        shape: Vec<Expr>,
    },
    /// Load the tile `layout.shape()` at `offset` (masked by the view's shape): elements
    /// outside the view read as `fill` converted to the dtype (saturating, as `cast` does), or
    /// zero when `fill` is `None`.
    LoadGlobal {
        out: VarId,
        src: VarId,
        offset: Vec<Expr>,
        layout: Layout,
        #[serde(default)]
        fill: Option<f64>,
    },
    /// Store a register tile at `offset` (masked by the view's shape).
    StoreGlobal {
        src: VarId,
        dst: VarId,
        offset: Vec<Expr>,
    },
    LoadShared {
        out: VarId,
        src: VarId,
        offset: Vec<Expr>,
        layout: Layout,
    },
    StoreShared {
        src: VarId,
        dst: VarId,
        offset: Vec<Expr>,
    },
    /// A view of the sub-tile of `shape` at `offset` of a shared tensor (e.g. one pipeline
    /// stage); it aliases `src`.
    SliceShared {
        out: VarId,
        src: VarId,
        offset: Vec<Expr>,
        shape: Vec<usize>,
    },
    /// A view of a shared tensor with its dimensions reordered: dimension `d` of `out` is
    /// dimension `dims[d]` of `src` (a permutation; shape and strides permute together, so the
    /// same elements sit at the same bytes). It aliases `src`. A `[n, k]` tile stored with `k`
    /// contiguous is, permuted with `[1, 0]`, the `k`-major `[k, n]` operand of `dot`.
    PermuteShared {
        out: VarId,
        src: VarId,
        dims: Vec<usize>,
    },
    /// Asynchronously copy the tile of `dst`'s shape at `src_offset` of a global tensor into the
    /// shared tensor `dst` (masked by the view: out-of-view elements are filled with zero).
    CopyAsync {
        dst: VarId,
        src: VarId,
        src_offset: Vec<Expr>,
    },
    /// `count` mbarriers in shared memory (a `u32 [count, 2]` tensor: 8 bytes each), every one
    /// initialised to complete a phase after `arrivals` arrivals, visible to the whole block
    /// when the instruction ends (the generated code initialises them from one thread and
    /// synchronizes the block). A barrier counts completed phases from 0; only the `mbarrier_*`
    /// instructions and `tma_load` may use the tensor, and its bytes are never reused.
    Mbarriers {
        out: VarId,
        count: u32,
        arrivals: u32,
    },
    /// The tensor-memory-accelerator copy (`cp.async.bulk.tensor`, sm_90): the tile of `dst`'s
    /// shape at `src_offset` of the global view `src` is copied into the shared tensor `dst`
    /// (out-of-view elements read as zero, as with `copy_async`), completing on barrier
    /// `index` of `barrier`. One thread of the block issues it, and that is one *arrival* on
    /// the barrier which also makes the barrier's current phase wait for the copy's bytes: the
    /// phase completes when it has all its arrivals and all the bytes of the copies that
    /// arrived in it have landed. The bytes of `dst` may be read only after an
    /// `mbarrier_wait` has seen that phase complete, and must not be written (or read by an
    /// in-flight `dot_async`) until then.
    TmaLoad {
        dst: VarId,
        src: VarId,
        src_offset: Vec<Expr>,
        barrier: VarId,
        index: Expr,
    },
    /// The copy engine's store (`cp.async.bulk.tensor`, sm_90): the shared tensor `src` is
    /// copied to the tile of its shape at `dst_offset` of the global view `dst`; elements of
    /// the tile outside the view are not written. Every thread's earlier writes to `src` are
    /// copied (the instruction synchronizes the block first). The copy engine reads `src`
    /// asynchronously: its bytes must not be written until a `tma_store_wait`. The global
    /// writes land by the end of the kernel at the latest: this kernel must not read them
    /// back.
    TmaStore {
        src: VarId,
        dst: VarId,
        dst_offset: Vec<Expr>,
    },
    /// Wait until the copy engine has read the sources of every earlier `tma_store`, and
    /// synchronize the block: those bytes may be written again.
    TmaStoreWait,
    /// Every warp of the block arrives once on barrier `index` of `barrier`, after all of its
    /// threads' earlier memory accesses (so a barrier of `arrivals` = warps completes a phase
    /// when the whole block has arrived).
    MbarrierArrive {
        barrier: VarId,
        index: Expr,
    },
    /// Wait until barrier `index` of `barrier` has completed the phase of parity `phase`
    /// (`phase % 2`): the most recent phase with that parity. Afterwards the bytes of the
    /// copies that completed with it are visible to every thread. Waiting for a phase that can
    /// never complete is a deadlock (the interpreter reports it).
    MbarrierWait {
        barrier: VarId,
        index: Expr,
        phase: Expr,
    },
    /// Close the group of copies issued since the last commit.
    CopyAsyncCommitGroup,
    /// Wait until at most `n` committed groups are still in flight.
    CopyAsyncWaitGroup {
        n: u32,
    },
    /// `out = lhs op rhs`, broadcasting `rhs`; `out` has `lhs`'s type.
    Binary {
        out: VarId,
        op: ElementOp,
        lhs: VarId,
        rhs: Operand,
    },
    /// `out = a * b + c` with one rounding (f32, f16 or bf16; past the largest finite value an
    /// infinity, like every arithmetic result: `DType::round`); `b` and `c` have `a`'s type and
    /// broadcast like `Binary`'s right operand (`c` a tensor). One FFMA (or one HFMA2 per
    /// pair) where `mul` then `add` would be two instructions and two roundings.
    MulAdd {
        out: VarId,
        a: VarId,
        b: Operand,
        c: VarId,
    },
    Neg {
        out: VarId,
        x: VarId,
    },
    /// `out = op(x)` elementwise; `out` has `x`'s type. Float ops (f16, bf16, f32 tensors)
    /// compute in f32 with the CUDA math library and round the f32 result to the dtype (round
    /// to nearest even, an overflow an infinity: `DType::round`); the interpreter computes the exact value in f64 from the
    /// f32 input, rounds it to f32, then to the dtype. The GPU result differs from that by at
    /// most [`MathOp::max_ulp`] f32 ulps before the final rounding. A NaN result (`log` of a
    /// negative number, `sin` of an infinity) is an error in the interpreter. `not` and `popc`
    /// take integer tensors and are exact.
    Unary {
        out: VarId,
        op: MathOp,
        x: VarId,
    },
    /// `out = lhs op rhs` elementwise, a `u1` tensor (1 = true) with `lhs`'s layout. `rhs`
    /// broadcasts like `Binary`'s right operand and has `lhs`'s dtype; an i32 scalar is
    /// compared exactly and an immediate after conversion to `lhs`'s dtype.
    Compare {
        out: VarId,
        op: CmpOp,
        lhs: VarId,
        rhs: Operand,
    },
    /// `out = cond ? a : b` elementwise (`where`); `out` has `a`'s type. `cond` is a `u1`
    /// tensor that broadcasts to `a`; `b` broadcasts like `Binary`'s right operand (a tensor of
    /// `a`'s dtype, an i32 scalar or an immediate, both converted to the dtype, saturating).
    Select {
        out: VarId,
        cond: VarId,
        a: VarId,
        b: Operand,
    },
    /// An `i32` tensor in `layout` whose element at tile index `idx` is `idx[dim] + offset`
    /// (`offset` a uniform i32 scalar; an overflow of i32 is an error).
    Arange {
        out: VarId,
        layout: Layout,
        dim: usize,
        offset: Expr,
    },
    /// Convert each element to `dtype` (round to nearest even, saturate). The result has `x`'s
    /// layout, or `layout`: the same elements on the same threads in another local order (a
    /// register-only reordering, e.g. from the packed order of quantized codes to the order of
    /// an mma fragment).
    ///
    /// With `biased` (`cast_biased`), element `i` of the result is the converted value plus a
    /// constant `b(i)` of its position: the bias the code generator's one-`lop3`-per-pair
    /// integer cast leaves (`codegen::cast::biased_cast_offsets` of the operand's dtype, `dtype`
    /// and the local order; all zero where that cast does not apply). The biases are what a
    /// biased cast of all-zero codes gives, so a program can remove them from what it
    /// accumulates (`dot(cast_biased(x), y) - dot(cast_biased(zeros), y)`), once per tile
    /// instead of once per element.
    Cast {
        out: VarId,
        x: VarId,
        dtype: DType,
        layout: Option<Layout>,
        biased: bool,
    },
    /// Reinterpret each thread's register bits as `dtype` elements in `layout`.
    View {
        out: VarId,
        x: VarId,
        dtype: DType,
        layout: Layout,
    },
    /// `out = a · b + c` over tiles `[m, k]`, `[k, n]`, `[m, n]`; `out` has `c`'s type.
    Dot {
        out: VarId,
        a: VarId,
        b: VarId,
        c: VarId,
    },
    /// `out = a · b + c` like a `dot` of shared operands (the warpgroup MMA), left *in flight*:
    /// until a [`Instruction::DotWait`] retires it, `out` may only be the accumulator of further
    /// `dot_async`s (the tensor cores chain them) and the bytes of `a` and `b` must not be
    /// written. The interpreter computes the value at once and reports any such use as an
    /// error; its reads of `a` and `b` count, for the race checks, as reads by the first thread
    /// of each warpgroup when they are retired (so overwriting the operands needs a
    /// `synchronize` after the `dot_wait`). `a` may instead be a register tensor (the RS form,
    /// `verify::wgmma::plan_wgmma_rs`): then `a` must not be written until the `dot_wait`.
    /// Each `dot_async` is one group.
    DotAsync {
        out: VarId,
        a: VarId,
        b: VarId,
        c: VarId,
    },
    /// Wait until at most `n` `dot_async` groups are still in flight (oldest retire first).
    DotWait {
        n: u32,
    },
    /// Reduce register tensor `x` along dimension `dim` with `op` (see [`ReduceOp`] for the
    /// accumulation semantics). The result keeps the rank, with extent 1 at `dim`, in layout
    /// `x.layout.reduce(&[dim])`: every thread that held part of a row holds the row's result,
    /// so it broadcasts back against `x` thread-locally. The dtype is `x`'s for `Sum`, `Max`,
    /// `Min`, `Any` and `All`, and `i32` for `ArgMax`. The generated code may use a barrier
    /// (`__syncthreads`) when the dimension spans several warps, so it must be executed by the
    /// whole block, like `synchronize`.
    Reduce {
        out: VarId,
        x: VarId,
        op: ReduceOp,
        dim: usize,
    },
    /// The dot product of bit planes (bit-serial arithmetic, APT-LLM's recovery on the CUDA
    /// cores): `out[i] = Σ_{p, q, j} popc(w[p, .., j, ..] AND a[q, .., j, ..]) << (p + q)`, the
    /// sum over dim 0 of both operands (the planes, of weights `2^p` and `2^q`) and over
    /// dimension `dim`; an `i32` tensor in `w.layout.reduce(&[0, dim])`. `w` and `a` are `u32`
    /// register tensors of one rank, `a`'s dims past 0 broadcast to `w`'s (extents equal or 1)
    /// thread-locally, and each thread holds dims 0 and `dim` of its elements whole (the
    /// planes and the reduced words are its own registers). The code generator sums the words
    /// of each weight in carry-save form (full adders on whole words) and counts bits once per
    /// remaining word, a few `popc`s instead of one per plane pair and word. The verifier
    /// bounds the result below `2^31`.
    PlaneDot {
        out: VarId,
        w: VarId,
        a: VarId,
        dim: usize,
    },
    /// Inclusive scan of register tensor `x` along dimension `dim` with `op` (`cumsum`): element
    /// `k` along `dim` of the result combines elements `0..=k` of its row. Same type (dtype and
    /// layout) as `x`. Any layout: the code generator scans digits in registers, by lane
    /// shuffles, or (across warps) through shared memory.
    Scan {
        out: VarId,
        x: VarId,
        op: ScanOp,
        dim: usize,
    },
    /// A barrier for all threads of the block (and their shared-memory writes).
    Synchronize,
    /// A GPU-scope memory fence, executed by every thread of the block (`fence.acq_rel.gpu`,
    /// what `__threadfence()` provides): the thread's global-memory accesses before the fence
    /// are ordered before its accesses after it, as observed by threads of *other blocks* of
    /// the launch. It is cumulative: writes of other threads of this block that a preceding
    /// `synchronize` made visible to this thread are ordered too. It is no barrier (threads do
    /// not wait for each other) and orders nothing by itself: another block observes the order
    /// only through a later access it synchronizes on, typically an atomic counter.
    ///
    /// The idiom (the last block of a split-k tile reduces it): every thread writes its part,
    /// `synchronize()`, `fence()`, one thread's `atomic_add` on the counter (release); then the
    /// block that sees the last count does `fence()` before its barrier and its loads of the
    /// other blocks' parts (acquire).
    ///
    /// The interpreter runs blocks one after another, each to its end, so every global write of
    /// an earlier block is already visible to a later one: a fence changes no value there, and
    /// a missing fence cannot be detected (the interpreter checks nothing for it). It is an
    /// instruction nonetheless so that programs state the ordering they rely on on the GPU,
    /// where blocks run concurrently and a missing fence is a real (rare, silent) race.
    Fence,
    /// Programmatic dependent launch (sm_90): see [`GridDependency`].
    GridDependency(GridDependency),
    /// End the whole block.
    Exit,
    /// Print a tensor or scalar (debugging).
    Print {
        label: String,
        x: Operand,
    },
    /// The one element of register tensor `x` (shape of one element, so every thread holds it)
    /// as a uniform scalar: `i32` for integer dtypes (sign- or zero-extended; a `u32` value
    /// above `i32::MAX` is an error in the interpreter and wraps on the GPU), `f32` for floats.
    Item {
        out: VarId,
        x: VarId,
    },
    /// `out[e] = src.flat[index[e]]`: `src` is a global or shared tensor read row-major as one
    /// flat array, `index` an `i32` register tensor; `out` has `src`'s dtype and `index`'s
    /// layout. An index outside `[0, numel(src))` reads 0 (masked, never an access).
    Gather {
        out: VarId,
        src: VarId,
        index: VarId,
    },
    /// `lookup(table, rows, cols)`: `out[e] = table[rows[e], cols[e] % C]`, one element of a
    /// table per element of `rows` (a look-up table, an entry per row and one table per
    /// column).
    ///
    /// - `table`: a shared tensor of rank 2, `[R, C]`, of 8-, 16- or 32-bit elements, `C` a
    ///   power of two, addressed as [`Instruction::Gather`] addresses its source; or of rank
    ///   3, `[R, C, W]`, whose entries are vectors of `W` elements (4, 8 or 16 bytes);
    /// - `rows`: an integer register tensor (8 to 32 bits), layout `L`; a row outside
    ///   `[0, R)` reads 0 (a vector of zeros), with no access;
    /// - `cols`: an `i32` register tensor broadcasting to `rows` in registers (like the right
    ///   operand of `add`), taken modulo `C`;
    /// - `out`: `table`'s dtype in `L`; for a rank-3 table in `L` composed with `local(1, ..,
    ///   1, W)` (the last dimension `W` times longer, [`lookup_layout`]): out local `l · W + v`
    ///   is element `v` of rows local `l`'s vector.
    ///
    /// The code generator reads a compact, unswizzled table of 256-byte rows by `u8` rows with
    /// one `PRMT` per element (a vector load for a rank-3 table): the row's byte and the
    /// column's byte offset make the address.
    Lookup {
        out: VarId,
        table: VarId,
        rows: VarId,
        cols: VarId,
    },
    /// `gather_rows(src, index, dim)`: whole rows of a table, one row per index element.
    ///
    /// - `src`: a global or shared tensor of rank 2, `[rows, w]`, of 8-, 16- or 32-bit
    ///   elements, read row-major (element `(r, c)` is flat element `r * w + c`, exactly as
    ///   [`Instruction::Gather`] addresses its source, slices/permutes/swizzles of shared
    ///   tensors included). A global source's `w` must be a constant.
    /// - `index`: an `i32` register tensor of any rank `R`, layout `Li`; `dim` a constant in
    ///   `0..R`.
    /// - `out`: `src`'s dtype, shape = `index`'s shape with extent `dim` multiplied by `w`,
    ///   layout `Li` composed with `local(1, .., w, .., 1)` (`w` at `dim`), i.e. `Li.local(..)`
    ///   in layout text ([`crate::layout::Layout::compose`], inner factor the local), so out
    ///   local `l * w + c` of every thread is column `c` of the row indexed by index local
    ///   `l`: `out[.., i * w + c, ..] = src[index[.., i, ..], c]`.
    /// - An index outside `[0, rows)` reads a row of zeros, with no memory access (as
    ///   `gather`).
    /// - `src` may be a **register** table `[rows, w]` that every warp holds whole, row `r`
    ///   on one lane as `w` consecutive locals ([`WarpTable`]: lane `r % 32` or `r / S`, `S =
    ///   rows / 32` rows a lane), its rows whole 32-bit words: a row is then read from its lane
    ///   by warp shuffles, which every lane of the warp must run.
    ///
    /// Example: `index` in `spatial(1, 4).local(16, 8).column_spatial(4, 8)` over `[64, 256]`,
    /// `src` a shared `[256, 4]` f16 codebook, `dim = 0`: the result is `[256, 256]` in
    /// `spatial(1, 4).local(16, 8).column_spatial(4, 8).local(4, 1)`. The code generator reads
    /// each row with one vector load where it can prove the alignment (a 4-f16 row: `LDS.64`).
    GatherRows {
        out: VarId,
        src: VarId,
        index: VarId,
        dim: usize,
    },
    /// `dst.flat[index[e]] = src[e]` for each element of register tensor `src` (once, not per
    /// replica); `index` has `src`'s layout. Out-of-range indices are skipped. Two elements
    /// with the same index: the GPU keeps either value, the interpreter reports an error.
    Scatter {
        src: VarId,
        dst: VarId,
        index: VarId,
    },
    /// `scatter_rows(x, dst, index, dim)` (`x` is `src` here): whole rows of a table written,
    /// one row per index element; the store counterpart of [`Instruction::GatherRows`].
    ///
    /// - `dst`: a mutable global or shared tensor of rank 2, `[rows, w]`, of 8-, 16- or 32-bit
    ///   elements, addressed exactly as `gather_rows` addresses its source (element `(r, c)`
    ///   is flat element `r * w + c`, slices/permutes/swizzles of shared tensors included). A
    ///   global destination's `w` must be a constant.
    /// - `index`: an `i32` register tensor of any rank `R`, layout `Li`; `dim` a constant in
    ///   `0..R`.
    /// - `src`: a register tensor of `dst`'s dtype whose layout is exactly the layout
    ///   `gather_rows(dst, index, dim)` would have: `Li` composed with `local(1, .., w, .., 1)`
    ///   (`w` at `dim`), so local `l * w + c` of every thread is column `c` of the row that
    ///   index local `l` selects.
    /// - Effect: for each index element `i`, row `index[.., i, ..]` of `dst` becomes
    ///   `src[.., i * w + c, ..]` for `c` in `0..w`, written once per index element (not per
    ///   replica). An index outside `[0, rows)` is skipped. Two index elements with the same
    ///   row: the GPU keeps either row, the interpreter reports an error.
    ///
    /// The code generator writes each row with one vector store where it can prove the
    /// alignment, as `gather_rows` reads it (a 4-f16 row: `STS.64`).
    ScatterRows {
        src: VarId,
        dst: VarId,
        index: VarId,
        dim: usize,
    },
    /// `old = dst.flat[index[e]]; dst.flat[index[e]] = op(old, value[e])` atomically, once per
    /// element of `value` (not per replica); `index` (and `compare`, for `Cas`) have `value`'s
    /// layout. `out`, when present, receives the old values in `value`'s layout (0 where the
    /// index is out of range, which is skipped). See [`AtomicOp`] for the order of updates.
    Atomic {
        op: AtomicOp,
        dst: VarId,
        index: VarId,
        value: VarId,
        compare: Option<VarId>,
        out: Option<VarId>,
    },
}

/// A statement. The span points at the source that produced it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: SpanId,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StmtKind {
    /// Define a new scalar variable.
    Let {
        var: VarId,
        value: Expr,
    },
    /// Overwrite an existing scalar variable.
    Assign {
        var: VarId,
        value: Expr,
    },
    If {
        cond: Expr,
        then_body: Vec<Stmt>,
        else_body: Vec<Stmt>,
    },
    /// `for var in (start..end).step_by(step)`; `var` is a fresh scalar. `step` is at least 1;
    /// an increment past `i32::MAX` while the loop would go on is an error.
    For {
        var: VarId,
        start: Expr,
        end: Expr,
        step: u32,
        unroll: Unroll,
        body: Vec<Stmt>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    /// Warp specialization: the block's warps split into consecutive [`Role`]s (whole
    /// warpgroups, the first role on the lowest warps), and each role runs its own body as if
    /// it were a block of its own threads: layouts, thread indices, `synchronize` (a named
    /// barrier of the role's threads) and `mbarrier_arrive` (one arrival per warp of the role)
    /// are the role's. Roles talk only through shared and global memory, ordered by mbarriers
    /// (an arrival releases the arriving warps' earlier accesses, a wait that sees the phase
    /// complete acquires them). A role may read the scalars and use the shared and global
    /// tensors defined before the region, but not assign those scalars or use register tensors
    /// defined outside it, and it may not allocate shared or global memory, initialise
    /// mbarriers, reduce through shared memory or `exit`. The region is the kernel's last
    /// top-level statement. `Role::registers` re-sizes the role's register file (sm_90a
    /// `setmaxnreg`).
    Specialize {
        roles: Vec<Role>,
    },
    Instr(Instruction),
}

impl StmtKind {
    /// The statement lists nested directly in this statement (branches, loop bodies, roles),
    /// for passes that only need to walk every statement.
    pub fn bodies(&self) -> Vec<&[Stmt]> {
        match self {
            StmtKind::If {
                then_body,
                else_body,
                ..
            } => vec![then_body, else_body],
            StmtKind::For { body, .. } | StmtKind::While { body, .. } => vec![body],
            StmtKind::Specialize { roles } => roles.iter().map(|r| r.body.as_slice()).collect(),
            StmtKind::Let { .. } | StmtKind::Assign { .. } | StmtKind::Instr(_) => Vec::new(),
        }
    }
}

/// One role of a [`StmtKind::Specialize`] region.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Role {
    /// The role's warps: a positive multiple of 4 (whole warpgroups).
    pub warps: u32,
    /// Registers per thread for the role's warps (`setmaxnreg`: a multiple of 8 from 24 to
    /// 256), or `None` to keep the kernel's allocation.
    pub registers: Option<u32>,
    pub body: Vec<Stmt>,
}

/// How the CUDA compiler should unroll a loop (a hint: the meaning never changes).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Unroll {
    /// The compiler decides.
    #[default]
    Auto,
    /// Unroll completely (the trip count should be a compile-time constant).
    Full,
    /// Unroll by this factor (at least 1; 1 keeps the loop rolled).
    Factor(u32),
}

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Param {
    pub var: VarId,
}

/// One thread-block program and how it is launched.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Program {
    pub name: String,
    /// Parameters in call order; each is a `Scalar(I32)` or a `Pointer` variable.
    pub params: Vec<Param>,
    /// Grid extents (1 to 3), over parameters only.
    pub grid: Vec<Expr>,
    /// Threads per block (a multiple of 32).
    pub num_threads: u32,
    /// Blocks the kernel should fit on one SM at once (an occupancy hint: the CUDA compiler
    /// limits registers per thread to make room, `__launch_bounds__(threads, blocks)`). 1 lets
    /// it use as many registers as it likes; memory-bound kernels want several.
    #[serde(default = "one")]
    pub blocks_per_sm: u32,
    pub vars: Vec<Var>,
    pub body: Vec<Stmt>,
    /// The span of the whole kernel, for diagnostics not tied to a statement.
    pub span: SpanId,
}

fn one() -> u32 {
    1
}

impl Program {
    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.0 as usize]
    }
    /// Type of `id`, or `Unknown` for an id out of range.
    pub fn ty(&self, id: VarId) -> &VarType {
        self.vars
            .get(id.0 as usize)
            .map(|v| &v.ty)
            .unwrap_or(&VarType::Unknown)
    }
}
