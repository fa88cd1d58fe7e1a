//! `reduce` and `cumsum`: exact reductions and scans along one dimension (the semantics of
//! [`ReduceOp`]).
//!
//! The operand is read as a logical tile (each element from its lowest `(thread, local)` owner;
//! replicas hold equal values), each row along `dim` is reduced exactly, and every thread gets
//! the results its locals of the result layout name. Float sums are computed exactly (Shewchuk's
//! partials, as in Python's `math.fsum`), rounded to `f64`, then encoded through `f32` to the
//! dtype; integer sums are exact and an out-of-range result is an error.

use super::memory::{RegTensor, Value};
use super::numeric::{decode_int, encode_float, encode_int, is_int};
use super::{Block, Machine};
use crate::ir::{ReduceOp, VarId};
use crate::verify::table::{ravel, unravel};

impl Machine<'_> {
    pub(super) fn reduce(
        &mut self,
        block: &mut Block,
        out: VarId,
        x: VarId,
        op: ReduceOp,
        dim: usize,
    ) -> Result<(), String> {
        let (dtype, out_layout) = match self.p.ty(out).as_register() {
            Some(r) => (r.dtype, r.layout.clone()),
            None => {
                return Err(format!(
                    "`{}` is not a register tensor",
                    self.p.var(out).name
                ))
            }
        };
        let xd = match block.env[x.0 as usize].as_ref() {
            Some(Value::Reg(r)) => r.dtype,
            _ => return Err(format!("`{}` is not a register tensor", self.p.var(x).name)),
        };
        let (codes, shape) = self.logical_codes(block, x)?;
        let n = shape[dim];
        let mut out_shape = shape.clone();
        out_shape[dim] = 1;
        let rows: usize = out_shape.iter().product();
        let mut results = Vec::with_capacity(rows);
        for o in 0..rows {
            let mut index = unravel(o, &out_shape);
            let mut row = Vec::with_capacity(n);
            for k in 0..n {
                index[dim] = k;
                let f = ravel(&index, &shape).expect("inside the shape");
                row.push(codes[f]);
            }
            index[dim] = 0;
            let code = reduce_row(op, xd, dtype, &row)
                .map_err(|e| format!("row {index:?} of `{}`: {e}", self.p.var(x).name))?;
            results.push(code);
        }
        let result = self.distribute(dtype, out_layout, &results)?;
        block.env[out.0 as usize] = Some(Value::Reg(result));
        Ok(())
    }
}

impl Machine<'_> {
    /// `cumsum(x, dim)`: element `k` of each row is the exact sum of elements `0..=k`, rounded
    /// as `sum` rounds (integers: exact, an out-of-range prefix is an error).
    pub(super) fn scan(
        &mut self,
        block: &mut Block,
        out: VarId,
        x: VarId,
        dim: usize,
    ) -> Result<(), String> {
        let (xd, layout) = match block.env[x.0 as usize].as_ref() {
            Some(Value::Reg(r)) => (r.dtype, r.layout.clone()),
            _ => return Err(format!("`{}` is not a register tensor", self.p.var(x).name)),
        };
        let (codes, shape) = self.logical_codes(block, x)?;
        let mut out_shape = shape.clone();
        out_shape[dim] = 1;
        let rows: usize = out_shape.iter().product();
        let mut results = vec![0u32; codes.len()];
        for o in 0..rows {
            let mut index = unravel(o, &out_shape);
            let mut prefix: Vec<u32> = Vec::with_capacity(shape[dim]);
            for k in 0..shape[dim] {
                index[dim] = k;
                let f = ravel(&index, &shape).expect("inside the shape");
                prefix.push(codes[f]);
                results[f] = reduce_row(ReduceOp::Sum, xd, xd, &prefix).map_err(|e| {
                    format!("element {index:?} of cumsum(`{}`): {e}", self.p.var(x).name)
                })?;
            }
        }
        let result = self.distribute(xd, layout, &results)?;
        block.env[out.0 as usize] = Some(Value::Reg(result));
        Ok(())
    }
}

/// The code of `op` over the codes `row` of `xd` elements, as a `dtype` code.
fn reduce_row(
    op: ReduceOp,
    xd: crate::DType,
    dtype: crate::DType,
    row: &[u32],
) -> Result<u32, String> {
    match op {
        ReduceOp::Sum if is_int(xd) => {
            let mut s = 0i64;
            for &c in row {
                s = s
                    .checked_add(decode_int(xd, c))
                    .ok_or("the sum overflows i64")?;
            }
            encode_int(dtype, s)
        }
        ReduceOp::Sum => {
            let vals: Vec<f64> = row.iter().map(|&c| xd.decode(c)).collect();
            encode_float(dtype, exact_sum(&vals)?)
        }
        // Max, min, any (max of 0/1) and all (min of 0/1) keep an operand's code: the first
        // (lowest index) of the extreme values.
        ReduceOp::Max | ReduceOp::Any => Ok(row[extreme(xd, row, |a, b| a > b)]),
        ReduceOp::Min | ReduceOp::All => Ok(row[extreme(xd, row, |a, b| a < b)]),
        ReduceOp::ArgMax => encode_int(dtype, extreme(xd, row, |a, b| a > b) as i64),
    }
}

/// Index of the first element `better` than every earlier one (ties keep the smaller index).
fn extreme(xd: crate::DType, row: &[u32], better: impl Fn(f64, f64) -> bool) -> usize {
    let mut best = 0;
    for k in 1..row.len() {
        if better(xd.decode(row[k]), xd.decode(row[best])) {
            best = k;
        }
    }
    best
}

/// The exact sum of `vals` rounded to `f64` (Shewchuk's non-overlapping partials); an error
/// for NaN, or infinities of both signs.
pub(crate) fn exact_sum(vals: &[f64]) -> Result<f64, String> {
    let mut partials: Vec<f64> = Vec::new();
    let mut special = 0.0f64;
    for &v in vals {
        if !v.is_finite() {
            special += v;
            if special.is_nan() {
                return Err("the sum is NaN (infinities of both signs, or a NaN)".into());
            }
            continue;
        }
        let mut x = v;
        let mut kept = 0;
        for k in 0..partials.len() {
            let mut y = partials[k];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        partials.truncate(kept);
        partials.push(x);
    }
    if special != 0.0 {
        return Ok(special);
    }
    // Add the partials from the largest down, correcting the final rounding (fsum's tail).
    let Some(mut hi) = partials.pop() else {
        return Ok(0.0);
    };
    let mut lo = 0.0;
    while let Some(y) = partials.pop() {
        let x = hi;
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    if let Some(&next) = partials.last() {
        if (lo < 0.0 && next < 0.0) || (lo > 0.0 && next > 0.0) {
            let y = lo * 2.0;
            let x = hi + y;
            if y == x - hi {
                hi = x;
            }
        }
    }
    Ok(hi)
}

impl Machine<'_> {
    /// `plane_dot(w, a, dim)`: each result element is the exact
    /// `Σ_{p, q, j} popc(w[p, .., j, ..] & a[q, .., j, ..]) << (p + q)` of the operands' logical
    /// tiles (`a` broadcast along its extent-1 dims past 0), which the verifier bounds below
    /// `2^31`.
    pub(super) fn plane_dot(
        &mut self,
        block: &mut Block,
        out: VarId,
        w: VarId,
        a: VarId,
        dim: usize,
    ) -> Result<(), String> {
        let out_layout = match self.p.ty(out).as_register() {
            Some(r) => r.layout.clone(),
            None => {
                return Err(format!(
                    "`{}` is not a register tensor",
                    self.p.var(out).name
                ))
            }
        };
        let (wc, ws) = self.logical_codes(block, w)?;
        let (ac, as_) = self.logical_codes(block, a)?;
        let mut out_shape = ws.clone();
        out_shape[0] = 1;
        out_shape[dim] = 1;
        let rows: usize = out_shape.iter().product();
        let mut results = Vec::with_capacity(rows);
        for o in 0..rows {
            let base = unravel(o, &out_shape);
            let mut total: i64 = 0;
            for p in 0..ws[0] {
                for q in 0..as_[0] {
                    for j in 0..ws[dim] {
                        let mut wi = base.clone();
                        wi[0] = p;
                        wi[dim] = j;
                        let ai: Vec<usize> = (0..ws.len())
                            .map(|d| match d {
                                0 => q,
                                _ if as_[d] == 1 => 0,
                                _ => wi[d],
                            })
                            .collect();
                        let x = wc[ravel(&wi, &ws).expect("inside w")]
                            & ac[ravel(&ai, &as_).expect("inside a")];
                        total += (x.count_ones() as i64) << (p + q);
                    }
                }
            }
            let v = i32::try_from(total).map_err(|_| {
                format!(
                    "plane_dot(`{}`, `{}`): result {base:?} is {total}, past i32",
                    self.p.var(w).name,
                    self.p.var(a).name
                )
            })?;
            results.push(v as u32);
        }
        let result = self.distribute(crate::DType::Int(32), out_layout, &results)?;
        block.env[out.0 as usize] = Some(Value::Reg(result));
        Ok(())
    }

    /// The codes of register tensor `x` as its logical tile (each element from its lowest
    /// owner), with the tile's shape.
    fn logical_codes(&mut self, block: &Block, x: VarId) -> Result<(Vec<u32>, Vec<usize>), String> {
        let xr = match block.env[x.0 as usize].as_ref() {
            Some(Value::Reg(r)) => r,
            _ => return Err(format!("`{}` is not a register tensor", self.p.var(x).name)),
        };
        let tx = self.table(&xr.layout.clone())?;
        let codes = tx
            .first_owner
            .iter()
            .enumerate()
            .map(|(f, o)| {
                o.map(|(t, i)| xr.get(t as usize, i as usize))
                    .ok_or_else(|| {
                        format!(
                            "no thread holds element {:?} of `{}`",
                            unravel(f, &tx.shape),
                            self.p.var(x).name
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok((codes, tx.shape.clone()))
    }

    /// A register tensor in `layout` whose every thread holds, at each local, the code of its
    /// element in `values` (the logical tile, row-major).
    fn distribute(
        &mut self,
        dtype: crate::DType,
        layout: crate::layout::Layout,
        values: &[u32],
    ) -> Result<RegTensor, String> {
        let bt = self.block_threads;
        let tab = self.table(&layout)?;
        let mut result = RegTensor::new(dtype, layout, bt);
        for t in 0..bt {
            for j in 0..tab.locals {
                result.set(t, j, values[tab.at(t % tab.threads, j)]);
            }
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sum_cancels() {
        assert_eq!(exact_sum(&[1e100, 1.0, -1e100]).unwrap(), 1.0);
        assert_eq!(exact_sum(&[0.1; 10]).unwrap(), 1.0);
        assert_eq!(exact_sum(&[]).unwrap(), 0.0);
        assert!(exact_sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_err());
        assert_eq!(exact_sum(&[f64::INFINITY, 1.0]).unwrap(), f64::INFINITY);
    }
}
