//! `tilus layout '<expr>' [--json]`.
//!
//! Text output: the normalized expression, shape, thread and local counts, then the grid of
//! `thread:local` cells (see `Display for Layout`). JSON output is exactly
//! `{"shape":[..],"threads":T,"locals":L,"map":M}` on one line, where `M[t][i]` is the logical
//! index (an array of integers) of local `i` of thread `t`.

use tilus_core::layout::parse;

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
        // Written by hand so the keys keep the documented order.
        let shape = serde_json::to_string(layout.shape()).map_err(|e| e.to_string())?;
        let map = serde_json::to_string(&layout.to_map()).map_err(|e| e.to_string())?;
        return Ok(format!(
            "{{\"shape\":{shape},\"threads\":{},\"locals\":{},\"map\":{map}}}",
            layout.num_threads(),
            layout.num_locals()
        ));
    }
    Ok(format!(
        "layout:  {}\nshape:   {:?}\nthreads: {}\nlocals:  {}\n\n{layout}",
        layout.to_expr(),
        layout.shape(),
        layout.num_threads(),
        layout.num_locals()
    ))
}
