//! What a `ModelDeployment` says about the adaptive in-flight cap: its SLO (`spec.slo.tpotP95`,
//! `ttftP95`) for an engine that does not hold it itself.

use kube::api::DynamicObject;
use tokenscale_common::engines::EngineKind;

use super::cold_start::parse_duration;
use super::engine::engine_of;
use crate::routing::adaptive::Slo;

/// The SLO the gateway holds for `md`'s replicas by capping them: `None` for our engine
/// (it holds `--tpot-target` itself) and without a readable `tpotP95`.
pub fn adaptive_slo_of(md: &DynamicObject) -> Option<Slo> {
    if engine_of(md).0 == EngineKind::Tokenscale {
        return None;
    }
    let slo = &md.data["spec"]["slo"];
    let tpot_p95 = parse_duration(slo["tpotP95"].as_str()?)?;
    let ttft_p95 = slo["ttftP95"].as_str().and_then(parse_duration);
    Some(Slo { tpot_p95, ttft_p95 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};
    use std::time::Duration;

    fn md(engine: &str, slo: serde_json::Value) -> DynamicObject {
        let (group, version, kind) = super::super::kubernetes::MODEL_DEPLOYMENT;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut md = DynamicObject::new("m", &resource);
        md.data = serde_json::json!({"spec": {"engine": {"kind": engine}, "slo": slo}});
        md
    }

    #[test]
    fn only_engines_that_are_not_ours_get_a_cap_and_only_with_a_tpot_target() {
        let slo = serde_json::json!({"tpotP95": "50ms", "ttftP95": "1s"});
        let expected = Slo {
            tpot_p95: Duration::from_millis(50),
            ttft_p95: Some(Duration::from_secs(1)),
        };
        assert_eq!(adaptive_slo_of(&md("vllm", slo.clone())), Some(expected));
        assert_eq!(adaptive_slo_of(&md("tokenscale", slo)), None);
        let ttft_only = serde_json::json!({"ttftP95": "1s"});
        assert_eq!(adaptive_slo_of(&md("sglang", ttft_only)), None);
    }
}
