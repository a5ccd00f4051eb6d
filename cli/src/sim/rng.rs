//! A small seeded random source (SplitMix64) and the Poisson draws the arrivals need: the
//! simulation must be bit-for-bit deterministic for a seed, with no dependency to pin.

/// SplitMix64: tiny, fast, good enough for arrival noise.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A Poisson count with mean `lambda` (exact below 30, normal approximation above).
    pub fn poisson(&mut self, lambda: f64) -> f64 {
        if lambda <= 0.0 {
            return 0.0;
        }
        if lambda > 30.0 {
            return (lambda + lambda.sqrt() * self.normal()).round().max(0.0);
        }
        let limit = (-lambda).exp();
        let mut product = self.uniform();
        let mut count = 0.0;
        while product > limit {
            product *= self.uniform();
            count += 1.0;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::new(3).next_u64(), Rng::new(4).next_u64());
    }

    #[test]
    fn poisson_mean_is_lambda() {
        let mut rng = Rng::new(1);
        for lambda in [0.5, 4.0, 100.0] {
            let mean = (0..20_000).map(|_| rng.poisson(lambda)).sum::<f64>() / 20_000.0;
            assert!(
                (mean - lambda).abs() < 0.05 * lambda + 0.05,
                "{lambda}: {mean}"
            );
        }
    }
}
