//! The state of one mbarrier: how many arrivals a phase takes, how many it still waits for,
//! and how many phases completed. The copies a phase waits for are tracked by the shared memory
//! ([`super::memory::SharedMem::tma_load`]); in the interpreter a copy's bytes arrive at once, so
//! a phase completes with its last arrival.

/// One mbarrier.
#[derive(Clone, Debug)]
pub(super) struct Barrier {
    /// Arrivals per phase.
    pub arrivals: u32,
    /// Arrivals the current phase still waits for.
    pub pending: u32,
    /// Completed phases; the current phase is number `phase`, of parity `phase % 2`.
    pub phase: u64,
    /// The order the current phase's arrivals released (`SharedMem::release`), and that of
    /// the last completed phase of each parity, which a wait acquires.
    pub clock: Vec<u64>,
    pub done: [Vec<u64>; 2],
}

impl Barrier {
    pub fn new(arrivals: u32) -> Barrier {
        Barrier {
            arrivals,
            pending: arrivals,
            phase: 0,
            clock: Vec::new(),
            done: [Vec::new(), Vec::new()],
        }
    }

    /// `n` arrivals on the current phase; an error when the phase expects fewer (on the GPU the
    /// pending count would underflow into the next phase).
    pub fn arrive(&mut self, n: u32) -> Result<(), String> {
        if n > self.pending {
            return Err(format!(
                "{n} arrivals on phase {} of a barrier that still expects {} of its {} arrivals; \
                 make `arrivals` of `mbarriers` the number of arrivals per phase (each tma_load \
                 is one, each mbarrier_arrive is one per warp)",
                self.phase, self.pending, self.arrivals
            ));
        }
        self.pending -= n;
        if self.pending == 0 {
            self.done[(self.phase % 2) as usize] = std::mem::take(&mut self.clock);
            self.phase += 1;
            self.pending = self.arrivals;
        }
        Ok(())
    }

    /// Whether a wait for the phase of parity `parity` returns: the current phase has the other
    /// parity, so the last phase of this parity completed (before any phase completed, the
    /// phase "before 0", of parity 1, counts as complete, as on the GPU).
    pub fn passes(&self, parity: i32) -> bool {
        (self.phase % 2) as i32 != parity.rem_euclid(2)
    }

    /// The order a wait for `parity` acquires when it passes.
    pub fn acquired(&self, parity: i32) -> &[u64] {
        &self.done[parity.rem_euclid(2) as usize]
    }
}
