//! Demand in both dimensions: a request costs its prompt's prefill as well as its output's
//! decode, so a shift toward longer prompts loads the replicas more at the same output
//! tokens/s. The policy keeps counting in output tokens/s, the unit its capacity is learned
//! and hinted in, but at the prompt mix it first saw: every output token is weighed by what
//! a request costs per output token now against then, `(o + w·p) / o` (prompt tokens `p` and
//! output tokens `o` per request, `w` the spec's `prompt_token_cost`, what one prompt token
//! costs in output tokens: the performance model's prefill term over its decode term). A shift
//! in prompt length then raises the demand the moment the arrivals show it, before the SLO
//! breaks and the capacity is learned down.

use super::observations::Demand;

/// A weight this close to 1 is the noise of a steady mix (a minute's mean prompt length
/// wanders by a few percent): it is not applied, so a steady mix plans exactly as before.
const DEAD_BAND: f64 = 0.1;

/// What one request costs per output token, in output tokens: `1 + w·p/o`; `None` without a
/// positive output length.
pub fn cost_per_output_token(
    prompt_token_cost: f64,
    prompt_tokens_per_request: f64,
    output_tokens_per_request: f64,
) -> Option<f64> {
    (output_tokens_per_request > 0.0 && prompt_tokens_per_request >= 0.0).then(|| {
        1.0 + prompt_token_cost.max(0.0) * prompt_tokens_per_request / output_tokens_per_request
    })
}

/// The weight of an output token now against the reference mix: `now / reference`, or 1
/// within the dead band.
pub fn mix_weight(reference: f64, now: f64) -> f64 {
    let weight = now / reference;
    if weight.is_finite() && weight > 0.0 && (weight - 1.0).abs() > DEAD_BAND {
        weight
    } else {
        1.0
    }
}

/// `demand` with every interactive output-token figure weighed by `weight` (batch lines keep
/// theirs: their prompts are not counted on arrival).
pub fn weigh(demand: &Demand, weight: f64) -> Demand {
    let mut weighed = demand.clone();
    weighed.output_tokens_per_s.stable *= weight;
    weighed.output_tokens_per_s.panic *= weight;
    weighed.mean_output_tokens_per_request = demand
        .mean_output_tokens_per_request
        .map(|tokens| tokens * weight);
    weighed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longer_prompts_weigh_every_output_token_more() {
        // w = 0.3: 600-token prompts, 200-token answers cost 1.9 output tokens an output token.
        let before = cost_per_output_token(0.3, 600.0, 200.0).expect("a cost");
        assert!((before - 1.9).abs() < 1e-12);
        // Prompts three times as long: 3.7, about twice the load at the same output rate.
        let after = cost_per_output_token(0.3, 1800.0, 200.0).expect("a cost");
        let weight = mix_weight(before, after);
        assert!((weight - 3.7 / 1.9).abs() < 1e-12);
        let demand = Demand {
            mean_output_tokens_per_request: Some(200.0),
            ..Demand::default()
        };
        let weighed = weigh(&demand, weight);
        assert_eq!(weighed.mean_output_tokens_per_request, Some(200.0 * weight));
    }

    #[test]
    fn a_steady_mix_weighs_nothing() {
        assert_eq!(mix_weight(1.9, 1.9 * 1.05), 1.0);
        assert_eq!(mix_weight(1.9, 1.9 * 0.95), 1.0);
        assert_eq!(mix_weight(0.0, 1.9), 1.0);
        assert_eq!(cost_per_output_token(0.3, 600.0, 0.0), None);
        // Without a prompt cost the prompts weigh nothing.
        assert_eq!(cost_per_output_token(0.0, 600.0, 200.0), Some(1.0));
    }
}
