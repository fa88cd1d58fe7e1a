//! Elementwise math (`exp`, `sqrt`, `not`, `popc`, ...), shifts, comparisons, `select` and
//! `arange` (see `crate::ir::MathOp` for the exact definitions and accuracy).

use super::memory::{RegTensor, Value};
use super::numeric::{convert, encode_float, encode_int, is_int};
use super::{Block, Machine};
use crate::ir::{CmpOp, ElementOp, Expr, MathOp, Operand, VarId};
use crate::layout::Layout;
use crate::verify::table::{unravel, ThreadMap, NONE};
use crate::DType;

/// `x << y` (the code shifted within the dtype's bits, high bits dropped) or `x >> y`
/// (arithmetic for signed types, logical for unsigned: `x` is the decoded value). The amount
/// must lie in `0..bits`.
pub(super) fn shift(op: ElementOp, dtype: DType, x: i64, y: i64) -> Result<u32, String> {
    let bits = dtype.bits() as i64;
    if !(0..bits).contains(&y) {
        return Err(format!("shift amount {y} is outside 0..{bits} for {dtype}"));
    }
    if op == ElementOp::Shl {
        Ok(((x << y) as u32) & dtype.code_mask())
    } else {
        encode_int(dtype, x >> y)
    }
}

/// One element of `op` on a code of `dtype`.
fn math_code(op: MathOp, dtype: DType, code: u32) -> Result<u32, String> {
    match op {
        MathOp::Not => Ok(!code & dtype.code_mask()),
        MathOp::Popc => {
            let n = (code & dtype.code_mask()).count_ones() as i64;
            encode_int(dtype, n)
        }
        _ => {
            // Exact in f64 from the f32 input, rounded to f32, then to the dtype.
            let x = dtype.decode(code) as f32 as f64;
            let r = op.eval_f64(x);
            if r.is_nan() {
                return Err(format!("{}({x}) is NaN", op.name()));
            }
            encode_float(dtype, r as f32 as f64)
        }
    }
}

impl Machine<'_> {
    pub(super) fn math(
        &mut self,
        block: &Block,
        op: MathOp,
        x: VarId,
    ) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let x = self.reg(block, x)?;
        if op.is_integer() != is_int(x.dtype) {
            return Err(format!(
                "{} is not defined for {} tensors",
                op.name(),
                x.dtype
            ));
        }
        let mut result = RegTensor::new(x.dtype, x.layout.clone(), bt);
        for t in 0..bt {
            for i in 0..x.layout.num_locals() {
                result.set(t, i, math_code(op, x.dtype, x.get(t, i))?);
            }
        }
        Ok(result)
    }

    pub(super) fn compare(
        &mut self,
        block: &Block,
        op: CmpOp,
        lhs: VarId,
        rhs: &Operand,
    ) -> Result<RegTensor, String> {
        // Scalars compare exactly, immediates after conversion to the dtype (`elementwise`).
        self.elementwise_to(
            block,
            lhs,
            rhs,
            true,
            |_, _, x, y| Ok(op.holds(x, y) as u32),
        )
    }

    pub(super) fn select(
        &mut self,
        block: &Block,
        cond: VarId,
        a: VarId,
        b: &Operand,
    ) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let ra = self.reg(block, a)?.clone();
        let dtype = ra.dtype;
        let c = broadcast_codes(self, block, &ra.layout, cond)?;
        let other: Vec<Vec<u32>> = match b {
            Operand::Tensor(v) => broadcast_codes(self, block, &ra.layout, *v)?,
            Operand::Scalar(e) => {
                let v = self.scalar_operand(e, block)?;
                vec![vec![super::instr::scalar_code(v, dtype)?; ra.layout.num_locals()]; bt]
            }
            Operand::Imm(v) => vec![vec![convert(*v, dtype)?; ra.layout.num_locals()]; bt],
        };
        let mut result = RegTensor::new(dtype, ra.layout.clone(), bt);
        for t in 0..bt {
            for j in 0..ra.layout.num_locals() {
                let code = if c[t][j] != 0 {
                    ra.get(t, j)
                } else {
                    other[t][j]
                };
                result.set(t, j, code);
            }
        }
        Ok(result)
    }

    pub(super) fn arange(
        &mut self,
        block: &Block,
        layout: &Layout,
        dim: usize,
        offset: &Expr,
    ) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let offset = self.eval_i32(offset, block, "the offset")? as i64;
        let tab = self.table(layout)?;
        if dim >= tab.shape.len() {
            return Err(format!(
                "dimension {dim} is outside the layout's rank {}",
                tab.shape.len()
            ));
        }
        let mut result = RegTensor::new(DType::Int(32), layout.clone(), bt);
        for t in 0..bt {
            for i in 0..tab.locals {
                let index = unravel(tab.at(t % tab.threads, i), &tab.shape);
                let v = index[dim] as i64 + offset;
                result.set(t, i, encode_int(DType::Int(32), v)?);
            }
        }
        Ok(result)
    }
}

/// For each block thread and each local of a tensor in layout `l`, the code of register tensor
/// `r` at the broadcast index (the verifier's thread-local broadcast condition puts it in the
/// same thread).
pub(super) fn broadcast_codes(
    m: &mut Machine<'_>,
    block: &Block,
    l: &Layout,
    r: VarId,
) -> Result<Vec<Vec<u32>>, String> {
    let bt = m.block_threads;
    let tl = m.table(l)?;
    let name = m.p.var(r).name.clone();
    let rr = match block.env[r.0 as usize].as_ref() {
        Some(Value::Reg(x)) => x,
        _ => return Err(format!("`{name}` is not a register tensor")),
    };
    let tr = m.table(&rr.layout.clone())?;
    let mut map = ThreadMap::default();
    let mut out = vec![vec![0u32; tl.locals]; bt];
    for (t, row) in out.iter_mut().enumerate() {
        tr.thread_map(t % tr.threads, &mut map);
        for (j, slot) in row.iter_mut().enumerate() {
            let li = unravel(tl.at(t % tl.threads, j), &tl.shape);
            if tr.shape.len() > li.len() {
                return Err(format!(
                    "`{name}` has a higher rank than the tensor it broadcasts to"
                ));
            }
            let lead = li.len() - tr.shape.len();
            let mut flat = 0;
            for (&n, &i) in tr.shape.iter().zip(&li[lead..]) {
                flat = flat * n + if n == 1 { 0 } else { i };
            }
            let local = map[flat];
            if local == NONE {
                return Err(format!(
                    "thread {t} does not hold `{name}` for its local {j}"
                ));
            }
            *slot = rr.get(t, local as usize);
        }
    }
    Ok(out)
}
