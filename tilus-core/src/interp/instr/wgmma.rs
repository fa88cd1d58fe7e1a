//! `dot` with shared operands (the warpgroup MMA on the GPU, `crate::verify::wgmma`): the same
//! value as every `dot`, `c + a · b`, with `a` and `b` read from shared memory.
//!
//! Each warpgroup reads the operands it needs as its first thread would (so reading bytes that
//! another thread wrote since the last barrier is reported as a race, as a `load_shared` is).
//! The sum is exact (f64 products of f16/bf16 values and their sum of at most 2^53 terms are
//! exact up to f64 rounding) and rounded once to the accumulator's dtype; the GPU accumulates in
//! f32 in an unspecified order.

use super::super::memory::RegTensor;
use super::super::numeric::encode_float;
use super::super::{Block, Machine};
use crate::ir::VarId;

impl Machine<'_> {
    pub(in crate::interp) fn dot_shared(
        &mut self,
        block: &mut Block,
        a: VarId,
        b: VarId,
        c: VarId,
    ) -> Result<RegTensor, String> {
        let (va, vb) = (self.shared(block, a)?, self.shared(block, b)?);
        let rc = self.reg(block, c)?.clone();
        let tc = self.table(&rc.layout.clone())?;
        let (m, k, n) = (va.layout.shape[0], va.layout.shape[1], vb.layout.shape[1]);
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
            for i in 0..m {
                for kk in 0..k {
                    let code = block.shared.read(reader, &va, &an, &[i, kk])?;
                    av[i * k + kk] = va.dtype.decode(code);
                }
            }
            for kk in 0..k {
                for j in 0..n {
                    let code = block.shared.read(reader, &vb, &bn, &[kk, j])?;
                    bv[kk * n + j] = vb.dtype.decode(code);
                }
            }
            for t in reader..(reader + 128).min(bt) {
                for l in 0..tc.locals {
                    let f = tc.at(t % tc.threads, l);
                    let (mi, ni) = (f / n, f % n);
                    let mut sum = rc.dtype.decode(rc.get(t, l));
                    for kk in 0..k {
                        sum += av[mi * k + kk] * bv[kk * n + ni];
                    }
                    let code = encode_float(rc.dtype, sum)
                        .map_err(|e| format!("`{cn}`[{mi}, {ni}]: {e}"))?;
                    result.set(t, l, code);
                }
            }
        }
        Ok(result)
    }
}
