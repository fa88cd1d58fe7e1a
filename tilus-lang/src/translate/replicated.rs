//! A warning for register tensors whose layout spans fewer threads than the block: the other
//! threads hold copies of the same elements, so a load or computation is done `B / T` times.
//!
//! Copies are how an operand is broadcast: an mma operand `A` on one warp's threads, used by
//! every warp of a block whose warps split `N` (`examples/fig2.rs`), a norm's weight `[1, N]` for
//! every row of a tile. So a copy is wasted work only when nothing wider consumes it: the warning
//! is for a replicated `load_global`/`load_shared`/`register` none of whose uses (through casts,
//! views and arithmetic at the same thread count) meets a tensor over more threads, e.g. a
//! `warps = 8` block whose layouts still span 128 threads. Vectors (one extent above 1) are
//! never warned about, and `#[allow(replicated)]` on the `let` says the copies are intended.

use std::collections::HashSet;

use syn::Expr as SynExpr;
use tilus_core::ir::{Program, VarType};

use super::*;

/// The attribute that silences the warning for the instructions of one `let`.
pub(super) fn allows_replicated(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("allow")
            && a.parse_args_with(
                syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|lints| lints.iter().any(|p| p.is_ident("replicated")))
    })
}

/// The warning for a register tensor in `layout` in a block of `block_threads` threads, if its
/// threads are replicated and it is not a vector; `verb` is what the copies do ("load").
pub fn replicated_warning(layout: &Layout, block_threads: u32, verb: &str) -> Option<String> {
    let (t, b) = (layout.num_threads(), block_threads as usize);
    // A thread count that does not divide the block is the verifier's error.
    if t == 0 || t >= b || b % t != 0 {
        return None;
    }
    if layout.shape().iter().filter(|&&e| e > 1).count() <= 1 {
        return None;
    }
    let who = if t % 32 == 0 { "warps" } else { "threads" };
    Some(format!(
        "this layout spans {t} of the block's {b} threads: the other {who} {verb} the same \
         elements ({} copies); if that is intended, put `#[allow(replicated)]` on the `let` \
         (a vector layout such as `[1, N]`, broadcast to every row, needs none)",
        b / t
    ))
}

impl Translator<'_, '_> {
    /// A candidate warning at the layout argument `arg` of `out`, a register tensor in `layout`.
    pub(super) fn check_replicated(
        &mut self,
        arg: &SynExpr,
        layout: &Layout,
        verb: &str,
        out: VarId,
    ) {
        if self.allow_replicated {
            return;
        }
        if let Some(message) = replicated_warning(layout, self.block_threads, verb) {
            let mut d = Diag::at(arg, message);
            d.key.1 = "replicated";
            self.shared.warnings.push((out, d));
        }
    }
}

fn threads(p: &Program, v: VarId) -> Option<usize> {
    match p.ty(v) {
        VarType::Register(r) => Some(r.layout.num_threads()),
        _ => None,
    }
}

/// The register tensors whose values reach a computation over more threads than they span
/// (their copies are a broadcast): an instruction with a register operand or result wider than
/// an input marks that input, and an instruction with a marked result marks its inputs.
pub fn broadcast(p: &Program) -> HashSet<VarId> {
    let mut edges: Vec<(Vec<VarId>, Vec<VarId>)> = Vec::new();
    let mut marked = HashSet::new();
    p.visit_instructions(&mut |i| {
        let ins: Vec<VarId> = i
            .inputs()
            .into_iter()
            .filter(|v| threads(p, *v).is_some())
            .collect();
        let outs: Vec<VarId> = i
            .outputs()
            .into_iter()
            .filter(|v| threads(p, *v).is_some())
            .collect();
        let widest = ins.iter().chain(&outs).filter_map(|v| threads(p, *v)).max();
        for v in &ins {
            if threads(p, *v) < widest {
                marked.insert(*v);
            }
        }
        edges.push((ins, outs));
    });
    // Backwards to a fixed point: each round marks at least one more variable or stops.
    loop {
        let before = marked.len();
        for (ins, outs) in &edges {
            if outs.iter().any(|o| marked.contains(o)) {
                marked.extend(ins.iter().copied());
            }
        }
        if marked.len() == before {
            return marked;
        }
    }
}

/// The warnings among `candidates` (a replicated tensor and its warning) whose copies nothing
/// wider consumes.
pub fn unused_copies(p: &Program, candidates: Vec<(VarId, Diag)>) -> Vec<Diag> {
    let wide = broadcast(p);
    candidates
        .into_iter()
        .filter(|(v, _)| !wide.contains(v))
        .map(|(_, d)| d)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(text: &str) -> Layout {
        tilus_core::layout::parse(text).unwrap()
    }

    #[test]
    fn replicated_tiles_warn() {
        // 64 threads of 128: two copies, whole warps.
        let w = replicated_warning(&layout("local(2, 1).spatial(8, 8)"), 128, "load").unwrap();
        assert!(w.starts_with("this layout spans 64 of the block's 128 threads: the other warps load the same elements (2 copies)"), "{w}");
        // 16 threads of 128: copies inside a warp too.
        let w = replicated_warning(&layout("spatial(4, 4)"), 128, "compute").unwrap();
        assert!(w.contains("16 of the block's 128 threads: the other threads compute the same elements (8 copies)"), "{w}");
    }

    #[test]
    fn full_blocks_vectors_and_bad_counts_do_not_warn() {
        assert_eq!(
            replicated_warning(&layout("spatial(16, 8)"), 128, "load"),
            None
        );
        // Vectors broadcast to every row: `[1, N]`, `[N]`, `[N, 1]`.
        assert_eq!(
            replicated_warning(&layout("local(1, 4).spatial(1, 32)"), 128, "load"),
            None
        );
        assert_eq!(
            replicated_warning(&layout("spatial(8).local(8)"), 128, "load"),
            None
        );
        assert_eq!(
            replicated_warning(&layout("spatial(32, 1)"), 256, "load"),
            None
        );
        // More threads than the block, or not a divisor: the verifier reports those.
        assert_eq!(
            replicated_warning(&layout("spatial(16, 16)"), 128, "load"),
            None
        );
        assert_eq!(
            replicated_warning(&layout("spatial(8, 5)"), 192, "load"),
            None
        );
    }

    #[test]
    fn the_attribute() {
        let allow: syn::Stmt = syn::parse_quote!(#[allow(replicated)] let x = 1;);
        let other: syn::Stmt = syn::parse_quote!(#[allow(dead_code)] let x = 1;);
        let attrs = |s: &syn::Stmt| match s {
            syn::Stmt::Local(l) => l.attrs.clone(),
            _ => Vec::new(),
        };
        assert!(allows_replicated(&attrs(&allow)));
        assert!(!allows_replicated(&attrs(&other)));
    }
}
