//! `tilus layout '<expr>' [--json]`.
//!
//! Text output: the normalized expression, shape, thread and local counts, then the grid of
//! `thread:local` cells (see `Display for Layout`). JSON output is exactly
//! `{"shape":[..],"threads":T,"locals":L,"map":M}` on one line, where `M[t][i]` is the logical
//! index (an array of integers) of local `i` of thread `t`.

use serde::Serialize;
use tilus_core::layout::parse;

/// The `--json` object; fields serialize in declaration order, which is the documented order.
#[derive(Serialize)]
struct LayoutJson<'a> {
    shape: &'a [usize],
    threads: usize,
    locals: usize,
    /// `map[t][i]`: the logical index of local `i` of thread `t`.
    map: Vec<Vec<Vec<usize>>>,
}

/// Largest `threads * locals` printed; beyond it the map or grid would be unreadably large.
const MAX_PRINTED: usize = 1 << 20;

pub fn run(expr: &str, json: bool) -> Result<String, String> {
    let layout = parse(expr).map_err(|e| format!("{} (at byte {})", e.message, e.span.start))?;
    let pairs = layout.num_threads().saturating_mul(layout.num_locals());
    if pairs > MAX_PRINTED {
        return Err(format!(
            "layout `{}` has {} threads x {} locals, too many to print (limit {MAX_PRINTED} \
             pairs)",
            layout.to_expr(),
            layout.num_threads(),
            layout.num_locals()
        ));
    }
    if json {
        let json = LayoutJson {
            shape: layout.shape(),
            threads: layout.num_threads(),
            locals: layout.num_locals(),
            map: layout.to_map(),
        };
        return serde_json::to_string(&json).map_err(|e| e.to_string());
    }
    Ok(format!(
        "layout:  {}\nshape:   {:?}\nthreads: {}\nlocals:  {}\n\n{layout}",
        layout.to_expr(),
        layout.shape(),
        layout.num_threads(),
        layout.num_locals()
    ))
}
