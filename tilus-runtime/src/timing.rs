//! The summary of repeated timed runs (what benchmarks report and the tuner records).

/// Summary of repeated timed runs, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub samples: usize,
}

impl Timing {
    /// The summary of `us` (not empty).
    pub fn from_samples(mut us: Vec<f64>) -> Timing {
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let median = if n % 2 == 1 {
            us[n / 2]
        } else {
            (us[n / 2 - 1] + us[n / 2]) / 2.0
        };
        Timing {
            median_us: median,
            min_us: us[0],
            max_us: us[n - 1],
            samples: n,
        }
    }

    /// Effective bandwidth in GB/s (1e9 bytes per second) for `bytes` moved per run.
    pub fn gb_per_s(&self, bytes: f64) -> f64 {
        bytes / (self.median_us * 1e-6) / 1e9
    }
}
