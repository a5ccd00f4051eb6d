//! A request's admission class and deadline: from its headers, else its body and the
//! class defaults; for a model at zero replicas, its cold start plus its TTFT SLO.

use std::time::Duration;

use tokenscale_common::headers as names;

use crate::config::QueueConfig;
use crate::error::GatewayError;
use crate::vocab::{ColdStart, Priority};

/// `x-tokenscale-priority`, else the body's `priority` when it is a class name.
pub(super) fn request_priority(
    headers: &http::HeaderMap,
    body: Option<&serde_json::value::RawValue>,
) -> Result<Priority, GatewayError> {
    if let Some(value) = headers.get(names::PRIORITY) {
        let text = value.to_str().unwrap_or("");
        return Priority::parse(text).ok_or_else(|| {
            GatewayError::bad_request(
                format!("{} must be `interactive` or `batch`", names::PRIORITY),
                None,
            )
        });
    }
    let from_body = body
        .and_then(|raw| serde_json::from_str::<&str>(raw.get()).ok())
        .and_then(Priority::parse);
    Ok(from_body.unwrap_or(Priority::Interactive))
}

/// `x-tokenscale-deadline-ms` (capped), else the class default; for a model with no ready
/// replica whose cold start discovery knows, that cold start plus the TTFT SLO instead of
/// the interactive default (a batch request keeps its longer default if longer): the first
/// requests wait for the replica they caused to start, not 30 s.
pub(super) fn request_deadline(
    headers: &http::HeaderMap,
    priority: Priority,
    queue: &QueueConfig,
    cold_start: Option<ColdStart>,
) -> Result<Duration, GatewayError> {
    let class_default = Duration::from_millis(match priority {
        Priority::Interactive => queue.interactive_timeout_ms,
        Priority::Batch => queue.batch_timeout_ms,
    });
    let Some(value) = headers.get(names::DEADLINE_MS) else {
        let Some(cold_start) = cold_start else {
            return Ok(class_default);
        };
        let hold = cold_start.hold(Duration::from_millis(queue.cold_start_ms));
        let hold = match priority {
            Priority::Interactive => hold,
            Priority::Batch => hold.max(class_default),
        };
        return Ok(hold.min(Duration::from_millis(queue.max_timeout_ms)));
    };
    let ms: u64 = value
        .to_str()
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| {
            GatewayError::bad_request(
                format!(
                    "{} must be a whole number of milliseconds",
                    names::DEADLINE_MS
                ),
                None,
            )
        })?;
    Ok(Duration::from_millis(ms.min(queue.max_timeout_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERACTIVE: Duration = Duration::from_secs(30);

    fn queue() -> QueueConfig {
        QueueConfig {
            cold_start_ms: 90_000,
            ..QueueConfig::default()
        }
    }

    fn deadline(
        headers: &http::HeaderMap,
        priority: Priority,
        cold: Option<ColdStart>,
    ) -> Duration {
        request_deadline(headers, priority, &queue(), cold).expect("valid")
    }

    #[test]
    fn a_model_at_zero_holds_for_its_cold_start_plus_the_ttft_slo() {
        let none = http::HeaderMap::new();
        let slo = Duration::from_millis(500);
        let configured = ColdStart {
            expected: None,
            ttft_slo: slo,
        };
        // Unknown cold start: the configured one (90 s) plus the SLO, not the 30 s default.
        assert_eq!(
            deadline(&none, Priority::Interactive, Some(configured)),
            Duration::from_millis(90_500)
        );
        let measured = ColdStart {
            expected: Some(Duration::from_secs(20)),
            ttft_slo: slo,
        };
        assert_eq!(
            deadline(&none, Priority::Interactive, Some(measured)),
            Duration::from_millis(20_500)
        );
        // Batch keeps its longer default; nothing known: the class default.
        assert_eq!(
            deadline(&none, Priority::Batch, Some(measured)),
            Duration::from_secs(600)
        );
        assert_eq!(deadline(&none, Priority::Interactive, None), INTERACTIVE);
        // Never past the largest deadline.
        let slow = ColdStart {
            expected: Some(Duration::from_secs(7200)),
            ttft_slo: slo,
        };
        assert_eq!(
            deadline(&none, Priority::Interactive, Some(slow)),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn the_clients_own_deadline_wins() {
        let mut headers = http::HeaderMap::new();
        headers.insert(names::DEADLINE_MS, "1500".parse().expect("header"));
        let cold = ColdStart {
            expected: None,
            ttft_slo: Duration::from_secs(1),
        };
        assert_eq!(
            deadline(&headers, Priority::Interactive, Some(cold)),
            Duration::from_millis(1500)
        );
    }
}
