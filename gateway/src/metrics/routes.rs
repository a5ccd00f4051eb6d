//! Routes' counters: which model answered a route's requests, and every fallback by reason.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokenscale_common::exposition::Family;

use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::render::{counted, lock};

/// A fallback's labels: route, from, to, reason.
type FallbackKey = (String, String, String, &'static str);

/// Requests by `(route, model)`, fallbacks by `(route, from, to, reason)`.
#[derive(Debug, Default)]
pub struct RouteCounts {
    served: Mutex<BTreeMap<(String, String), u64>>,
    fallbacks: Mutex<BTreeMap<FallbackKey, u64>>,
}

impl RouteCounts {
    /// Counts a route's request answered by `model`.
    pub fn served(&self, route: &str, model: &str) {
        let mut map = self.served.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((route.to_string(), model.to_string()))
            .or_default() += 1;
    }

    /// Counts a move from `from` to `to` (`none`: nothing left) for `reason`.
    pub fn fallback(&self, route: &str, from: &str, to: &str, reason: &'static str) {
        let mut map = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        let key = (route.to_string(), from.to_string(), to.to_string(), reason);
        *map.entry(key).or_default() += 1;
    }

    /// Both families (headers even before the first request, so a reader can tell a
    /// gateway without routes' traffic from one that does not count).
    pub fn families(&self) -> [Family<'static>; 2] {
        [
            counted(
                names::ROUTE_REQUESTS_TOTAL,
                "Requests for a route, by the model that answered them.",
                &lock(&self.served),
                |(route, model)| vec![(names::LABEL_ROUTE, route.clone()), (MODEL, model.clone())],
            ),
            counted(
                names::ROUTE_FALLBACKS_TOTAL,
                "A route's request moving on from one model to the next, by reason (to=\"none\": no model was left).",
                &lock(&self.fallbacks),
                |(route, from, to, reason)| {
                    let route = (names::LABEL_ROUTE, route.clone());
                    let reason = (names::LABEL_REASON, reason.to_string());
                    vec![route, ("from", from.clone()), ("to", to.clone()), reason]
                },
            ),
        ]
    }
}
