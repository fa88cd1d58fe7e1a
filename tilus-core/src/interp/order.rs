//! The order in which [`super::run_ordered`] runs the blocks of a grid.
//!
//! Every block still runs to its end before the next one starts, so each order is one legal
//! execution of the GPU (which may also interleave blocks). Programs whose blocks communicate
//! through global memory (atomic counters, a last block that reduces the others' partial
//! results) are tested under several orders to show that their result does not depend on
//! which block arrives first.

/// A serial order of the blocks of a launch, by linear block index (grid dimension 0
/// fastest, like CUDA's `x`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BlockOrder {
    /// Linear index order: what [`super::run`] does.
    #[default]
    Launch,
    /// The reverse of the launch order.
    Reversed,
    /// A permutation drawn from the seed (reproducible for a seed).
    Shuffled(u64),
    /// The given linear indices, a permutation of `0..blocks` (checked).
    Explicit(Vec<usize>),
}

impl BlockOrder {
    /// The linear block indices of a grid of `total` blocks, in this order.
    pub(crate) fn sequence(&self, total: usize) -> Result<Vec<usize>, String> {
        match self {
            BlockOrder::Launch => Ok((0..total).collect()),
            BlockOrder::Reversed => Ok((0..total).rev().collect()),
            BlockOrder::Shuffled(seed) => {
                // splitmix64 then Fisher-Yates: no dependency, the same order on every host.
                let mut state = *seed;
                let mut next = move || {
                    state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    z ^ (z >> 31)
                };
                let mut v: Vec<usize> = (0..total).collect();
                for i in (1..total).rev() {
                    let j = (next() % (i as u64 + 1)) as usize;
                    v.swap(i, j);
                }
                Ok(v)
            }
            BlockOrder::Explicit(v) => {
                let mut seen = vec![false; total];
                for &b in v {
                    if b >= total || std::mem::replace(&mut seen[b], true) {
                        return Err(format!(
                            "the block order {v:?} is not a permutation of the grid's {total} blocks"
                        ));
                    }
                }
                if v.len() != total {
                    return Err(format!(
                        "the block order lists {} blocks, the grid has {total}",
                        v.len()
                    ));
                }
                Ok(v.clone())
            }
        }
    }
}
