//! What the simulated scaler scrapes, listed through the scaling crate's [`ScrapeTargets`] as
//! the operator lists EndpointSlices and `tokenscale up` its process pool: the simulated
//! gateway, and the simulated replicas as one engine target (the fleet keeps its replicas in
//! groups of the same state, so their running requests are read as one sum).

use tokenscale_scaling::metrics_source::{ModelRef, ScrapeTarget, ScrapeTargets, TargetKind};

/// The simulated fleet's two targets; nothing is fetched, the URLs only name them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTargets;

impl SimTargets {
    /// The one model the simulation serves (served name `model`; no windows: nothing is
    /// fetched, so none is asked for).
    pub fn model(model: &str) -> ModelRef {
        ModelRef {
            namespace: String::new(),
            service: model.to_string(),
            served_name: model.to_string(),
            stable_s: 0.0,
            panic_s: 0.0,
        }
    }
}

impl ScrapeTargets for SimTargets {
    async fn scrape_targets(&self, _model: &ModelRef) -> Vec<ScrapeTarget> {
        let target = |name: &str, kind| ScrapeTarget {
            name: name.to_string(),
            url: format!("sim://{name}/metrics"),
            kind,
        };
        vec![
            target("gateway", TargetKind::Gateway),
            target("engines", TargetKind::Engine),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::exposition::{BatchGauges, Exposition};
    use super::*;

    #[test]
    fn a_scrape_reads_the_listed_targets_the_gateway_then_the_engines_as_one() {
        let mut exposition = Exposition::default();
        exposition.start_second(0);
        exposition.now.running = 3.0;
        let round = exposition.scrape(0, 0, BatchGauges::default());
        let listed: Vec<_> = round
            .readings
            .iter()
            .map(|(name, kind, _)| (name.as_str(), *kind))
            .collect();
        assert_eq!(
            listed,
            [
                ("gateway", TargetKind::Gateway),
                ("engines", TargetKind::Engine)
            ]
        );
        assert_eq!(round.readings[1].2.gauges.running, 3.0);
    }
}
