//! What a `ModelDeployment` says about its cold start: the TTFT SLO (`spec.slo.ttftP95`) a
//! request held for a first replica should still meet once that replica is up.

use std::time::Duration;

use kube::api::DynamicObject;

use crate::vocab::ColdStart;

/// The cold start of `md`: its TTFT SLO, and the time to a first replica the operator
/// measured (`status.coldStart`: the longest of its latest cold starts) once it has one;
/// until then the gateway's `queue.cold_start_ms` stands in. `None` when the TTFT SLO is
/// missing or unreadable.
pub fn cold_start_of(md: &DynamicObject) -> Option<ColdStart> {
    let ttft_slo = parse_duration(md.data["spec"]["slo"]["ttftP95"].as_str()?)?;
    let expected = md.data["status"]["coldStart"]
        .as_str()
        .and_then(parse_duration);
    Some(ColdStart { expected, ttft_slo })
}

/// Parses the resource's durations ("500ms", "1m30s", "1.5s"; the API server's schema
/// has checked their form) with the one duration parser; `None` for anything else.
pub fn parse_duration(text: &str) -> Option<Duration> {
    tokenscale_common::duration::parse(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};

    #[test]
    fn durations_read_as_the_resource_writes_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("500ms"), Some(ms(500)));
        assert_eq!(parse_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(parse_duration("1.5s"), Some(ms(1500)));
        assert_eq!(parse_duration("2h"), Some(ms(7_200_000)));
        for bad in ["", "-1s", "1 s", "s", "1.2.3s", "0s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_cold_start_carries_the_ttft_slo() {
        let (group, version, kind) = super::super::kubernetes::MODEL_DEPLOYMENT;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut md = DynamicObject::new("llama", &resource);
        md.data = serde_json::json!({"spec": {"slo": {"ttftP95": "800ms", "tpotP95": "50ms"}}});
        assert_eq!(
            cold_start_of(&md),
            Some(ColdStart {
                expected: None,
                ttft_slo: Duration::from_millis(800)
            })
        );
        // Once the operator has measured cold starts, the hold is theirs.
        md.data["status"] = serde_json::json!({"coldStart": "95.5s"});
        assert_eq!(
            cold_start_of(&md).and_then(|c| c.expected),
            Some(Duration::from_millis(95_500))
        );
        md.data = serde_json::json!({"spec": {}});
        assert_eq!(cold_start_of(&md), None);
    }
}
