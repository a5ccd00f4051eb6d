//! The concurrency caps a target reports, read against what runs under them: our engine's
//! `tokenscale_engine_max_num_seqs` (the running-sequence limit, the lower one a TPOT target
//! allows) and the gateway's `tokenscale_gateway_replica_concurrency_limit` per replica.

use std::collections::BTreeMap;

use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine, gateway as gw};

use super::text_format::Sample;
use crate::autoscaler::{CapSource, ConcurrencyCap};

/// One engine replica's cap against its `running` sequences; `None` when it exports none
/// (engines other than ours).
pub(super) fn engine(samples: &[Sample], running: f64) -> Option<ConcurrencyCap> {
    samples
        .iter()
        .find(|s| s.name == engine::MAX_NUM_SEQS)
        .map(|s| ConcurrencyCap::one(CapSource::Engine, s.value, running))
}

/// The gateway's in-flight caps for `served_name`, each against the requests in flight on the
/// same replica (the `replica` label), reduced over the replicas that have one.
pub(super) fn gateway(samples: &[Sample], served_name: &str) -> Option<ConcurrencyCap> {
    let of_model = |name: &'static str| {
        samples
            .iter()
            .filter(move |s| s.name == name && s.label(LABEL_MODEL_NAME) == Some(served_name))
    };
    let in_flight: BTreeMap<&str, f64> = of_model(gw::REPLICA_IN_FLIGHT_REQUESTS)
        .filter_map(|s| Some((s.label(gw::LABEL_REPLICA)?, s.value)))
        .collect();
    of_model(gw::REPLICA_CONCURRENCY_LIMIT)
        .filter_map(|s| {
            let replica = s.label(gw::LABEL_REPLICA)?;
            let used = in_flight.get(replica).copied().unwrap_or(0.0);
            Some(ConcurrencyCap::one(CapSource::Gateway, s.value, used))
        })
        .reduce(ConcurrencyCap::merge)
}

/// A model's caps from its targets' readings: the gateway's when it caps any replica (it sits
/// in front and caps below the engine's own limit), else the engines' summed over replicas.
pub(super) fn model(
    readings: impl IntoIterator<Item = (bool, ConcurrencyCap)>,
) -> Option<ConcurrencyCap> {
    let (mut gateway, mut engines) = (None, None);
    for (is_gateway, cap) in readings {
        let slot: &mut Option<ConcurrencyCap> = if is_gateway {
            &mut gateway
        } else {
            &mut engines
        };
        *slot = Some(slot.map_or(cap, |c| c.merge(cap)));
    }
    gateway.or(engines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_source::text_format::parse;

    #[test]
    fn an_engine_at_its_sequence_limit_is_at_its_cap() {
        let text = format!("{} 12\n", engine::MAX_NUM_SEQS);
        let samples = parse(&text).samples;
        let at = engine(&samples, 12.0).unwrap_or_default();
        assert_eq!((at.replicas, at.per_replica, at.at_cap), (1, 12.0, 1));
        let below = engine(&samples, 5.0).unwrap_or_default();
        assert_eq!(below.at_cap, 0);
        assert_eq!(
            engine(&parse("vllm:num_requests_running 3\n").samples, 3.0),
            None
        );
    }

    #[test]
    fn gateway_caps_are_joined_per_replica_and_reduced_for_the_model() {
        let text = format!(
            "{l}{{model_name=\"a\",replica=\"r1\"}} 8\n{f}{{model_name=\"a\",replica=\"r1\"}} 8\n\
             {l}{{model_name=\"a\",replica=\"r2\"}} 4\n{f}{{model_name=\"a\",replica=\"r2\"}} 1\n\
             {f}{{model_name=\"a\",replica=\"r3\"}} 9\n{l}{{model_name=\"b\",replica=\"r9\"}} 2\n",
            l = gw::REPLICA_CONCURRENCY_LIMIT,
            f = gw::REPLICA_IN_FLIGHT_REQUESTS,
        );
        let cap = gateway(&parse(&text).samples, "a").unwrap_or_default();
        // r3 has no cap (not counted), r9 serves another model.
        assert_eq!(
            (cap.source, cap.replicas, cap.per_replica, cap.at_cap),
            (CapSource::Gateway, 2, 6.0, 1)
        );
        assert_eq!(cap.in_use_per_replica, 4.5);
        assert!(!cap.all_at_cap(), "r2 runs 1 of its 4");
        assert_eq!(gateway(&parse(&text).samples, "c"), None);
    }

    #[test]
    fn the_gateways_caps_win_over_the_engines() {
        let eng = ConcurrencyCap::one(CapSource::Engine, 64.0, 64.0);
        let gwc = ConcurrencyCap::one(CapSource::Gateway, 8.0, 3.0);
        let both = model([(false, eng), (true, gwc), (false, eng)]);
        assert_eq!(both.map(|c| c.source), Some(CapSource::Gateway));
        let engines = model([(false, eng), (false, eng)]).unwrap_or_default();
        assert_eq!((engines.replicas, engines.at_cap), (2, 2));
        assert_eq!(model([]), None);
    }
}
