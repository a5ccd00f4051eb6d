//! The pod's bounds and its limits store on `/metrics`: open connections, requests in flight,
//! how many gateway pods share the limits, and whether Redis answers.

use std::sync::atomic::Ordering;

use tokenscale_common::exposition::{Family, Kind, Series, render};

use tokenscale_common::metrics::gateway as names;

use crate::limits::Limiter;
use crate::vocab::GatewayShare;

/// Appends the bounds' and the limits store's families.
pub fn render_bounds(
    out: &mut String,
    limiter: &Limiter,
    share: &GatewayShare,
    connections: usize,
    connections_refused: u64,
    in_flight: usize,
) {
    let health = &limiter.health;
    let (pods, _) = share.get();
    let families: [(&str, Kind, &str, u64); 8] = [
        (
            names::CONNECTIONS,
            Kind::Gauge,
            "Client connections open on this pod.",
            connections as u64,
        ),
        (
            names::CONNECTIONS_REFUSED_TOTAL,
            Kind::Counter,
            "Client connections refused because the pod was at bounds.max_connections.",
            connections_refused,
        ),
        (
            names::POD_IN_FLIGHT_REQUESTS,
            Kind::Gauge,
            "Requests on this pod from headers read to response end (capped by bounds.max_in_flight).",
            in_flight as u64,
        ),
        (
            names::GATEWAY_PODS,
            Kind::Gauge,
            "Gateway pods sharing limits and capacity, as this pod last saw them (1 in memory mode).",
            u64::from(pods),
        ),
        (
            names::LIMITS_STORE_UP,
            Kind::Gauge,
            "1 when the last call to the limits store succeeded (always 1 in memory mode).",
            u64::from(health.up.load(Ordering::Relaxed)),
        ),
        (
            names::LIMITS_STORE_FAILURES_TOTAL,
            Kind::Counter,
            "Calls to the limits store that failed or timed out.",
            health.failures.load(Ordering::Relaxed),
        ),
        (
            names::LIMITS_LOCAL_FALLBACK_TOTAL,
            Kind::Counter,
            "Requests limited by this pod alone, at its share of each quota, while the limits store was down.",
            health.local_fallbacks.load(Ordering::Relaxed),
        ),
        (
            names::LIMITS_LOST_SETTLEMENTS_TOTAL,
            Kind::Counter,
            "Settlements the limits store could not take (the reservation stayed charged).",
            health.lost_settlements.load(Ordering::Relaxed),
        ),
    ];
    let families = families
        .map(|(name, kind, help, value)| Family::new(name, kind, help, vec![Series::bare(value)]));
    out.push_str(&render(&families));
}
