//! What the kernel benches share: deterministic non-constant inputs, and timing launches that
//! can fail (the error is returned, not lost inside the timing loop).

use tilus_runtime::{time_runs, Context, L2Flush, RuntimeError, Timing};

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
    time_fallible(ctx, 3, runs, Some(flush), run, |e| e.to_string())
}

/// [`time_runs`] of launches whose errors are the caller's own type: the first error of a run
/// is returned as it is (the timing loop, whose closure can only fail with a runtime error,
/// would otherwise lose it), and the timing's own errors go through `runtime`.
pub fn time_fallible<E>(
    ctx: &Context,
    warmup: usize,
    runs: usize,
    flush: Option<&mut L2Flush>,
    mut run: impl FnMut() -> Result<(), E>,
    runtime: impl FnOnce(RuntimeError) -> E,
) -> Result<Timing, E> {
    let mut failure = None;
    let t = time_runs(ctx, warmup, runs, flush, || {
        if failure.is_none() {
            if let Err(e) = run() {
                failure = Some(e);
            }
        }
        Ok(())
    });
    match (failure, t) {
        (Some(e), _) => Err(e),
        (None, t) => t.map_err(runtime),
    }
}
