//! Which of a tenant's limits binds first: the rule, as one pure function.
//!
//! A 429 is the limit binding, observed; the use/limit ratio forecasts the one that will bind
//! next. So: the kind with the most 429s in the window wins; without refusals (or between
//! kinds refused equally often), the kind with the highest use over its limit; between equal
//! ones, the first of requests, input tokens, output tokens. `None` when nothing was refused
//! and no limited kind was used (a tenant without limits, or an idle window).

use super::window::{Counts, KINDS};
use crate::config::LimitsConfig;
use crate::vocab::LimitKind;

/// Use of `kind` in `counts` over its per-minute quota in `limits` (0 without one). The
/// window's length scales every quota alike, so the minute's quotas rank the hour too.
pub fn ratio(counts: &Counts, limits: Option<&LimitsConfig>, kind: LimitKind) -> f64 {
    match limits.and_then(|l| l.quota(kind)) {
        Some(quota) if quota > 0 => counts.used(kind) as f64 / quota as f64,
        _ => 0.0,
    }
}

/// The limit that binds first in `counts`, against `limits` (the tenant's per-model ones).
pub fn binding(counts: &Counts, limits: Option<&LimitsConfig>) -> Option<LimitKind> {
    let score = |kind: LimitKind| (counts.refusals(kind), ratio(counts, limits, kind));
    // Reversed: `max_by` keeps the last of equals, which is then the first in `KINDS`.
    let best = KINDS.into_iter().rev().max_by(|a, b| {
        let ((refused_a, ratio_a), (refused_b, ratio_b)) = (score(*a), score(*b));
        refused_a.cmp(&refused_b).then(ratio_a.total_cmp(&ratio_b))
    })?;
    let (refused, ratio) = score(best);
    (refused > 0 || ratio > 0.0).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: LimitsConfig = LimitsConfig {
        requests_per_minute: Some(100),
        input_tokens_per_minute: Some(10_000),
        output_tokens_per_minute: Some(1_000),
    };

    fn used(requests: u64, input: u64, output: u64) -> Counts {
        Counts {
            requests,
            input_tokens: input,
            output_tokens: output,
            ..Counts::default()
        }
    }

    #[test]
    fn the_highest_use_over_limit_binds_when_nothing_was_refused() {
        let cases = [
            // (requests, input, output) -> binding
            ((10, 9_000, 100), Some(LimitKind::InputTokens)),
            ((10, 1_000, 500), Some(LimitKind::OutputTokens)),
            ((90, 1_000, 100), Some(LimitKind::Requests)),
            // Equal ratios: the first kind.
            ((50, 5_000, 500), Some(LimitKind::Requests)),
            ((0, 0, 0), None),
        ];
        for ((requests, input, output), expected) in cases {
            let counts = used(requests, input, output);
            assert_eq!(
                binding(&counts, Some(&LIMITS)),
                expected,
                "{requests} requests, {input} in, {output} out"
            );
        }
    }

    #[test]
    fn refusals_outrank_ratios_and_ratios_break_ties_between_refusals() {
        // Output was refused (its reservations drained the bucket) though input is fuller.
        let mut counts = used(10, 9_000, 300);
        counts.rate_limited = [0, 0, 2];
        assert_eq!(
            binding(&counts, Some(&LIMITS)),
            Some(LimitKind::OutputTokens)
        );
        counts.rate_limited = [0, 2, 2];
        assert_eq!(
            binding(&counts, Some(&LIMITS)),
            Some(LimitKind::InputTokens)
        );
    }

    #[test]
    fn a_tenant_without_limits_has_no_binding_unless_a_tenant_wide_limit_refused_it() {
        let counts = used(1_000, 1_000_000, 1_000_000);
        assert_eq!(binding(&counts, None), None);
        let partial = LimitsConfig {
            output_tokens_per_minute: None,
            ..LIMITS
        };
        assert_eq!(ratio(&counts, Some(&partial), LimitKind::OutputTokens), 0.0);
        let mut refused = counts;
        refused.rate_limited = [1, 0, 0];
        assert_eq!(binding(&refused, None), Some(LimitKind::Requests));
    }
}
