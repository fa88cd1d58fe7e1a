//! The instruction table: how `#[kernel]` spells each VM instruction. The macro derives its
//! dispatch ([`Syntax::op`]), arity checks, usage text and "did you mean" hints from this one
//! table; the IR derives the names it prints ([`crate::ir::Instruction::name`],
//! [`crate::ir::ElementOp::name`]) from it too. Adding an elementwise instruction is one
//! [`ElementOp`] variant, one row here, its interpreter semantics and its emitter.

use super::{AtomicOp, CmpOp, ElementOp, GridDependency, MathOp, ReduceOp, ScanOp};

/// Groups of instructions, for listings and for the nearest family of an unknown name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Global, shared and register tensors: allocation, views, loads, stores, async copies.
    Memory,
    /// Elementwise arithmetic and conversions on register tensors.
    Elementwise,
    /// Matrix multiply-accumulate.
    Matrix,
    /// Reductions and scans of register tensors along a dimension.
    Reduction,
    /// Block indices, barriers, exit, print.
    Control,
    /// Compile-time and uniform scalar helpers.
    Scalar,
    /// Addresses computed from register values: item, gather, gather_rows, scatter, atomics.
    Addressing,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Memory => "memory",
            Family::Elementwise => "elementwise",
            Family::Matrix => "matrix",
            Family::Reduction => "reduction",
            Family::Control => "control",
            Family::Scalar => "scalar",
            Family::Addressing => "addressing",
        }
    }
}

/// What an instruction call builds: the macro matches on this (exhaustively), so a new row
/// whose kind it does not handle is a compile error there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    BlockIndices,
    ViewGlobal,
    AllocateGlobal,
    AllocateRegister,
    AllocateShared,
    LoadGlobal,
    StoreGlobal,
    LoadShared,
    StoreShared,
    SliceShared,
    PermuteShared,
    CopyAsync,
    CommitGroup,
    WaitGroup,
    /// `add`, `sub`, ...: a register tensor and a tensor, scalar or immediate.
    Binary(ElementOp),
    /// `min`/`max`: of scalars, or elementwise of tensors.
    MinMax(ElementOp),
    MulAdd,
    Neg,
    /// `exp`, `sqrt`, `not`, ...: a unary function of a register tensor.
    Math(MathOp),
    /// `lt`, `eq`, ...: a `u1` mask.
    Compare(CmpOp),
    /// `select(cond, a, b)`: `where`.
    Select,
    /// `arange(layout, dim, offset)`: an index tensor.
    Arange,
    Cast,
    /// `cast`, leaving a fixed bias per position (the one-instruction integer cast).
    CastBiased,
    View,
    Dot,
    PlaneDot,
    DotAsync,
    DotWait,
    Mbarriers,
    TmaLoad,
    TmaStore,
    TmaStoreWait,
    MbarrierArrive,
    MbarrierWait,
    /// `sum`, `reduce_max`, ...: a register tensor and a constant dimension.
    Reduce(ReduceOp),
    /// `cumsum`: a register tensor and a constant dimension.
    Scan(ScanOp),
    Synchronize,
    /// `fence()`: a GPU-scope memory fence (`ir::Instruction::Fence`).
    Fence,
    /// `wait_prior_grid()`, `launch_dependents()`: a programmatic dependent launch's two sides.
    GridDependency(GridDependency),
    Exit,
    Print,
    Cdiv,
    Gcd,
    /// Data-dependent addressing (`ir/addressing.rs`).
    Item,
    Gather,
    Lookup,
    GatherRows,
    Scatter,
    ScatterRows,
    Atomic(AtomicOp),
}

/// One instruction as `#[kernel]` spells it.
#[derive(Clone, Copy, Debug)]
pub struct Syntax {
    /// The canonical name (what the IR printer shows).
    pub name: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    pub family: Family,
    /// Fewest and most arguments.
    pub arity: (usize, usize),
    /// How it is called, for error messages and docs.
    pub usage: &'static str,
    pub op: Op,
}

macro_rules! row {
    ($name:literal $(| $alias:literal)*, $family:ident, $min:literal..=$max:literal, $usage:literal, $op:expr) => {
        Syntax {
            name: $name,
            aliases: &[$($alias),*],
            family: Family::$family,
            arity: ($min, $max),
            usage: $usage,
            op: $op,
        }
    };
}

/// Every instruction of the `#[kernel]` language.
#[rustfmt::skip]
pub const INSTRUCTIONS: &[Syntax] = &[
    row!("block_indices", Control, 0..=0, "let [bi, bj] = block_indices()", Op::BlockIndices),
    row!("view_global", Memory, 2..=2, "view_global(ptr, [extents..]) or view_global::<T>(ptr, [extents..])", Op::ViewGlobal),
    row!("allocate_global", Memory, 1..=1, "allocate_global::<T>([extents..])", Op::AllocateGlobal),
    row!("register" | "allocate_register", Memory, 1..=2, "register::<T>(layout) or register::<T>(layout, init)", Op::AllocateRegister),
    row!("shared" | "allocate_shared", Memory, 1..=2, "shared::<T>([extents..]) or shared::<T>([extents..], swizzle(bits, base, shift))", Op::AllocateShared),
    row!("load_global", Memory, 3..=4, "load_global(src, layout, [offset..]) or load_global(src, layout, [offset..], fill)", Op::LoadGlobal),
    row!("store_global", Memory, 3..=3, "store_global(x, dst, [offset..])", Op::StoreGlobal),
    row!("load_shared", Memory, 3..=3, "load_shared(src, layout, [offset..])", Op::LoadShared),
    row!("store_shared", Memory, 3..=3, "store_shared(x, dst, [offset..])", Op::StoreShared),
    row!("slice_shared", Memory, 3..=3, "slice_shared(src, [offset..], [extents..])", Op::SliceShared),
    row!("permute_shared", Memory, 2..=2, "permute_shared(src, [dims..])", Op::PermuteShared),
    row!("copy_async", Memory, 3..=3, "copy_async(src, dst, [offset..])", Op::CopyAsync),
    row!("mbarriers", Memory, 2..=2, "mbarriers(count, arrivals)", Op::Mbarriers),
    row!("tma_load", Memory, 5..=5, "tma_load(src, dst, [offset..], barriers, i)", Op::TmaLoad),
    row!("tma_store", Memory, 3..=3, "tma_store(src, dst, [offset..])", Op::TmaStore),
    row!("tma_store_wait", Memory, 0..=0, "tma_store_wait()", Op::TmaStoreWait),
    row!("mbarrier_arrive", Memory, 2..=2, "mbarrier_arrive(barriers, i)", Op::MbarrierArrive),
    row!("mbarrier_wait", Memory, 3..=3, "mbarrier_wait(barriers, i, phase)", Op::MbarrierWait),
    row!("copy_async_commit_group" | "commit_group", Memory, 0..=0, "commit_group()", Op::CommitGroup),
    row!("copy_async_wait_group" | "wait_group", Memory, 1..=1, "wait_group(n)", Op::WaitGroup),
    row!("add", Elementwise, 2..=2, "add(x, y)", Op::Binary(ElementOp::Add)),
    row!("sub", Elementwise, 2..=2, "sub(x, y)", Op::Binary(ElementOp::Sub)),
    row!("mul", Elementwise, 2..=2, "mul(x, y)", Op::Binary(ElementOp::Mul)),
    row!("div", Elementwise, 2..=2, "div(x, y)", Op::Binary(ElementOp::Div)),
    row!("rem" | "mod", Elementwise, 2..=2, "rem(x, y) (or x % y)", Op::Binary(ElementOp::Mod)),
    row!("min", Elementwise, 2..=2, "min(x, y)", Op::MinMax(ElementOp::Min)),
    row!("max", Elementwise, 2..=2, "max(x, y)", Op::MinMax(ElementOp::Max)),
    row!("neg", Elementwise, 1..=1, "neg(x)", Op::Neg),
    row!("and", Elementwise, 2..=2, "and(x, y) (or x & y)", Op::Binary(ElementOp::And)),
    row!("or", Elementwise, 2..=2, "or(x, y) (or x | y)", Op::Binary(ElementOp::Or)),
    row!("xor", Elementwise, 2..=2, "xor(x, y) (or x ^ y)", Op::Binary(ElementOp::Xor)),
    row!("shl", Elementwise, 2..=2, "shl(x, y) (or x << y)", Op::Binary(ElementOp::Shl)),
    row!("shr", Elementwise, 2..=2, "shr(x, y) (or x >> y)", Op::Binary(ElementOp::Shr)),
    row!("exp", Elementwise, 1..=1, "exp(x)", Op::Math(MathOp::Exp)),
    row!("exp2", Elementwise, 1..=1, "exp2(x)", Op::Math(MathOp::Exp2)),
    row!("log", Elementwise, 1..=1, "log(x)", Op::Math(MathOp::Log)),
    row!("log2", Elementwise, 1..=1, "log2(x)", Op::Math(MathOp::Log2)),
    row!("sqrt", Elementwise, 1..=1, "sqrt(x)", Op::Math(MathOp::Sqrt)),
    row!("rsqrt", Elementwise, 1..=1, "rsqrt(x)", Op::Math(MathOp::Rsqrt)),
    row!("abs", Elementwise, 1..=1, "abs(x)", Op::Math(MathOp::Abs)),
    row!("tanh", Elementwise, 1..=1, "tanh(x)", Op::Math(MathOp::Tanh)),
    row!("sigmoid", Elementwise, 1..=1, "sigmoid(x)", Op::Math(MathOp::Sigmoid)),
    row!("silu", Elementwise, 1..=1, "silu(x)", Op::Math(MathOp::Silu)),
    row!("gelu", Elementwise, 1..=1, "gelu(x)", Op::Math(MathOp::Gelu)),
    row!("sin", Elementwise, 1..=1, "sin(x)", Op::Math(MathOp::Sin)),
    row!("cos", Elementwise, 1..=1, "cos(x)", Op::Math(MathOp::Cos)),
    row!("floor", Elementwise, 1..=1, "floor(x)", Op::Math(MathOp::Floor)),
    row!("round", Elementwise, 1..=1, "round(x)", Op::Math(MathOp::Round)),
    row!("not", Elementwise, 1..=1, "not(x) (or !x)", Op::Math(MathOp::Not)),
    row!("popc", Elementwise, 1..=1, "popc(x)", Op::Math(MathOp::Popc)),
    row!("lt", Elementwise, 2..=2, "lt(x, y) (or x < y)", Op::Compare(CmpOp::Lt)),
    row!("le", Elementwise, 2..=2, "le(x, y) (or x <= y)", Op::Compare(CmpOp::Le)),
    row!("gt", Elementwise, 2..=2, "gt(x, y) (or x > y)", Op::Compare(CmpOp::Gt)),
    row!("ge", Elementwise, 2..=2, "ge(x, y) (or x >= y)", Op::Compare(CmpOp::Ge)),
    row!("eq", Elementwise, 2..=2, "eq(x, y) (or x == y)", Op::Compare(CmpOp::Eq)),
    row!("ne", Elementwise, 2..=2, "ne(x, y) (or x != y)", Op::Compare(CmpOp::Ne)),
    row!("select" | "where_", Elementwise, 3..=3, "select(cond, a, b) (`where`)", Op::Select),
    row!("arange", Elementwise, 3..=3, "arange(layout, dim, offset)", Op::Arange),
    row!("mul_add", Elementwise, 3..=3, "mul_add(a, b, c)", Op::MulAdd),
    row!("cast", Elementwise, 1..=2, "cast::<T>(x) or cast::<T>(x, layout)", Op::Cast),
    row!("cast_biased", Elementwise, 1..=2, "cast_biased::<T>(x) or cast_biased::<T>(x, layout)", Op::CastBiased),
    row!("view", Elementwise, 2..=2, "view::<T>(x, layout)", Op::View),
    row!("dot", Matrix, 3..=3, "dot(a, b, c)", Op::Dot),
    row!("plane_dot", Matrix, 3..=3, "plane_dot(w, a, dim)", Op::PlaneDot),
    row!("dot_async", Matrix, 3..=3, "dot_async(a, b, c) (shared b; a shared or in registers)", Op::DotAsync),
    row!("dot_wait", Matrix, 1..=1, "dot_wait(n)", Op::DotWait),
    row!("sum", Reduction, 2..=2, "sum(x, dim)", Op::Reduce(ReduceOp::Sum)),
    row!("reduce_max", Reduction, 2..=2, "reduce_max(x, dim)", Op::Reduce(ReduceOp::Max)),
    row!("reduce_min", Reduction, 2..=2, "reduce_min(x, dim)", Op::Reduce(ReduceOp::Min)),
    row!("argmax", Reduction, 2..=2, "argmax(x, dim)", Op::Reduce(ReduceOp::ArgMax)),
    row!("any", Reduction, 2..=2, "any(x, dim)", Op::Reduce(ReduceOp::Any)),
    row!("all", Reduction, 2..=2, "all(x, dim)", Op::Reduce(ReduceOp::All)),
    row!("cumsum", Reduction, 2..=2, "cumsum(x, dim)", Op::Scan(ScanOp::Sum)),
    row!("synchronize" | "sync", Control, 0..=0, "sync() or synchronize()", Op::Synchronize),
    row!("fence", Control, 0..=0, "fence()", Op::Fence),
    row!("wait_prior_grid", Control, 0..=0, "wait_prior_grid()", Op::GridDependency(GridDependency::Wait)),
    row!("launch_dependents", Control, 0..=0, "launch_dependents()", Op::GridDependency(GridDependency::LaunchDependents)),
    row!("exit", Control, 0..=0, "exit()", Op::Exit),
    row!("print", Control, 1..=2, "print(x) or print(\"label\", x)", Op::Print),
    row!("cdiv", Scalar, 2..=2, "cdiv(a, b)", Op::Cdiv),
    row!("gcd", Scalar, 2..=2, "gcd(a, b) (of constants)", Op::Gcd),
    row!("item", Addressing, 1..=1, "item(x) or x.item()", Op::Item),
    row!("gather", Addressing, 2..=2, "gather(src, index)", Op::Gather),
    row!("gather_rows", Addressing, 3..=3, "gather_rows(src, index, dim)", Op::GatherRows),
    row!("lookup", Addressing, 3..=3, "lookup(table, rows, cols)", Op::Lookup),
    row!("scatter", Addressing, 3..=3, "scatter(x, dst, index)", Op::Scatter),
    row!("scatter_rows", Addressing, 4..=4, "scatter_rows(x, dst, index, dim)", Op::ScatterRows),
    row!("atomic_add", Addressing, 3..=3, "atomic_add(dst, index, x)", Op::Atomic(AtomicOp::Add)),
    row!("atomic_max", Addressing, 3..=3, "atomic_max(dst, index, x)", Op::Atomic(AtomicOp::Max)),
    row!("atomic_min", Addressing, 3..=3, "atomic_min(dst, index, x)", Op::Atomic(AtomicOp::Min)),
    row!("atomic_exch", Addressing, 3..=3, "atomic_exch(dst, index, x)", Op::Atomic(AtomicOp::Exchange)),
    row!("atomic_cas", Addressing, 4..=4, "atomic_cas(dst, index, compare, x)", Op::Atomic(AtomicOp::Cas)),
];

/// The row of `name` (canonical or alias).
pub fn lookup(name: &str) -> Option<&'static Syntax> {
    INSTRUCTIONS
        .iter()
        .find(|s| s.name == name || s.aliases.contains(&name))
}

/// The row that builds `op`.
pub fn of_op(op: Op) -> &'static Syntax {
    INSTRUCTIONS
        .iter()
        .find(|s| s.op == op)
        .expect("every op has a row")
}

/// Every spelling, canonical names first.
pub fn spellings() -> impl Iterator<Item = &'static str> {
    INSTRUCTIONS
        .iter()
        .map(|s| s.name)
        .chain(INSTRUCTIONS.iter().flat_map(|s| s.aliases.iter().copied()))
}

/// The canonical names of `family`, in table order.
pub fn family_names(family: Family) -> Vec<&'static str> {
    INSTRUCTIONS
        .iter()
        .filter(|s| s.family == family)
        .map(|s| s.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every elementwise op. The match makes a new `ElementOp` variant a compile error here
    /// until it is listed, so the test below checks that it has a row.
    fn every_element_op() -> Vec<ElementOp> {
        use ElementOp::*;
        let all = vec![Add, Sub, Mul, Div, Mod, Min, Max, And, Or, Xor, Shl, Shr];
        for op in &all {
            match op {
                Add | Sub | Mul | Div | Mod | Min | Max | And | Or | Xor | Shl | Shr => {}
            }
        }
        all
    }

    #[test]
    fn spellings_are_unique_and_every_op_has_one_row() {
        let all: Vec<&str> = spellings().collect();
        let unique: HashSet<&str> = all.iter().copied().collect();
        assert_eq!(
            all.len(),
            unique.len(),
            "a spelling names two rows: {all:?}"
        );
        let ops: HashSet<Op> = INSTRUCTIONS.iter().map(|s| s.op).collect();
        assert_eq!(ops.len(), INSTRUCTIONS.len(), "an op has two rows");
        for op in every_element_op() {
            assert!(lookup(op.name()).is_some(), "{op:?}");
        }
        for op in MathOp::ALL {
            assert_eq!(of_op(Op::Math(op)).op, Op::Math(op));
        }
        for op in CmpOp::ALL {
            assert_eq!(of_op(Op::Compare(op)).op, Op::Compare(op));
        }
        assert_eq!(lookup("where_").map(|s| s.name), Some("select"));
        assert_eq!(ElementOp::Mod.name(), "rem");
        assert_eq!(lookup("mod").map(|s| s.name), Some("rem"));
        for s in INSTRUCTIONS {
            assert!(s.arity.0 <= s.arity.1, "{}", s.name);
            assert!(s.usage.contains(s.name) || s.aliases.iter().any(|a| s.usage.contains(a)));
        }
    }
}
