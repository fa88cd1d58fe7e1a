//! `dot` with shared operands (the warpgroup MMA on the GPU, `crate::verify::wgmma`): the same
//! value as every `dot`, `c + a · b`, with `b` read from shared memory and `a` from shared
//! memory or from registers (the RS form).
//!
//! Each warpgroup reads the shared operands it needs as its first thread would (so reading bytes
//! that another thread wrote since the last barrier is reported as a race, as a `load_shared`
//! is); a register `a` is read from the warpgroup's own threads. The sum is exact (f64 products
//! of 16- and 8-bit values and their sum of at most 2^53 terms are exact up to f64 rounding) and
//! rounded once to the accumulator's dtype; the GPU accumulates floats in f32 in an unspecified
//! order. Integer sums (`i8`/`u8` into `i32`) are exact, and one that overflows `i32` is an
//! error here (the GPU would wrap it).

use super::super::memory::{RegTensor, Value};
use super::super::numeric::{encode_float, encode_int, is_int};
use super::super::{Block, Machine};
use crate::ir::{Instruction, VarId};
use std::ops::Range;

/// One `dot_async` in flight: its accumulator, its register `a` (the RS form), and the shared
/// bytes each warpgroup's first thread reads (retired into ordinary reads by `dot_wait`).
pub(in crate::interp) struct PendingDot {
    pub acc: VarId,
    pub a_reg: Option<VarId>,
    pub reads: Vec<(usize, Range<usize>)>,
}

impl Machine<'_> {
    /// While `dot_async`s are in flight their accumulators may only feed further `dot_async`s
    /// (as `c` and `out` at once).
    pub(in crate::interp) fn check_pending_dots(
        &self,
        ins: &Instruction,
        block: &Block,
    ) -> Result<(), String> {
        let chained =
            |v: VarId| matches!(ins, Instruction::DotAsync { out, c, .. } if *out == v && *c == v);
        for v in ins.inputs().into_iter().chain(ins.outputs()) {
            if block.pending_dots.iter().any(|d| d.acc == v) && !chained(v) {
                return Err(format!(
                    "`{}` is used while a dot_async into it is in flight; missing dot_wait?",
                    self.name(v)
                ));
            }
        }
        // The tensor cores read a register `a` until the wait (PTX: the A registers of an
        // in-flight wgmma must not be modified); reading it is fine.
        for v in ins.outputs() {
            if block.pending_dots.iter().any(|d| d.a_reg == Some(v)) {
                return Err(format!(
                    "`{}` is written while a dot_async reading it from registers is in flight; missing dot_wait?",
                    self.name(v)
                ));
            }
        }
        Ok(())
    }

    /// The value of a shared-operand `dot`; with `in_flight`, the operand reads are in-flight
    /// reads (`dot_async`) whose bytes are pushed there per reading thread.
    pub(in crate::interp) fn dot_shared(
        &mut self,
        block: &mut Block,
        a: VarId,
        b: VarId,
        c: VarId,
        mut in_flight: Option<&mut Vec<(usize, Range<usize>)>>,
    ) -> Result<RegTensor, String> {
        // `a` in registers (the RS form, with its layout's table) or shared.
        let a_op = match self.value(block, a)? {
            Value::Reg(r) => {
                let r = r.clone();
                let t = self.table(&r.layout.clone())?;
                Ok((r, t))
            }
            _ => Err(self.shared(block, a)?),
        };
        let vb = self.shared(block, b)?;
        let rc = self.reg(block, c)?.clone();
        let tc = self.table(&rc.layout.clone())?;
        let (m, k) = match &a_op {
            Ok((_, t)) => (t.shape[0], t.shape[1]),
            Err(v) => (v.layout.shape[0], v.layout.shape[1]),
        };
        let n = vb.layout.shape[1];
        let (an, bn, cn) = (
            self.name(a).to_string(),
            self.name(b).to_string(),
            self.name(c).to_string(),
        );
        let bt = self.block_threads;
        let mut result = RegTensor::new(rc.dtype, rc.layout.clone(), bt);
        // Operands as the first thread of each warpgroup reads them.
        for wg in 0..bt.div_ceil(128) {
            let reader = wg * 128;
            let mut av = vec![0f64; m * k];
            let mut bv = vec![0f64; k * n];
            let mut read = |view, name: &str, index: &[usize]| match in_flight.as_deref_mut() {
                None => block.shared.read(reader, view, name, index),
                Some(reads) => {
                    let (code, bytes) = block.shared.dot_read(reader, view, name, index)?;
                    reads.push((reader, bytes));
                    Ok(code)
                }
            };
            // Which elements of `a` the warpgroup holds (all of a shared one).
            let mut have = vec![true; m * k];
            match &a_op {
                Err(va) => {
                    for i in 0..m {
                        for kk in 0..k {
                            av[i * k + kk] = va.dtype.decode(read(va, &an, &[i, kk])?);
                        }
                    }
                }
                Ok((ra, ta)) => {
                    have.fill(false);
                    for t in reader..(reader + 128).min(bt) {
                        for l in 0..ta.locals {
                            let f = ta.at(t % ta.threads, l);
                            if !have[f] {
                                have[f] = true;
                                av[f] = ra.dtype.decode(ra.get(t, l));
                            }
                        }
                    }
                }
            }
            for kk in 0..k {
                for j in 0..n {
                    bv[kk * n + j] = vb.dtype.decode(read(&vb, &bn, &[kk, j])?);
                }
            }
            for t in reader..(reader + 128).min(bt) {
                for l in 0..tc.locals {
                    let f = tc.at(t % tc.threads, l);
                    let (mi, ni) = (f / n, f % n);
                    let mut sum = rc.dtype.decode(rc.get(t, l));
                    for kk in 0..k {
                        if !have[mi * k + kk] {
                            return Err(format!(
                                "warpgroup {wg} does not hold `{an}`[{mi}, {kk}] in registers"
                            ));
                        }
                        sum += av[mi * k + kk] * bv[kk * n + ni];
                    }
                    let code = if is_int(rc.dtype) {
                        encode_int(rc.dtype, sum as i64)
                    } else {
                        encode_float(rc.dtype, sum)
                    }
                    .map_err(|e| format!("`{cn}`[{mi}, {ni}]: {e}"))?;
                    result.set(t, l, code);
                }
            }
        }
        Ok(result)
    }
}
