//! Rendering layouts: a compact expression for messages ([`Layout::to_expr`]) and the grid of
//! the paper's figures (`Display`).

use super::{Digit, Layout, Primitive};
use std::fmt;

impl Layout {
    /// A composition of primitives equal to this layout, for messages: e.g.
    /// `local(2,1).spatial(8,4).local(1,2)`, using as few primitives as possible. Replication
    /// digits print as `replicated(n)` (see [`Layout::replicated`]); the result parses back to
    /// this layout. A layout built by
    /// [`Layout::from_parts`] whose digits admit no such chain prints as `layout{..}` with its
    /// raw parts.
    pub fn to_expr(&self) -> String {
        // A chain of primitives emits the thread digits and the local digits each in list
        // order, interleaved, and a primitive is a run of digits of one list over distinct
        // dims in increasing (row-major) or decreasing (column-major) order. Within a dim the
        // outer mode must be emitted first. So: shortest path over (thread digits emitted,
        // local digits emitted), each step emitting one valid run.
        let spatial: Vec<Option<usize>> = self
            .spatial
            .iter()
            .map(|&d| match d {
                Digit::Mode(id) => Some(id),
                Digit::Replicated(_) => None,
            })
            .collect();
        let local: Vec<Option<usize>> = self.local.iter().map(|&id| Some(id)).collect();
        let chains = [&spatial, &local];
        // Where each mode is emitted: (chain, position).
        let mut at = vec![(0, 0); self.modes.len()];
        for (c, chain) in chains.iter().enumerate() {
            for (j, id) in chain.iter().enumerate() {
                if let Some(id) = *id {
                    at[id] = (c, j);
                }
            }
        }
        // The mode just outside `id` in its dim, which must be emitted before it.
        let outer =
            |id: usize| (id > 0 && self.modes[id - 1].dim == self.modes[id].dim).then(|| id - 1);
        let (ns, nl) = (spatial.len(), local.len());
        let idx = |a: usize, b: usize| a * (nl + 1) + b;
        // best[state] = (primitives, previous state, chain of the run, run start).
        let mut best: Vec<Option<(usize, usize, usize, usize)>> = vec![None; (ns + 1) * (nl + 1)];
        best[0] = Some((0, 0, 0, 0));
        for sum in 0..ns + nl {
            for a in 0..=ns.min(sum) {
                let b = sum - a;
                if b > nl {
                    continue;
                }
                let Some((cost, ..)) = best[idx(a, b)] else {
                    continue;
                };
                for c in [1, 0] {
                    let (chain, start) = if c == 0 { (&spatial, a) } else { (&local, b) };
                    let done = |id: usize| {
                        let (oc, oj) = at[id];
                        if oc == c {
                            oj < start
                        } else {
                            oj < if c == 0 { b } else { a }
                        }
                    };
                    let mut dims: Vec<usize> = Vec::new();
                    for end in start..chain.len() {
                        // Extend the run by chain[end], or stop.
                        let ok = match chain[end] {
                            None => end == start,
                            Some(id) => {
                                let d = self.modes[id].dim;
                                let monotone = match dims.len() {
                                    0 => true,
                                    1 => d != dims[0],
                                    _ => {
                                        (d > dims[dims.len() - 1]) == (dims[1] > dims[0])
                                            && !dims.contains(&d)
                                    }
                                };
                                monotone
                                    && chain[start..end].iter().all(Option::is_some)
                                    && outer(id).is_none_or(done)
                            }
                        };
                        if !ok {
                            break;
                        }
                        if let Some(id) = chain[end] {
                            dims.push(self.modes[id].dim);
                        }
                        let next = if c == 0 {
                            idx(end + 1, b)
                        } else {
                            idx(a, end + 1)
                        };
                        if best[next].is_none_or(|(k, ..)| cost + 1 < k) {
                            best[next] = Some((cost + 1, idx(a, b), c, start));
                        }
                    }
                }
            }
        }
        let mut state = idx(ns, nl);
        let mut runs = Vec::new();
        while state != 0 {
            let Some((_, prev, c, start)) = best[state] else {
                return self.raw_expr();
            };
            let end = if c == 0 {
                state / (nl + 1)
            } else {
                state % (nl + 1)
            };
            runs.push((c, start, end));
            state = prev;
        }
        if runs.is_empty() {
            return format!("local({})", join(&vec![1; self.rank()]));
        }
        let parts: Vec<String> = runs
            .iter()
            .rev()
            .map(|&(c, start, end)| {
                let ids = &chains[c][start..end];
                let Some(first) = ids[0] else {
                    return format!("replicated({})", self.num_replicas_at(start));
                };
                let mut shape = vec![1; self.rank()];
                for id in ids.iter().flatten() {
                    shape[self.modes[*id].dim] = self.modes[*id].size;
                }
                let column = ids.len() > 1
                    && ids[1].is_some_and(|id| self.modes[id].dim < self.modes[first].dim);
                let kind = match (c == 1, column) {
                    (true, false) => Primitive::Local,
                    (true, true) => Primitive::ColumnLocal,
                    (false, false) => Primitive::Spatial,
                    (false, true) => Primitive::ColumnSpatial,
                };
                format!("{}({})", kind.name(), join(&shape))
            })
            .collect();
        // `replicated(n)` is rank 1: a layout of replicas only keeps its rank through a
        // leading `local(1, .., 1)`.
        if self.rank() > 1 && parts.iter().all(|p| p.starts_with("replicated(")) {
            return format!("local({}).{}", join(&vec![1; self.rank()]), parts.join("."));
        }
        parts.join(".")
    }

    /// Size of thread digit `j`, a replication digit.
    fn num_replicas_at(&self, j: usize) -> usize {
        self.digit_size(self.spatial[j])
    }

    fn raw_expr(&self) -> String {
        format!(
            "layout{{shape: {:?}, modes: {:?}, spatial: {:?}, local: {:?}}}",
            self.shape,
            self.modes
                .iter()
                .map(|m| (m.dim, m.size))
                .collect::<Vec<_>>(),
            self.spatial,
            self.local
        )
    }
}

fn join(values: &[usize]) -> String {
    values
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The grid of the paper's figures: one cell per logical element holding `t:i`, the thread and
/// local that own it. When threads are replicated every element has the same number of owners;
/// a first line says how many, and each cell shows the owner with the lowest thread.
///
/// Rank 2 prints a table with row and column numbers; rank 1 one row; rank 0 a single cell;
/// higher ranks a sequence of 2-D slices headed `[i, j, :, :]`. Columns are right-aligned to
/// the widest cell.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rank = self.rank();
        let elements: usize = self.shape.iter().product();
        // cells[flat row-major index] = lowest owner.
        let mut cells: Vec<Option<(usize, usize)>> = vec![None; elements];
        for t in 0..self.num_threads() {
            for i in 0..self.num_locals() {
                let index = self.eval(t, i);
                let flat = index
                    .iter()
                    .zip(&self.shape)
                    .fold(0, |acc, (&x, &n)| acc * n + x);
                cells[flat].get_or_insert((t, i));
            }
        }
        let text: Vec<String> = cells
            .iter()
            .map(|c| c.map_or("-".to_string(), |(t, i)| format!("{t}:{i}")))
            .collect();
        let replicas = self.num_replicas();
        if replicas > 1 {
            writeln!(
                f,
                "(each element is held by {replicas} replicated threads; cells show the lowest)"
            )?;
        }
        let (rows, cols) = match rank {
            0 => (1, 1),
            1 => (1, self.shape[0]),
            _ => (self.shape[rank - 2], self.shape[rank - 1]),
        };
        let width = text.iter().map(String::len).max().unwrap_or(1);
        let row_label = if rank >= 2 {
            (rows - 1).to_string().len()
        } else {
            0
        };
        let slices = elements / (rows * cols).max(1);
        for s in 0..slices {
            if rank > 2 {
                if s > 0 {
                    writeln!(f)?;
                }
                let mut lead = Vec::with_capacity(rank - 2);
                let mut rest = s;
                for &n in self.shape[..rank - 2].iter().rev() {
                    lead.push(rest % n);
                    rest /= n;
                }
                lead.reverse();
                let lead: Vec<String> = lead.iter().map(usize::to_string).collect();
                writeln!(f, "[{}, :, :]", lead.join(", "))?;
            }
            if rank >= 1 {
                // Column numbers.
                write!(f, "{:row_label$}", "")?;
                for c in 0..cols {
                    write!(f, "  {c:>width$}")?;
                }
                writeln!(f)?;
            }
            for r in 0..rows {
                if rank >= 2 {
                    write!(f, "{r:>row_label$}")?;
                }
                for c in 0..cols {
                    let cell = &text[(s * rows + r) * cols + c];
                    write!(f, "  {cell:>width$}")?;
                }
                if s + 1 < slices || r + 1 < rows {
                    writeln!(f)?;
                }
            }
        }
        Ok(())
    }
}
