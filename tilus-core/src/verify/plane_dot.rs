//! `plane_dot(w, a, dim)`, the dot product of bit planes: which operands it takes and the
//! per-thread plan the code generator follows.
//!
//! Each result element is `Σ_{p, q, j} popc(w[p, .., j, ..] AND a[q, .., j, ..]) << (p + q)`
//! over the planes (dim 0 of both operands) and dimension `dim`. The plan lists, for every local
//! of the result, the `(w local, a local, p + q)` triples of its terms; the list must be the
//! same on every thread (so one piece of code serves the block) and complete (each thread holds
//! every plane and every word it sums: no lane exchanges).

use super::table::{ravel, unravel, LayoutTable, ThreadMap, NONE};
use crate::layout::Layout;

/// One term of a result local: `popc(w[w_local] AND a[a_local]) << shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaneTerm {
    pub w_local: usize,
    pub a_local: usize,
    pub shift: u32,
}

/// How `plane_dot` is computed in each thread: the terms of each local of the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaneDotPlan {
    pub terms: Vec<Vec<PlaneTerm>>,
}

/// The largest result the operands' shapes allow: `32 · J · (2^P - 1)(2^Q - 1)` for `P` weight
/// planes, `Q` activation planes and `J` words summed, every bit of every word set.
pub fn plane_dot_bound(p: usize, q: usize, j: usize) -> u128 {
    let planes = |n: usize| (1u128 << n.min(64)) - 1;
    32 * j as u128 * planes(p) * planes(q)
}

/// The plan of `plane_dot(w, a, dim)` over `threads` block threads, or why the operands'
/// layouts do not allow it (`w` and `a` are `u32` register tensors; the caller checks dtypes).
pub fn plan_plane_dot(
    w: &Layout,
    a: &Layout,
    dim: usize,
    threads: usize,
) -> Result<PlaneDotPlan, String> {
    let (ws, as_) = (w.shape().to_vec(), a.shape().to_vec());
    let rank = ws.len();
    if as_.len() != rank {
        return Err(format!(
            "w is {ws:?} and a is {as_:?}; both need the same rank (planes in dim 0)"
        ));
    }
    if dim == 0 || dim >= rank {
        return Err(format!(
            "dim {dim} is not a dimension of the words: it must be in 1..{rank} (dim 0 holds the planes)"
        ));
    }
    if let Some(d) = (1..rank).find(|&d| as_[d] != ws[d] && as_[d] != 1) {
        return Err(format!(
            "a's extent {} along dim {d} does not broadcast to w's {} (equal or 1)",
            as_[d], ws[d]
        ));
    }
    let (planes_w, planes_a, words) = (ws[0], as_[0], ws[dim]);
    if planes_w + planes_a > 32 {
        return Err(format!(
            "{planes_w} + {planes_a} planes shift a count past bit 31"
        ));
    }
    let bound = plane_dot_bound(planes_w, planes_a, words);
    if bound >= 1 << 31 {
        return Err(format!(
            "the sum can reach {bound} (32 bits x {words} words x (2^{planes_w} - 1)(2^{planes_a} - 1)), past i32; sum fewer words or planes at once"
        ));
    }
    let out = w.reduce(&[0, dim]).map_err(|e| e.to_string())?;
    let (tw, ta, to) = (
        LayoutTable::new(w)?,
        LayoutTable::new(a)?,
        LayoutTable::new(&out)?,
    );
    let mut reference: Option<Vec<Vec<PlaneTerm>>> = None;
    let (mut amap, mut omap) = (ThreadMap::default(), ThreadMap::default());
    let mut seen = std::collections::HashSet::new();
    for t in 0..threads {
        let key = (t % tw.threads, t % ta.threads, t % to.threads);
        if !seen.insert(key) {
            continue;
        }
        ta.thread_map(key.1, &mut amap);
        to.thread_map(key.2, &mut omap);
        let mut terms = vec![Vec::new(); to.locals];
        for j in 0..tw.locals {
            let wi = unravel(tw.at(key.0, j), &ws);
            let mut oi = wi.clone();
            oi[0] = 0;
            oi[dim] = 0;
            let o = omap[ravel(&oi, to.shape.as_slice()).expect("inside the result")];
            if o == NONE {
                return Err(format!(
                    "thread {t} holds w{wi:?} but not the result element {oi:?}"
                ));
            }
            for q in 0..planes_a {
                let ai: Vec<usize> = (0..rank)
                    .map(|d| match d {
                        0 => q,
                        _ if as_[d] == 1 => 0,
                        _ => wi[d],
                    })
                    .collect();
                let k = amap[ravel(&ai, &as_).expect("inside a")];
                if k == NONE {
                    return Err(format!(
                        "thread {t} holds w{wi:?} but not a{ai:?}, which it multiplies"
                    ));
                }
                terms[o as usize].push(PlaneTerm {
                    w_local: j,
                    a_local: k as usize,
                    shift: (wi[0] + q) as u32,
                });
            }
        }
        let need = planes_w * planes_a * words;
        if let Some((o, got)) = terms
            .iter()
            .enumerate()
            .find(|(_, ts)| ts.len() != need)
            .map(|(o, ts)| (o, ts.len()))
        {
            let oi = unravel(to.at(key.2, o), &to.shape);
            return Err(format!(
                "thread {t} holds {got} of the {need} terms (plane pairs times words) of result {oi:?}; dims 0 and {dim} of w must be thread-local (in `local(..)` factors, not spread over threads or replicated)"
            ));
        }
        match &reference {
            None => reference = Some(terms),
            Some(r) if *r == terms => {}
            Some(_) => {
                return Err(format!(
                    "thread {t} holds its terms at other locals than thread 0; the registers of each term must not depend on the thread"
                ))
            }
        }
    }
    Ok(PlaneDotPlan {
        terms: reference.unwrap_or_default(),
    })
}

impl super::Checker<'_> {
    pub(super) fn check_plane_dot(
        &mut self,
        out: crate::ir::VarId,
        w: crate::ir::VarId,
        a: crate::ir::VarId,
        dim: usize,
        span: crate::ir::SpanId,
    ) {
        let name = "plane_dot";
        let rw = self.reg(w, span, name, "the weight planes");
        let ra = self.reg(a, span, name, "the activation planes");
        let (Some(rw), Some(ra)) = (rw, ra) else {
            return self.define(out, false, span, name);
        };
        let (wn, an) = (self.name(w), self.name(a));
        let mut ok = true;
        for (n, r) in [(&wn, rw), (&an, ra)] {
            if r.dtype != crate::DType::UInt(32) {
                self.err(
                    span,
                    format!("plane_dot: {n} holds {}, but bit planes are u32 words (view the bytes with `view::<u32>`)", r.dtype),
                );
                ok = false;
            }
        }
        if ok && self.block_threads > 0 {
            if let Err(e) = plan_plane_dot(&rw.layout, &ra.layout, dim, self.block_threads) {
                self.err(span, format!("plane_dot({wn}, {an}, {dim}): {e}"));
                ok = false;
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
    fn plans_planes_and_words_in_registers() {
        // Two weight planes, 4 rows over 4 lanes, 3 words each; 2 activation planes
        // broadcast over the rows.
        let w = parse("local(2,1,1).spatial(1,4,1).local(1,1,3)").unwrap();
        let a = parse("local(2,1,1).replicated(4).local(1,1,3)").unwrap();
        let plan = plan_plane_dot(&w, &a, 2, 4).unwrap();
        assert_eq!(plan.terms.len(), 1);
        assert_eq!(plan.terms[0].len(), 2 * 2 * 3);
        // Every shift p + q appears once per word and pair.
        let mut shifts: Vec<u32> = plan.terms[0].iter().map(|t| t.shift).collect();
        shifts.sort();
        assert_eq!(shifts, [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn refuses_words_across_threads_and_overflow() {
        // The words spread over lanes: a shuffle would be needed.
        let w = parse("local(2,1).spatial(1,32)").unwrap();
        let a = parse("local(2,1).spatial(1,32)").unwrap();
        let e = plan_plane_dot(&w, &a, 1, 32).unwrap_err();
        assert!(e.contains("thread-local"), "{e}");
        // Planes are dim 0, not a reduced word dim.
        assert!(plan_plane_dot(&w, &a, 0, 32).unwrap_err().contains("dim 0"));
        // 8 x 8 planes of 4096 words reach 2^47.
        let w = parse("local(8,4096)").unwrap();
        let e = plan_plane_dot(&w, &w, 1, 32).unwrap_err();
        assert!(e.contains("past i32"), "{e}");
        // a must broadcast.
        let w = parse("local(2,4)").unwrap();
        let a = parse("local(2,2)").unwrap();
        assert!(plan_plane_dot(&w, &a, 1, 32)
            .unwrap_err()
            .contains("broadcast"));
    }
}
