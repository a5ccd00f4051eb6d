//! Tests of counter accumulation and windowed rates and quantiles.

use std::collections::BTreeMap;

use super::*;

fn readings(pairs: &[(&str, f64)]) -> BTreeMap<SeriesKey, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn restarts_and_departures_never_make_totals_go_down() {
    let mut acc = Accumulator::default();
    acc.add("pod-a", &readings(&[("tokens", 1_000.0)])); // baseline only
    acc.add("pod-b", &readings(&[("tokens", 50.0)]));
    assert_eq!(acc.snapshot(0.0).get("tokens"), 0.0);
    acc.add("pod-a", &readings(&[("tokens", 1_100.0)])); // +100
    acc.add("pod-b", &readings(&[("tokens", 80.0)])); // +30
    assert_eq!(acc.snapshot(1.0).get("tokens"), 130.0);
    acc.add("pod-a", &readings(&[("tokens", 20.0)])); // restarted: +20
    acc.retain_targets(&["pod-a".to_string()]); // pod-b gone: totals keep its work
    assert_eq!(acc.snapshot(2.0).get("tokens"), 150.0);
    acc.add("pod-b", &readings(&[("tokens", 500.0)])); // a new pod-b: baseline again
    assert_eq!(acc.snapshot(3.0).get("tokens"), 150.0);
}

#[test]
fn rate_uses_the_window_baseline_and_needs_two_snapshots() {
    let mut history = History::default();
    let at = |t: f64, tokens: f64| Snapshot {
        t_s: t,
        totals: readings(&[("tokens", tokens)]),
    };
    history.push(at(0.0, 0.0), 60.0);
    assert_eq!(history.rate("tokens", 60.0), None);
    // 100 tokens/s for 60 s, then 1000 tokens/s for 6 s.
    for step in 1..=12 {
        history.push(at(f64::from(step) * 5.0, f64::from(step) * 500.0), 60.0);
    }
    history.push(at(66.0, 6_000.0 + 6_000.0), 60.0);
    let stable = history.rate("tokens", 60.0).unwrap_or(0.0);
    let panic = history.rate("tokens", 6.0).unwrap_or(0.0);
    // Stable window: baseline at t=5 (5 ≤ 66−60): (12000 − 500) / 61.
    assert!((stable - 11_500.0 / 61.0).abs() < 1e-9, "{stable}");
    // Panic window: baseline at t=60: 6000 / 6.
    assert!((panic - 1_000.0).abs() < 1e-9, "{panic}");
    assert_eq!(history.increase("tokens", 6.0), Some(6_000.0));
    // Old snapshots beyond the kept window are dropped, one baseline kept.
    assert!(history.len() <= 13);
}

#[test]
fn window_quantile_sees_only_the_window() {
    let mut history = History::default();
    let snap = |t: f64, fast: f64, slow: f64| Snapshot {
        t_s: t,
        totals: readings(&[])
            .into_iter()
            .chain([
                (bucket_key("ttft", 0.1), fast),
                (bucket_key("ttft", 1.0), fast + slow),
                (bucket_key("ttft", f64::INFINITY), fast + slow),
            ])
            .collect(),
    };
    history.push(snap(0.0, 1_000.0, 0.0), 60.0);
    history.push(snap(30.0, 1_000.0, 0.0), 60.0);
    history.push(snap(60.0, 1_000.0, 100.0), 60.0);
    let p95_last_30s = history.quantile("ttft", 0.95, 30.0).unwrap_or(0.0);
    assert!(p95_last_30s > 0.9, "{p95_last_30s}");
    assert_eq!(history.quantile("ttft", 0.95, 0.0), None);
}
