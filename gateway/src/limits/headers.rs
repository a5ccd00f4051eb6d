//! The `x-ratelimit-*` headers, in the shape OpenAI's API sends them.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};

/// One bucket as the headers describe it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketHeader {
    /// Units per minute.
    pub limit: u64,
    /// Units available now.
    pub remaining: u64,
    /// Time until the bucket is full again.
    pub reset: Duration,
}

/// The buckets of one (tenant, model): `-requests`, `-tokens` (input tokens, OpenAI's
/// "tokens") and `-output-tokens`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimitHeaders {
    /// Requests per minute.
    pub requests: Option<BucketHeader>,
    /// Input tokens per minute.
    pub input_tokens: Option<BucketHeader>,
    /// Output tokens per minute.
    pub output_tokens: Option<BucketHeader>,
}

impl RateLimitHeaders {
    /// Writes `x-ratelimit-{limit,remaining,reset}-{requests,tokens,output-tokens}`.
    pub fn write(&self, headers: &mut HeaderMap) {
        for (suffix, bucket) in [
            ("requests", &self.requests),
            ("tokens", &self.input_tokens),
            ("output-tokens", &self.output_tokens),
        ] {
            let Some(bucket) = bucket else { continue };
            let put = |headers: &mut HeaderMap, name: String, value: HeaderValue| {
                if let Ok(name) = http::HeaderName::try_from(name) {
                    headers.insert(name, value);
                }
            };
            put(
                headers,
                format!("x-ratelimit-limit-{suffix}"),
                HeaderValue::from(bucket.limit),
            );
            put(
                headers,
                format!("x-ratelimit-remaining-{suffix}"),
                HeaderValue::from(bucket.remaining),
            );
            if let Ok(reset) = HeaderValue::try_from(format_reset(bucket.reset)) {
                put(headers, format!("x-ratelimit-reset-{suffix}"), reset);
            }
        }
    }
}

/// Durations as OpenAI writes them: `20ms`, `1.5s`, `6m0s`.
pub fn format_reset(reset: Duration) -> String {
    let ms = reset.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = format!("{:.3}", reset.as_secs_f64());
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_read_like_openai() {
        assert_eq!(format_reset(Duration::from_millis(20)), "20ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(2)), "2s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
    }
}
