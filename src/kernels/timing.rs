//! What the kernel benches share: deterministic non-constant inputs, and timing launches that
//! can fail (the error is returned, not lost inside the timing loop).

use tilus_runtime::{time_runs, Context, L2Flush, Timing};

/// `len` values of a hash pattern in `[-0.5, 0.5)`, never all zero, different per `salt`.
pub fn pattern(len: usize, salt: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i ^ salt).wrapping_mul(2654435761) >> 9;
            (h % 1000) as f32 / 1000.0 - 0.5
        })
        .collect()
}

/// Time `run` (a sequence of launches) over `runs` runs with the L2 flushed before each, after
/// one checked run and 3 warm-up runs; the first launch error is returned.
pub fn time_launches(
    ctx: &Context,
    flush: &mut L2Flush,
    runs: usize,
    mut run: impl FnMut() -> Result<(), String>,
) -> Result<Timing, String> {
    run()?;
    let mut failure = None;
    let t = time_runs(ctx, 3, runs, Some(flush), || {
        if let Err(e) = run() {
            failure.get_or_insert(e);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => Ok(t),
    }
}
