//! The `x-ratelimit-*` headers, in the shape OpenAI's API sends them.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

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

/// `x-ratelimit-{limit,remaining,reset}-{suffix}`, built once: this runs on every response.
const NAMES: [(HeaderName, HeaderName, HeaderName); 3] = [
    (
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ),
    (
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ),
    (
        HeaderName::from_static("x-ratelimit-limit-output-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-output-tokens"),
        HeaderName::from_static("x-ratelimit-reset-output-tokens"),
    ),
];

impl RateLimitHeaders {
    /// Writes `x-ratelimit-{limit,remaining,reset}-{requests,tokens,output-tokens}`.
    pub fn write(&self, headers: &mut HeaderMap) {
        let buckets = [&self.requests, &self.input_tokens, &self.output_tokens];
        headers.reserve(3 * buckets.iter().filter(|b| b.is_some()).count());
        for ((limit, remaining, reset), bucket) in NAMES.iter().zip(buckets) {
            let Some(bucket) = bucket else { continue };
            headers.insert(limit.clone(), HeaderValue::from(bucket.limit));
            headers.insert(remaining.clone(), HeaderValue::from(bucket.remaining));
            let mut text = [0u8; 32];
            let len = write_reset(bucket.reset, &mut text);
            if let Ok(value) = HeaderValue::from_bytes(&text[..len]) {
                headers.insert(reset.clone(), value);
            }
        }
    }
}

/// Writes a duration as OpenAI does (`20ms`, `1.5s`, `6m0s`, in whole milliseconds) into a
/// stack buffer, with no allocation; returns the length written.
fn write_reset(reset: Duration, out: &mut [u8; 32]) -> usize {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut out[..]);
    let ms = reset.as_millis();
    // A Duration has at most 23 digits of milliseconds: 32 bytes always suffice.
    let _ = if ms < 1000 {
        write!(cursor, "{ms}ms")
    } else if ms < 60_000 {
        // Seconds with up to three decimals, trailing zeros (and a bare point) trimmed.
        let (whole, frac) = (ms / 1000, ms % 1000);
        match (frac % 100, frac % 10) {
            _ if frac == 0 => write!(cursor, "{whole}s"),
            (0, _) => write!(cursor, "{whole}.{}s", frac / 100),
            (_, 0) => write!(cursor, "{whole}.{:02}s", frac / 10),
            _ => write!(cursor, "{whole}.{frac:03}s"),
        }
    } else {
        write!(cursor, "{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    };
    cursor.position() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_reset(reset: Duration) -> String {
        let mut text = [0u8; 32];
        let len = write_reset(reset, &mut text);
        String::from_utf8_lossy(&text[..len]).into_owned()
    }

    #[test]
    fn resets_read_like_openai() {
        assert_eq!(format_reset(Duration::from_millis(20)), "20ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(2)), "2s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
        assert_eq!(format_reset(Duration::from_millis(1050)), "1.05s");
        assert_eq!(format_reset(Duration::from_millis(59_999)), "59.999s");
    }
}
