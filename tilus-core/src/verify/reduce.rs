//! Reductions of register tensors: which operand types each [`ReduceOp`] accepts, and the
//! lowering plan the code generator follows (and whose shared-memory scratch the verifier counts
//! against the target).
//!
//! The plan reads the layout's canonical form (`crate::layout`). Reducing dimension `dim`:
//! 1. **thread-local**: each thread combines its locals that differ only in the local digits
//!    of `dim` (they map to the same local of the result);
//! 2. **warp shuffles**: a thread digit of `dim` whose size and place value are powers of two
//!    and lies inside the lane bits (place values below 32) is combined by a butterfly of
//!    `__shfl_xor_sync` over its bits (the part of a digit above bit 4 goes to stage 3);
//! 3. **shared memory**: the remaining thread digits of `dim` (across warps, or of sizes or
//!    places that are not powers of two) are combined through a scratch area: each thread writes
//!    its partial, a barrier, then every thread reads the partials of its row in one fixed order
//!    (so all holders of a row compute the same bits), and a barrier before the scratch is reused.
//!
//! Replication digits of the operand need no combining (replicas hold equal values) and block
//! threads beyond the layout's are replicas of thread `t % threads`. Every layout lowers; the
//! scratch takes `slots * out_locals * (value bytes + index bytes)`, which must fit the target's
//! shared memory together with the kernel's shared tensors.

use crate::ir::ReduceOp;
use crate::layout::{Digit, Layout};
use crate::DType;

/// Lane bits of a warp.
const LANE_BITS: u32 = 5;

/// How one reduction is lowered; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReducePlan {
    /// Per local of the result, the operand's locals combined into it (ascending).
    pub groups: Vec<Vec<usize>>,
    /// Per local of the operand, its coordinate along `dim` on thread 0 (the thread's own part
    /// is added at run time for `argmax`).
    pub local_coord: Vec<usize>,
    /// Xor masks of the shuffle butterfly, ascending (bits of the layout thread index).
    pub lane_masks: Vec<usize>,
    /// `(place, size)` of each thread digit of `dim` combined through shared memory, in units
    /// of layout threads.
    pub shared_digits: Vec<(usize, usize)>,
    /// Threads of the layout.
    pub threads: usize,
    /// Scratch slots (one per layout thread, less the bits the butterfly combined).
    pub slots: usize,
}

impl ReducePlan {
    /// Number of results per thread.
    pub fn out_locals(&self) -> usize {
        self.groups.len()
    }

    /// Bits `[0, top)` of the layout thread index hold every shuffle bit, `top` 0 if none.
    pub fn lane_top(&self) -> u32 {
        self.lane_masks
            .iter()
            .map(|m| m.trailing_zeros() + 1)
            .max()
            .unwrap_or(0)
    }

    /// The scratch slot of layout thread `r`: `r` with the shuffle bits squeezed out.
    pub fn slot_of(&self, r: usize) -> usize {
        let top = self.lane_top();
        let mut slot = r >> top;
        for b in (0..top).rev() {
            if !self.lane_masks.contains(&(1 << b)) {
                slot = (slot << 1) | ((r >> b) & 1);
            }
        }
        slot
    }

    /// Bytes of shared scratch the plan needs for `op` (0 without stage 3): 4 per partial in
    /// every dtype (floats in f32, integers in 32 bits).
    pub fn scratch_bytes(&self, op: ReduceOp) -> usize {
        if self.shared_digits.is_empty() {
            return 0;
        }
        let index = if op == ReduceOp::ArgMax { 4 } else { 0 };
        self.slots * self.out_locals() * (4 + index)
    }
}

/// The plan for reducing `layout` along `dim` (`dim < rank`).
pub fn plan_reduce(layout: &Layout, dim: usize) -> Result<ReducePlan, String> {
    if dim >= layout.rank() {
        return Err(format!(
            "dim {dim} is out of range for a tensor of rank {}",
            layout.rank()
        ));
    }
    let modes = layout.modes();
    // Local digits: those of `dim` are combined, the others index the result's locals.
    let ldig = layout.local_digits();
    let locals = layout.num_locals();
    let mut out_sizes = Vec::new();
    for &id in ldig {
        if modes[id].dim != dim {
            out_sizes.push(modes[id].size);
        }
    }
    let out_locals: usize = out_sizes.iter().product();
    let mut groups = vec![Vec::new(); out_locals];
    let mut local_coord = vec![0; locals];
    for (i, coord) in local_coord.iter_mut().enumerate() {
        // Split `i` into its digits, least significant first.
        let (mut rest, mut out, mut place) = (i, 0, 1);
        for &id in ldig.iter().rev() {
            let m = modes[id];
            let v = rest % m.size;
            rest /= m.size;
            if m.dim == dim {
                *coord += v * m.stride;
            } else {
                out += v * place;
                place *= m.size;
            }
        }
        groups[out].push(i);
    }
    // Thread digits of `dim`, with their place values.
    let threads = layout.num_threads();
    let mut lane_masks = Vec::new();
    let mut shared_digits = Vec::new();
    let mut place = 1usize;
    for &d in layout.spatial_digits().iter().rev() {
        let size = layout.digit_size(d);
        if let Digit::Mode(id) = d {
            if modes[id].dim == dim {
                let pow2 = place.is_power_of_two() && size.is_power_of_two();
                if pow2 && place < 1 << LANE_BITS {
                    let lo = place.trailing_zeros();
                    let hi = (place * size).trailing_zeros();
                    for b in lo..hi.min(LANE_BITS) {
                        lane_masks.push(1usize << b);
                    }
                    if hi > LANE_BITS {
                        shared_digits.push((1 << LANE_BITS, 1 << (hi - LANE_BITS)));
                    }
                } else {
                    shared_digits.push((place, size));
                }
            }
        }
        place *= size;
    }
    let slots = threads >> lane_masks.len();
    Ok(ReducePlan {
        groups,
        local_coord,
        lane_masks,
        shared_digits,
        threads,
        slots,
    })
}

/// Why `op` cannot reduce `x` elements, if it cannot.
pub fn check_reduce_dtype(op: ReduceOp, x: DType) -> Result<(), String> {
    match op {
        ReduceOp::Any | ReduceOp::All if x != DType::UInt(1) => Err(format!(
            "{} reduces u1 (boolean) tensors, not {x}",
            if op == ReduceOp::Any { "any" } else { "all" }
        )),
        ReduceOp::Sum => {
            let ok = matches!(x, DType::F16 | DType::BF16 | DType::F32)
                || (!x.is_float() && matches!(x.bits(), 8 | 32));
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "sum is defined for f16, bf16, f32 and 8- or 32-bit integer tensors, not \
                     {x}; cast sub-byte and fp8 values to a wider type first"
                ))
            }
        }
        _ => Ok(()),
    }
}

/// One digit of the scanned dimension, in the order a scan combines them (innermost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanStep {
    /// A local digit: `size` values, `place` its place value in the local index.
    Local { place: usize, size: usize },
    /// A thread digit inside the lane bits: `size` values (a power of two) at lane distance
    /// `place` (a power of two).
    Lane { place: usize, size: usize },
    /// Any other thread digit (across warps, or of a size or place that is not a power of two):
    /// `size` values at thread distance `place`, combined through shared memory.
    Shared { place: usize, size: usize },
}

/// How `cumsum` is lowered: a Hillis-Steele scan over the dimension's digits, innermost first;
/// each thread keeps a running prefix and the total of the block of digits combined so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPlan {
    pub steps: Vec<ScanStep>,
}

impl ScanPlan {
    /// Bytes of shared scratch for `block_threads` threads holding `locals` values (each
    /// thread publishes its totals in its own slots; 4 bytes a value, floats in f32 and
    /// integers in 32 bits), 0 without a shared step.
    pub fn scratch_bytes(&self, block_threads: usize, locals: usize) -> usize {
        if !self
            .steps
            .iter()
            .any(|s| matches!(s, ScanStep::Shared { .. }))
        {
            return 0;
        }
        block_threads * locals * 4
    }
}

/// The plan for scanning `layout` along `dim`: local digits in registers, power-of-two runs of
/// lanes by shuffles, other thread digits (across warps) through shared memory.
pub fn plan_scan(layout: &Layout, dim: usize) -> Result<ScanPlan, String> {
    if dim >= layout.rank() {
        return Err(format!(
            "dim {dim} is out of range for a tensor of rank {}",
            layout.rank()
        ));
    }
    let modes = layout.modes();
    let mut local_place = std::collections::HashMap::new();
    let mut q = 1;
    for &id in layout.local_digits().iter().rev() {
        local_place.insert(id, q);
        q *= modes[id].size;
    }
    let mut thread_place = std::collections::HashMap::new();
    let mut p = 1;
    for &d in layout.spatial_digits().iter().rev() {
        if let Digit::Mode(id) = d {
            thread_place.insert(id, p);
        }
        p *= layout.digit_size(d);
    }
    // Modes of `dim` are listed outer to inner: scan them from the innermost.
    let mut steps = Vec::new();
    for (id, m) in modes.iter().enumerate().rev() {
        if m.dim != dim {
            continue;
        }
        if let Some(&place) = local_place.get(&id) {
            steps.push(ScanStep::Local {
                place,
                size: m.size,
            });
        } else if let Some(&place) = thread_place.get(&id) {
            let in_lanes = place.is_power_of_two()
                && m.size.is_power_of_two()
                && place * m.size <= 1 << LANE_BITS;
            steps.push(if in_lanes {
                ScanStep::Lane {
                    place,
                    size: m.size,
                }
            } else {
                ScanStep::Shared {
                    place,
                    size: m.size,
                }
            });
        }
    }
    Ok(ScanPlan { steps })
}

impl super::Checker<'_> {
    /// `out = cumsum(x, dim)`: the dtypes of `sum`, and a dimension the code generator scans.
    pub(super) fn check_scan(
        &mut self,
        out: crate::ir::VarId,
        x: crate::ir::VarId,
        dim: usize,
        span: crate::ir::SpanId,
    ) {
        let name = "cumsum";
        let r = self.reg(x, span, name, "the operand");
        let mut ok = r.is_some();
        if let Some(r) = r {
            let xn = self.name(x);
            if let Err(e) = check_reduce_dtype(ReduceOp::Sum, r.dtype) {
                self.err(
                    span,
                    format!("{name}: {xn}: {}", e.replacen("sum", "cumsum", 1)),
                );
                ok = false;
            }
            match plan_scan(&r.layout, dim) {
                Err(e) => {
                    self.err(span, format!("{name}({xn}, {dim}): {e}"));
                    ok = false;
                }
                Ok(plan) => {
                    let bytes = plan.scratch_bytes(self.block_threads, r.layout.num_locals());
                    self.role_scratch(bytes, name, span);
                    if bytes > self.reduce_scratch.map_or(0, |(_, b)| b) {
                        self.reduce_scratch = Some((out, bytes));
                    }
                }
            }
        }
        self.define(out, ok, span, name);
    }
}

impl super::Checker<'_> {
    /// `out = op(x, dim)`: a register operand of a dtype `op` accepts, `dim` in range; the
    /// scratch of the largest shared stage is counted with the kernel's shared memory.
    pub(super) fn check_reduce(
        &mut self,
        out: crate::ir::VarId,
        x: crate::ir::VarId,
        op: ReduceOp,
        dim: usize,
        span: crate::ir::SpanId,
    ) {
        let name = crate::ir::syntax::of_op(crate::ir::syntax::Op::Reduce(op)).name;
        let r = self.reg(x, span, name, "the operand");
        let mut ok = r.is_some();
        if let Some(r) = r {
            let xn = self.name(x);
            if let Err(e) = check_reduce_dtype(op, r.dtype) {
                self.err(span, format!("{name}: {xn}: {e}"));
                ok = false;
            }
            match plan_reduce(&r.layout, dim) {
                Err(e) => {
                    self.err(span, format!("{name}({xn}, {dim}): {e}"));
                    ok = false;
                }
                Ok(plan) => {
                    let bytes = plan.scratch_bytes(op);
                    self.role_scratch(bytes, name, span);
                    if bytes > self.reduce_scratch.map_or(0, |(_, b)| b) {
                        self.reduce_scratch = Some((out, bytes));
                    }
                }
            }
        }
        self.define(out, ok, span, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::parse;

    #[test]
    fn plans_locals_lanes_and_warps() {
        // Lanes only: spatial(4, 32) along dim 1 is five shuffles.
        let p = plan_reduce(&parse("spatial(4,32)").unwrap(), 1).unwrap();
        assert_eq!(p.lane_masks, vec![1, 2, 4, 8, 16]);
        assert!(p.shared_digits.is_empty());
        assert_eq!(p.groups, vec![vec![0]]);
        // Lanes and warps: 64 threads along dim 1, two warps.
        let p = plan_reduce(&parse("local(2,1).spatial(2,64)").unwrap(), 1).unwrap();
        assert_eq!(p.lane_masks, vec![1, 2, 4, 8, 16]);
        assert_eq!(p.shared_digits, vec![(32, 2)]);
        assert_eq!(p.slots, 4);
        assert_eq!(p.groups, vec![vec![0], vec![1]]);
        // Locals only.
        let p = plan_reduce(&parse("spatial(32,1).local(1,8)").unwrap(), 1).unwrap();
        assert!(p.lane_masks.is_empty() && p.shared_digits.is_empty());
        assert_eq!(p.groups, vec![(0..8).collect::<Vec<_>>()]);
        assert_eq!(p.local_coord, (0..8).collect::<Vec<_>>());
        // Column-major threads: dim 0 is the fast thread digit.
        let p = plan_reduce(&parse("column_spatial(8,4)").unwrap(), 0).unwrap();
        assert_eq!(p.lane_masks, vec![1, 2, 4]);
        assert_eq!(p.slot_of(8), 1);
        // A digit of 3 threads goes through shared memory.
        let p = plan_reduce(&parse("spatial(32,3)").unwrap(), 1).unwrap();
        assert!(p.lane_masks.is_empty());
        assert_eq!(p.shared_digits, vec![(1, 3)]);
        assert_eq!(p.scratch_bytes(ReduceOp::ArgMax), 96 * 8);
        assert!(plan_reduce(&parse("spatial(4,32)").unwrap(), 2).is_err());
    }

    #[test]
    fn plans_scans_innermost_first() {
        let p = plan_scan(&parse("local(1,2).spatial(4,8).local(1,4)").unwrap(), 1).unwrap();
        assert_eq!(
            p.steps,
            vec![
                ScanStep::Local { place: 1, size: 4 },
                ScanStep::Lane { place: 1, size: 8 },
                ScanStep::Local { place: 4, size: 2 },
            ]
        );
        // Across warps, and a digit of three lanes: shared-memory steps.
        let p = plan_scan(&parse("local(2,1).spatial(2,64)").unwrap(), 1).unwrap();
        assert_eq!(p.steps, vec![ScanStep::Shared { place: 1, size: 64 }]);
        let p = plan_scan(&parse("spatial(32,3)").unwrap(), 1).unwrap();
        assert_eq!(p.steps, vec![ScanStep::Shared { place: 1, size: 3 }]);
        assert!(plan_scan(&parse("spatial(32,3)").unwrap(), 2).is_err());
    }
}
