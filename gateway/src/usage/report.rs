//! The usage report (`GET /v1/usage`): per tenant and model, each window's use beside its
//! limit, 429s by limit, and the binding limit. Serialized by the gateway and read back by
//! `tokenscale usage`, so both sides share these types.

use serde::{Deserialize, Serialize};

use super::binding::binding;
use super::window::{Counts, KINDS};
use crate::config::LimitsConfig;
use crate::vocab::LimitKind;

/// One limit's use in a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LimitUse {
    /// Requests or tokens counted in the window.
    pub used: u64,
    /// The limit over the window (the per-minute quota, times 60 for the hour); `None`
    /// without one.
    pub limit: Option<u64>,
    /// `used` as a percentage of `limit`, to one decimal.
    pub percent: Option<f64>,
}

impl LimitUse {
    fn new(used: u64, limit: Option<u64>) -> Self {
        let percent = limit
            .filter(|l| *l > 0)
            .map(|l| (used as f64 * 1000.0 / l as f64).round() / 10.0);
        Self {
            used,
            limit,
            percent,
        }
    }
}

/// 429s in a window, by the limit that refused (a tenant-wide limit counts under its kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimited {
    /// By requests per minute.
    pub requests: u64,
    /// By input tokens per minute.
    pub input_tokens: u64,
    /// By output tokens per minute.
    pub output_tokens: u64,
}

/// One window of one tenant on one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowUsage {
    /// Requests that passed the limits and finished.
    pub requests: LimitUse,
    /// Prompt tokens not served from the prefix cache (what the input limit charges).
    pub input_tokens: LimitUse,
    /// Prompt tokens served from the prefix cache (not charged).
    pub cached_input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: LimitUse,
    /// 429s by limit.
    pub rate_limited: RateLimited,
    /// The limit that binds first in this window (see `binding`).
    pub binding: Option<LimitKind>,
}

impl WindowUsage {
    /// `counts` over a window of `minutes` against the per-minute `limits`.
    pub fn new(counts: &Counts, limits: Option<&LimitsConfig>, minutes: u64) -> Self {
        let [requests, input_tokens, output_tokens] = KINDS.map(|kind| {
            let limit = limits.and_then(|l| l.quota(kind)).map(|q| q * minutes);
            LimitUse::new(counts.used(kind), limit)
        });
        Self {
            requests,
            input_tokens,
            cached_input_tokens: counts.cached_input_tokens,
            output_tokens,
            rate_limited: RateLimited {
                requests: counts.refusals(LimitKind::Requests),
                input_tokens: counts.refusals(LimitKind::InputTokens),
                output_tokens: counts.refusals(LimitKind::OutputTokens),
            },
            binding: binding(counts, limits),
        }
    }
}

/// One tenant on one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The tenant's name.
    pub tenant: String,
    /// The served model name.
    pub model: String,
    /// The limit that binds first: the last minute's, else (an idle minute) the last hour's.
    pub binding: Option<LimitKind>,
    /// The last 60 seconds.
    pub minute: WindowUsage,
    /// The last 60 minutes.
    pub hour: WindowUsage,
}

impl UsageRow {
    /// The row of `tenant` on `model` from its windows' counts and its per-model `limits`.
    pub fn new(
        tenant: &str,
        model: &str,
        minute: &Counts,
        hour: &Counts,
        limits: Option<&LimitsConfig>,
    ) -> Self {
        let minute = WindowUsage::new(minute, limits, 1);
        let hour = WindowUsage::new(hour, limits, 60);
        Self {
            tenant: tenant.to_string(),
            model: model.to_string(),
            binding: minute.binding.or(hour.binding),
            minute,
            hour,
        }
    }
}

/// The answer of `GET /v1/usage`: rows sorted by tenant, then model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageList {
    /// Always `list`, as OpenAI's list answers.
    pub object: String,
    /// One row per tenant and model.
    pub data: Vec<UsageRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hour_scales_each_limit_by_sixty_and_an_idle_minute_defers_to_the_hour() {
        let limits = LimitsConfig {
            requests_per_minute: Some(10),
            input_tokens_per_minute: None,
            output_tokens_per_minute: Some(200),
        };
        let hour = Counts {
            requests: 30,
            output_tokens: 6_000,
            ..Counts::default()
        };
        let row = UsageRow::new("a", "m", &Counts::default(), &hour, Some(&limits));
        assert_eq!(row.hour.requests, LimitUse::new(30, Some(600)));
        assert_eq!(row.hour.output_tokens.percent, Some(50.0));
        assert_eq!(row.hour.input_tokens.limit, None);
        assert_eq!(row.minute.binding, None);
        assert_eq!(row.binding, Some(LimitKind::OutputTokens));
        let json = serde_json::to_value(&row).expect("serializes");
        assert_eq!(json["binding"], "output_tokens");
        assert_eq!(json["minute"]["binding"], serde_json::Value::Null);
        assert_eq!(
            json["hour"]["input_tokens"]["percent"],
            serde_json::Value::Null
        );
        let back: UsageRow = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, row);
    }

    #[test]
    fn percent_is_rounded_to_one_decimal() {
        assert_eq!(LimitUse::new(1, Some(3)).percent, Some(33.3));
        assert_eq!(LimitUse::new(5, Some(0)).percent, None);
    }
}
