//! Latency samples and their summary.

use std::time::Duration;

use serde::Serialize;

/// Latencies of one measured operation.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    nanos: Vec<u64>,
    total: Duration,
}

impl Samples {
    /// Record one latency.
    pub fn push(&mut self, latency: Duration) {
        self.nanos
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        self.total += latency;
    }

    /// Every sample, in recording order.
    pub fn raw(&self) -> impl Iterator<Item = Duration> + '_ {
        self.nanos.iter().map(|&n| Duration::from_nanos(n))
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    /// The p50/p90/p99 and throughput of the samples.
    pub fn summary(&self) -> Summary {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        let at = |q: f64| -> f64 {
            if sorted.is_empty() {
                return 0.0;
            }
            let index = ((sorted.len() - 1) as f64 * q).round() as usize;
            sorted[index] as f64 / 1e6
        };
        let seconds = self.total.as_secs_f64();
        Summary {
            count: sorted.len(),
            p50_ms: at(0.50),
            p90_ms: at(0.90),
            p99_ms: at(0.99),
            ops_per_second: if seconds > 0.0 {
                sorted.len() as f64 / seconds
            } else {
                0.0
            },
        }
    }
}

/// A latency distribution.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Summary {
    /// Samples.
    pub count: usize,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 90th percentile, milliseconds.
    pub p90_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Operations per second of busy time (one client).
    pub ops_per_second: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut samples = Samples::default();
        for ms in 1..=100 {
            samples.push(Duration::from_millis(ms));
        }
        let summary = samples.summary();
        assert_eq!(summary.count, 100);
        assert!((summary.p50_ms - 51.0).abs() < 1.01);
        assert!((summary.p90_ms - 90.0).abs() < 1.01);
        assert!((summary.p99_ms - 99.0).abs() < 1.01);
        assert!((summary.ops_per_second - 100.0 / 5.05).abs() < 0.01);
    }
}
