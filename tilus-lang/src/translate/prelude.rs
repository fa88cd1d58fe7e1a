//! Helpers every kernel has without declaring them, written in the kernel language itself and
//! inlined like the kernel's own ([`super::helper`]). A kernel (or its `#[tilus::helpers]`
//! module) that declares a helper of the same name uses its own.

/// The prelude's source: helper `fn`s only.
pub(super) const SOURCE: &str = r#"
/// `(bi, bj)`, the tile of block `pid` in a grid of `rows x cols` tiles, visited in groups of
/// `group` tile rows and down each column of a group before the next: the blocks resident at
/// once share their rows of one operand and their columns of the other in L2, so a large
/// operand is read from memory about once per group rather than once per tile row. The last
/// group may be shorter.
fn grouped_tile(pid: i32, rows: i32, cols: i32, group: i32) -> (i32, i32) {
    let first = pid / (group * cols) * group;
    let height = min(rows - first, group);
    (first + pid % (group * cols) % height, pid % (group * cols) / height)
}
"#;
