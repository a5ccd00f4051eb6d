//! Rotary position embedding frequencies: the plain `base^(-2i/d)` ladder and the context
//! extensions checkpoints ship with (`linear`, `llama3`, `yarn`, GGUF's `rope_freqs` factors).
//! Pure: every backend builds its angle tables from [`RopeScaling::inv_freqs`], so one
//! definition serves the CPU reference, the CUDA kernels and the checks.

/// How a checkpoint stretches RoPE past the context it was pre-trained on.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RopeScaling {
    /// Plain RoPE.
    #[default]
    None,
    /// Position interpolation: every frequency divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept, a smooth blend between
    /// (wavelengths measured against `original_context`).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_context: usize,
    },
    /// YaRN: interpolation for low frequencies, extrapolation for high ones with a linear ramp
    /// between the dimensions that turn `beta_fast` and `beta_slow` times over the original
    /// context; cos and sin scaled by `attention_factor`.
    Yarn {
        factor: f64,
        original_context: usize,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: f64,
    },
    /// Per-pair divisors read from a GGUF `rope_freqs` tensor (how llama.cpp stores Llama 3.1's
    /// scaling): `inv_freq[i] = base^(-2i/d) / factors[i]`.
    FreqFactors(Vec<f32>),
}

impl RopeScaling {
    /// YaRN's default attention factor for `factor` (`0.1 ln(factor) + 1`, 1 when not stretched).
    pub fn yarn_attention_factor(factor: f64) -> f64 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        }
    }

    /// The inverse frequency of each rotated pair, `[head_dim / 2]`: pair `i` of a token at
    /// position `p` turns by `p * inv_freq[i]` radians.
    pub fn inv_freqs(&self, head_dim: usize, base: f64) -> Vec<f64> {
        let half = head_dim / 2;
        let plain = (0..half).map(move |i| base.powf(-2.0 * i as f64 / head_dim as f64));
        match self {
            Self::None => plain.collect(),
            Self::Linear { factor } => plain.map(|f| f / factor).collect(),
            Self::FreqFactors(factors) => plain
                .zip(factors.iter().chain(std::iter::repeat(&1.0)))
                .map(|(f, &d)| f / f64::from(d))
                .collect(),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                let old = *original_context as f64;
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                plain
                    .map(|f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            Self::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                ..
            } => {
                let d = head_dim as f64;
                // The dimension whose pair turns `rotations` times over the original context.
                let dim_of = |rotations: f64| {
                    d * (*original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let low = dim_of(*beta_fast).floor().max(0.0);
                let mut high = dim_of(*beta_slow).ceil().min(d - 1.0);
                if high == low {
                    high += 0.001;
                }
                plain
                    .enumerate()
                    .map(|(i, f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolate = 1.0 - ramp;
                        f / factor * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
        }
    }

    /// The factor cos and sin are multiplied by (YaRN's attention scaling; 1 otherwise).
    pub fn attention_factor(&self) -> f64 {
        match self {
            Self::Yarn {
                attention_factor, ..
            } => *attention_factor,
            _ => 1.0,
        }
    }

    /// Checks the parameters are finite and in range; the error names the bad one.
    pub fn validate(&self, head_dim: usize) -> Result<(), String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "rope scaling {name} must be a positive number, got {v}"
                ))
            }
        };
        match self {
            Self::None => Ok(()),
            Self::Linear { factor } => positive("factor", *factor),
            Self::FreqFactors(factors) => {
                if factors.len() != head_dim / 2 {
                    return Err(format!(
                        "rope_freqs has {} factors for a head of {head_dim} (want {})",
                        factors.len(),
                        head_dim / 2
                    ));
                }
                factors
                    .iter()
                    .try_for_each(|&f| positive("rope_freqs factor", f64::from(f)))
            }
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                positive("factor", *factor)?;
                positive("low_freq_factor", *low_freq_factor)?;
                positive("high_freq_factor", *high_freq_factor)?;
                positive("original_max_position_embeddings", *original_context as f64)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(format!(
                        "rope scaling high_freq_factor {high_freq_factor} must exceed \
                         low_freq_factor {low_freq_factor}"
                    ));
                }
                Ok(())
            }
            Self::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                attention_factor,
            } => {
                positive("factor", *factor)?;
                positive("original_max_position_embeddings", *original_context as f64)?;
                positive("beta_fast", *beta_fast)?;
                positive("beta_slow", *beta_slow)?;
                positive("attention_factor", *attention_factor)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PI: f64 = std::f64::consts::PI;

    #[test]
    fn plain_rope_is_the_geometric_ladder() {
        let f = RopeScaling::None.inv_freqs(8, 10_000.0);
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 0.1).abs() < 1e-15);
        assert!((f[3] - 1e-3).abs() < 1e-15);
    }

    #[test]
    fn linear_divides_every_frequency() {
        let plain = RopeScaling::None.inv_freqs(16, 500.0);
        let lin = RopeScaling::Linear { factor: 4.0 }.inv_freqs(16, 500.0);
        for (p, l) in plain.iter().zip(&lin) {
            assert!((p / 4.0 - l).abs() < 1e-18);
        }
    }

    #[test]
    fn llama3_keeps_high_frequencies_divides_low_ones_and_blends_between() {
        // Llama 3.1 8B's parameters.
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        };
        let base = 500_000.0;
        let plain = RopeScaling::None.inv_freqs(128, base);
        let scaled = s.inv_freqs(128, base);
        for (p, q) in plain.iter().zip(&scaled) {
            let wavelen = 2.0 * PI / p;
            if wavelen < 8192.0 / 4.0 {
                assert_eq!(p, q, "short wavelengths are kept");
            } else if wavelen > 8192.0 {
                assert!((p / 8.0 - q).abs() < 1e-18, "long wavelengths are divided");
            } else {
                assert!(q < p && *q > p / 8.0, "the blend lies between");
            }
        }
        // The blend is continuous at both ends: the smooth factor is 0 and 1 there.
        assert!(scaled.windows(2).all(|w| w[1] < w[0]), "still decreasing");
    }

    #[test]
    fn yarn_extrapolates_fast_pairs_and_interpolates_slow_ones() {
        let s = RopeScaling::Yarn {
            factor: 4.0,
            original_context: 32_768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: RopeScaling::yarn_attention_factor(4.0),
        };
        let plain = RopeScaling::None.inv_freqs(128, 1e6);
        let scaled = s.inv_freqs(128, 1e6);
        assert_eq!(scaled[0], plain[0], "the fastest pair is extrapolated");
        assert!(
            (scaled[63] - plain[63] / 4.0).abs() < 1e-18,
            "the slowest is interpolated"
        );
        assert!((s.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
    }

    #[test]
    fn freq_factors_divide_pairwise_and_must_match_the_head() {
        let s = RopeScaling::FreqFactors(vec![1.0, 2.0, 4.0, 8.0]);
        let f = s.inv_freqs(8, 10_000.0);
        assert!((f[3] - 1e-3 / 8.0).abs() < 1e-18);
        assert!(s.validate(8).is_ok());
        assert!(s.validate(16).unwrap_err().contains("4 factors"));
    }

    #[test]
    fn bad_parameters_are_named() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 4.0,
            high_freq_factor: 1.0,
            original_context: 8192,
        };
        assert!(s.validate(64).unwrap_err().contains("high_freq_factor"));
        let s = RopeScaling::Linear { factor: f64::NAN };
        assert!(s.validate(64).unwrap_err().contains("factor"));
    }
}
