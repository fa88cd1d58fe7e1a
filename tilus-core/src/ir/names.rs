//! Names of instructions and operators as the `#[kernel]` syntax spells them, for diagnostics
//! (verifier, interpreter, codegen errors). Additive to the IR; nothing here changes semantics.

use super::{BinaryOp, ElementOp, Instruction, ScalarType};

impl Instruction {
    /// The instruction's name in kernel syntax: `load_global`, `dot`, `copy_async_wait_group`...
    /// Elementwise arithmetic is named by its operator (`add`, `mul`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Instruction::BlockIndices { .. } => "block_indices",
            Instruction::AllocateGlobal { .. } => "allocate_global",
            Instruction::AllocateShared { .. } => "allocate_shared",
            Instruction::AllocateRegister { .. } => "register",
            Instruction::ViewGlobal { .. } => "view_global",
            Instruction::LoadGlobal { .. } => "load_global",
            Instruction::StoreGlobal { .. } => "store_global",
            Instruction::LoadShared { .. } => "load_shared",
            Instruction::StoreShared { .. } => "store_shared",
            Instruction::SliceShared { .. } => "slice_shared",
            Instruction::CopyAsync { .. } => "copy_async",
            Instruction::CopyAsyncCommitGroup => "copy_async_commit_group",
            Instruction::CopyAsyncWaitGroup { .. } => "copy_async_wait_group",
            Instruction::Binary { op, .. } => op.name(),
            Instruction::MulAdd { .. } => "mul_add",
            Instruction::Neg { .. } => "neg",
            Instruction::Cast { .. } => "cast",
            Instruction::View { .. } => "view",
            Instruction::Dot { .. } => "dot",
            Instruction::Synchronize => "synchronize",
            Instruction::Exit => "exit",
            Instruction::Print { .. } => "print",
        }
    }
}

impl ElementOp {
    pub fn name(self) -> &'static str {
        match self {
            ElementOp::Add => "add",
            ElementOp::Sub => "sub",
            ElementOp::Mul => "mul",
            ElementOp::Div => "div",
            ElementOp::Mod => "mod",
            ElementOp::Min => "min",
            ElementOp::Max => "max",
        }
    }
}

impl BinaryOp {
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
        }
    }
}

impl ScalarType {
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::I32 => "i32",
            ScalarType::Bool => "bool",
        }
    }
}
