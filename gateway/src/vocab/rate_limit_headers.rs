//! The `x-ratelimit-*` headers, in the shape OpenAI's API sends them.

use std::time::Duration;

use bytes::BytesMut;
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
static NAMES: [(HeaderName, HeaderName, HeaderName); 3] = [
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
    ///
    /// This runs on every response: the (up to nine) values are written into one buffer and
    /// each header value is a slice of it, so the headers cost one allocation, not nine.
    pub fn write(&self, headers: &mut HeaderMap) {
        let buckets = [&self.requests, &self.input_tokens, &self.output_tokens];
        if buckets.iter().all(|b| b.is_none()) {
            return;
        }
        // Each value's header name and where its text ends in the shared buffer.
        let mut spans: [Option<(&HeaderName, usize)>; 9] = Default::default();
        // 20 digits for each u64, at most 26 bytes for a reset (see `push_reset`).
        let mut text = BytesMut::with_capacity(3 * (20 + 20 + 26));
        let present = NAMES
            .iter()
            .zip(buckets)
            .filter_map(|(names, b)| Some((names, b.as_ref()?)));
        for (at, ((limit, remaining, reset), bucket)) in
            present.enumerate().map(|(i, p)| (3 * i, p))
        {
            push_decimal(&mut text, bucket.limit, 1);
            spans[at] = Some((limit, text.len()));
            push_decimal(&mut text, bucket.remaining, 1);
            spans[at + 1] = Some((remaining, text.len()));
            push_reset(&mut text, bucket.reset);
            spans[at + 2] = Some((reset, text.len()));
        }
        let text = text.freeze();
        let mut start = 0;
        for (name, end) in spans.into_iter().flatten() {
            // Digits, letters and points only: always a valid header value.
            if let Ok(value) = HeaderValue::from_maybe_shared(text.slice(start..end)) {
                headers.insert(name.clone(), value);
            }
            start = end;
        }
    }
}

/// Appends `n` in decimal, zero-padded to at least `width` digits. (By hand: `fmt`'s
/// machinery was a fifth of this file's cost per response.)
fn push_decimal(out: &mut BytesMut, mut n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n > 0 || digits.len() - at < width.clamp(1, 20) {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends a duration as OpenAI writes it (`20ms`, `1.5s`, `6m0s`), in whole milliseconds.
fn push_reset(out: &mut BytesMut, reset: Duration) {
    let ms = u64::try_from(reset.as_millis()).unwrap_or(u64::MAX);
    if ms < 1000 {
        push_decimal(out, ms, 1);
        out.extend_from_slice(b"ms");
    } else if ms < 60_000 {
        // Seconds with up to three decimals, trailing zeros (and a bare point) trimmed.
        let (whole, mut frac, mut width) = (ms / 1000, ms % 1000, 3);
        push_decimal(out, whole, 1);
        if frac > 0 {
            while frac % 10 == 0 {
                frac /= 10;
                width -= 1;
            }
            out.extend_from_slice(b".");
            push_decimal(out, frac, width);
        }
        out.extend_from_slice(b"s");
    } else {
        push_decimal(out, ms / 60_000, 1);
        out.extend_from_slice(b"m");
        push_decimal(out, (ms % 60_000) / 1000, 1);
        out.extend_from_slice(b"s");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_reset(reset: Duration) -> String {
        let mut text = BytesMut::new();
        push_reset(&mut text, reset);
        String::from_utf8_lossy(&text).into_owned()
    }

    #[test]
    fn every_bucket_gets_its_three_headers() {
        let bucket = |limit, remaining, ms| BucketHeader {
            limit,
            remaining,
            reset: Duration::from_millis(ms),
        };
        let all = RateLimitHeaders {
            requests: Some(bucket(60, 59, 1000)),
            input_tokens: None,
            output_tokens: Some(bucket(u64::MAX, 0, 360_000)),
        };
        let mut headers = HeaderMap::new();
        all.write(&mut headers);
        let get = |name: &str| {
            headers
                .get(name)
                .map(|v| v.to_str().unwrap_or("?").to_string())
        };
        assert_eq!(get("x-ratelimit-limit-requests").as_deref(), Some("60"));
        assert_eq!(get("x-ratelimit-remaining-requests").as_deref(), Some("59"));
        assert_eq!(get("x-ratelimit-reset-requests").as_deref(), Some("1s"));
        assert_eq!(get("x-ratelimit-limit-tokens"), None);
        assert_eq!(
            get("x-ratelimit-limit-output-tokens").as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(
            get("x-ratelimit-remaining-output-tokens").as_deref(),
            Some("0")
        );
        assert_eq!(
            get("x-ratelimit-reset-output-tokens").as_deref(),
            Some("6m0s")
        );
        assert_eq!(headers.len(), 6);
        RateLimitHeaders::default().write(&mut headers);
        assert_eq!(headers.len(), 6);
    }

    #[test]
    fn resets_read_like_openai() {
        assert_eq!(format_reset(Duration::from_millis(20)), "20ms");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(2)), "2s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
        assert_eq!(format_reset(Duration::from_millis(1050)), "1.05s");
        assert_eq!(format_reset(Duration::from_millis(59_999)), "59.999s");
        assert_eq!(format_reset(Duration::from_millis(1_005)), "1.005s");
        assert_eq!(format_reset(Duration::from_millis(1_200)), "1.2s");
        assert_eq!(format_reset(Duration::ZERO), "0ms");
        assert_eq!(format_reset(Duration::from_secs(3_600)), "60m0s");
        assert_eq!(format_reset(Duration::MAX), "307445734561825m51s");
    }
}
