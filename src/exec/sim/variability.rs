//! Run-to-run variability: seeded jitter of compute and message times, and stragglers.
//!
//! Every factor is a pure function of (seed, op id, what is jittered), never of event
//! order, so a seed reproduces a run exactly and two runs with different options draw the
//! same numbers for the same op. Jitter factors have mean 1 and the profile's coefficient
//! of variation; a coefficient of 0 gives exactly 1 (the jitter-free run, bit for bit).

use crate::scenario::{JitterDistribution, VariabilityParams};

/// Seeded jitter of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Jitter {
    pub params: VariabilityParams,
    pub seed: u64,
}

/// Which quantity of an op a factor multiplies (each draws its own number).
#[derive(Debug, Clone, Copy)]
pub(super) enum Draw {
    Compute = 1,
    Latency = 2,
    Bandwidth = 3,
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in (0, 1) from a hash.
fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The seed of sample `i` of a run seeded `seed`.
pub fn sample_seed(seed: u64, i: u64) -> u64 {
    splitmix64(seed ^ splitmix64(i.wrapping_add(0x5151)))
}

impl Jitter {
    fn cv(&self, d: Draw) -> f64 {
        match d {
            Draw::Compute => self.params.compute_cv,
            Draw::Latency | Draw::Bandwidth => self.params.comm_cv,
        }
    }

    /// The lognormal's log-variance `ln(1 + cv²)` of `d`, and its square root.
    fn log_variance(&self, d: Draw) -> (f64, f64) {
        let cv = self.cv(d);
        let s2 = (1.0 + cv * cv).ln();
        (s2, s2.sqrt())
    }

    /// The factor (mean 1) that multiplies `d` of op `op`.
    #[cfg(test)]
    pub(super) fn factor(&self, op: u32, d: Draw) -> f64 {
        let (s2, root) = self.log_variance(d);
        self.factor_with(op, d, s2, root)
    }

    /// [`Jitter::factor`] with the lognormal's `(s2, √s2)` of `d` given.
    #[inline]
    fn factor_with(&self, op: u32, d: Draw, s2: f64, root: f64) -> f64 {
        let cv = self.cv(d);
        if cv == 0.0 {
            return 1.0;
        }
        let base = splitmix64(self.seed ^ splitmix64(((op as u64) << 2) | d as u64));
        let u1 = unit(base);
        match self.params.distribution {
            JitterDistribution::Uniform => {
                // Mean 1, standard deviation cv: half-width cv·√3 (validated ≤ 1).
                1.0 + cv * 3f64.sqrt() * (2.0 * u1 - 1.0)
            }
            JitterDistribution::Normal | JitterDistribution::Lognormal => {
                let u2 = unit(splitmix64(base));
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                if self.params.distribution == JitterDistribution::Normal {
                    // Truncated so that no op runs backwards or infinitely fast.
                    (1.0 + cv * z).max(0.05)
                } else {
                    (-s2 / 2.0 + root * z).exp()
                }
            }
        }
    }
}

/// A run's jitter with the lognormal's constants of each draw worked out once (a
/// logarithm and a square root a draw otherwise); the same factors bit for bit.
#[derive(Debug, Clone)]
pub(super) struct Draws {
    jitter: Jitter,
    /// Per [`Draw`] (by its value), `(ln(1 + cv²), √ln(1 + cv²))`.
    consts: [(f64, f64); 4],
}

impl Draws {
    pub fn new(jitter: &Jitter) -> Draws {
        let mut consts = [(0.0, 0.0); 4];
        for d in [Draw::Compute, Draw::Latency, Draw::Bandwidth] {
            consts[d as usize] = jitter.log_variance(d);
        }
        Draws {
            jitter: jitter.clone(),
            consts,
        }
    }

    /// The factor (mean 1) that multiplies `d` of op `op`.
    #[inline]
    pub fn factor(&self, op: u32, d: Draw) -> f64 {
        let (s2, root) = self.consts[d as usize];
        self.jitter.factor_with(op, d, s2, root)
    }
}

/// Nearest-rank percentile `p` (0–100) of ascending `sorted`; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jitter(d: JitterDistribution, cv: f64) -> Jitter {
        Jitter {
            params: VariabilityParams {
                distribution: d,
                compute_cv: cv,
                comm_cv: cv,
            },
            seed: 7,
        }
    }

    #[test]
    fn factors_have_mean_one_and_the_stated_spread() {
        for d in [
            JitterDistribution::Lognormal,
            JitterDistribution::Normal,
            JitterDistribution::Uniform,
        ] {
            let j = jitter(d, 0.1);
            let xs: Vec<f64> = (0..200_000).map(|i| j.factor(i, Draw::Compute)).collect();
            let n = xs.len() as f64;
            let mean = xs.iter().sum::<f64>() / n;
            let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            assert!((mean - 1.0).abs() < 0.002, "{d:?}: mean {mean}");
            assert!((sd - 0.1).abs() < 0.003, "{d:?}: sd {sd}");
            assert!(xs.iter().all(|&x| x > 0.0 && x.is_finite()));
        }
    }

    #[test]
    fn zero_spread_is_exactly_one_and_seeds_reproduce() {
        let j = jitter(JitterDistribution::Lognormal, 0.0);
        assert!((0..1000).all(|i| j.factor(i, Draw::Latency) == 1.0));
        let a = jitter(JitterDistribution::Lognormal, 0.2);
        let b = a.clone();
        assert!((0..1000).all(|i| a.factor(i, Draw::Bandwidth) == b.factor(i, Draw::Bandwidth)));
        let c = Jitter {
            seed: 8,
            ..a.clone()
        };
        assert!((0..1000).any(|i| a.factor(i, Draw::Compute) != c.factor(i, Draw::Compute)));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), 50.0);
        assert_eq!(percentile(&xs, 90.0), 90.0);
        assert_eq!(percentile(&xs, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
