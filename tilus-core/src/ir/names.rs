//! Names of instructions and operators as the `#[kernel]` syntax spells them, for diagnostics
//! (verifier, interpreter, codegen errors). Additive to the IR; nothing here changes semantics.

use super::syntax::{self, Op};
use super::{BinaryOp, ElementOp, Instruction, ScalarType};

impl Instruction {
    /// The instruction's name in kernel syntax (its row of [`syntax::INSTRUCTIONS`]):
    /// `load_global`, `dot`, `copy_async_wait_group`... Elementwise arithmetic is named by its
    /// operator (`add`, `mul`, ...).
    pub fn name(&self) -> &'static str {
        syntax::of_op(self.op()).name
    }

    /// The table row kind that builds this instruction.
    pub fn op(&self) -> Op {
        match self {
            Instruction::BlockIndices { .. } => Op::BlockIndices,
            Instruction::AllocateGlobal { .. } => Op::AllocateGlobal,
            Instruction::AllocateShared { .. } => Op::AllocateShared,
            Instruction::AllocateRegister { .. } => Op::AllocateRegister,
            Instruction::ViewGlobal { .. } => Op::ViewGlobal,
            Instruction::LoadGlobal { .. } => Op::LoadGlobal,
            Instruction::StoreGlobal { .. } => Op::StoreGlobal,
            Instruction::LoadShared { .. } => Op::LoadShared,
            Instruction::StoreShared { .. } => Op::StoreShared,
            Instruction::SliceShared { .. } => Op::SliceShared,
            Instruction::PermuteShared { .. } => Op::PermuteShared,
            Instruction::CopyAsync { .. } => Op::CopyAsync,
            Instruction::CopyAsyncCommitGroup => Op::CommitGroup,
            Instruction::CopyAsyncWaitGroup { .. } => Op::WaitGroup,
            Instruction::Binary { op, .. } => op.syntax_op(),
            Instruction::MulAdd { .. } => Op::MulAdd,
            Instruction::Neg { .. } => Op::Neg,
            Instruction::Unary { op, .. } => Op::Math(*op),
            Instruction::Compare { op, .. } => Op::Compare(*op),
            Instruction::Select { .. } => Op::Select,
            Instruction::Arange { .. } => Op::Arange,
            Instruction::Cast { biased: false, .. } => Op::Cast,
            Instruction::Cast { biased: true, .. } => Op::CastBiased,
            Instruction::View { .. } => Op::View,
            Instruction::Dot { .. } => Op::Dot,
            Instruction::PlaneDot { .. } => Op::PlaneDot,
            Instruction::DotAsync { .. } => Op::DotAsync,
            Instruction::DotWait { .. } => Op::DotWait,
            Instruction::Mbarriers { .. } => Op::Mbarriers,
            Instruction::TmaLoad { .. } => Op::TmaLoad,
            Instruction::TmaStore { .. } => Op::TmaStore,
            Instruction::TmaStoreWait => Op::TmaStoreWait,
            Instruction::MbarrierArrive { .. } => Op::MbarrierArrive,
            Instruction::MbarrierWait { .. } => Op::MbarrierWait,
            Instruction::Reduce { op, .. } => Op::Reduce(*op),
            Instruction::Scan { op, .. } => Op::Scan(*op),
            Instruction::Synchronize => Op::Synchronize,
            Instruction::Fence => Op::Fence,
            Instruction::GridDependency(g) => Op::GridDependency(*g),
            Instruction::Exit => Op::Exit,
            Instruction::Print { .. } => Op::Print,
            Instruction::Item { .. } => Op::Item,
            Instruction::Gather { .. } => Op::Gather,
            Instruction::Lookup { .. } => Op::Lookup,
            Instruction::GatherRows { .. } => Op::GatherRows,
            Instruction::Scatter { .. } => Op::Scatter,
            Instruction::ScatterRows { .. } => Op::ScatterRows,
            Instruction::Atomic { op, .. } => Op::Atomic(*op),
        }
    }
}

impl ElementOp {
    /// The instruction's name in kernel syntax (`add`, `rem`, `min`, ...).
    pub fn name(self) -> &'static str {
        syntax::of_op(self.syntax_op()).name
    }

    fn syntax_op(self) -> Op {
        match self {
            ElementOp::Min | ElementOp::Max => Op::MinMax(self),
            _ => Op::Binary(self),
        }
    }
}

impl super::MathOp {
    /// The instruction's name in kernel syntax (`exp`, `popc`, ...).
    pub fn name(self) -> &'static str {
        syntax::of_op(Op::Math(self)).name
    }
}

impl super::CmpOp {
    /// The instruction's name in kernel syntax (`lt`, `eq`, ...).
    pub fn name(self) -> &'static str {
        syntax::of_op(Op::Compare(self)).name
    }
}

impl BinaryOp {
    /// Whether the result is a `bool` (comparisons, `&&`, `||`).
    pub fn yields_bool(self) -> bool {
        matches!(
            self,
            BinaryOp::Lt
                | BinaryOp::Le
                | BinaryOp::Gt
                | BinaryOp::Ge
                | BinaryOp::Eq
                | BinaryOp::Ne
                | BinaryOp::And
                | BinaryOp::Or
        )
    }

    /// The elementwise operator that computes this one on integer or float tensors
    /// (arithmetic, `min`/`max`, bit operators); `None` for comparisons and logic.
    pub fn element_op(self) -> Option<ElementOp> {
        Some(match self {
            BinaryOp::Add => ElementOp::Add,
            BinaryOp::Sub => ElementOp::Sub,
            BinaryOp::Mul => ElementOp::Mul,
            BinaryOp::Div => ElementOp::Div,
            BinaryOp::Mod => ElementOp::Mod,
            BinaryOp::Min => ElementOp::Min,
            BinaryOp::Max => ElementOp::Max,
            BinaryOp::BitAnd => ElementOp::And,
            BinaryOp::BitOr => ElementOp::Or,
            BinaryOp::BitXor => ElementOp::Xor,
            BinaryOp::Shl => ElementOp::Shl,
            BinaryOp::Shr => ElementOp::Shr,
            _ => return None,
        })
    }

    /// The operator as written in source (`+`, `<=`, `&&`, `min`...).
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Min => "min",
            BinaryOp::Max => "max",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::And => "&&",
            BinaryOp::Or => "||",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
        }
    }
}

impl ScalarType {
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::I32 => "i32",
            ScalarType::F32 => "f32",
            ScalarType::I64 => "i64",
            ScalarType::Bool => "bool",
        }
    }
}
