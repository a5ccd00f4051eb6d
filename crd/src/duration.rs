//! `Duration`: a span of time written as a string in manifests ("500ms", "1m30s"), parsed once.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The schema pattern for durations: one or more `<number><unit>` parts, units `ms`, `s`, `m`,
/// `h`. A sign is deliberately not allowed, so a negative SLO fails schema validation.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing was given.
    #[error("empty duration: expected a number followed by ms, s, m or h (e.g. \"500ms\")")]
    Empty,
    /// The text is not a sequence of `<number><unit>` parts.
    #[error(
        "invalid duration {text:?}: expected numbers followed by ms, s, m or h, \
         like \"500ms\" or \"1m30s\" (no sign, no spaces)"
    )]
    Malformed {
        /// The rejected text.
        text: String,
    },
    /// The value does not fit in a `std::time::Duration`.
    #[error("duration {text:?} is too large")]
    TooLarge {
        /// The rejected text.
        text: String,
    },
}

/// A non-negative span of time, kept as the text the user wrote and its parsed value, so it
/// round-trips through the API server unchanged.
#[derive(Clone, PartialEq, Eq)]
pub struct Duration {
    text: String,
    value: std::time::Duration,
}

impl Duration {
    /// The parsed value.
    pub fn get(&self) -> std::time::Duration {
        self.value
    }

    /// The value in seconds.
    pub fn as_secs_f64(&self) -> f64 {
        self.value.as_secs_f64()
    }

    /// Formats a `std::time::Duration` the way status fields show it ("412ms", "2.5s").
    pub fn from_std(value: std::time::Duration) -> Self {
        let ms = value.as_secs_f64() * 1e3;
        let text = if ms < 1_000.0 {
            format!("{}ms", ms.round() as u64)
        } else {
            let s = (value.as_secs_f64() * 100.0).round() / 100.0;
            format!("{s}s")
        };
        Self { text, value }
    }
}

impl FromStr for Duration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Err(DurationError::Empty);
        }
        let malformed = || DurationError::Malformed {
            text: text.to_string(),
        };
        let mut total_s = 0.0_f64;
        let mut rest = text;
        while !rest.is_empty() {
            let number_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(malformed)?;
            let (number, after) = rest.split_at(number_len);
            let valid_number = !number.is_empty()
                && !number.starts_with('.')
                && !number.ends_with('.')
                && number.matches('.').count() <= 1;
            if !valid_number {
                return Err(malformed());
            }
            let amount: f64 = number.parse().map_err(|_| malformed())?;
            // "ms" must be tried before "m".
            let (scale_s, unit_len) = if after.starts_with("ms") {
                (1e-3, 2)
            } else if after.starts_with('s') {
                (1.0, 1)
            } else if after.starts_with('m') {
                (60.0, 1)
            } else if after.starts_with('h') {
                (3_600.0, 1)
            } else {
                return Err(malformed());
            };
            total_s += amount * scale_s;
            rest = &after[unit_len..];
        }
        let value = std::time::Duration::try_from_secs_f64(total_s).map_err(|_| {
            DurationError::TooLarge {
                text: text.to_string(),
            }
        })?;
        Ok(Self {
            text: text.to_string(),
            value,
        })
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Duration({:?})", self.text)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "A duration: numbers with units ms, s, m or h, e.g. \"500ms\", \"1m30s\"."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        text.parse::<Duration>()
            .map(|d| d.as_secs_f64())
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(secs("500ms"), 0.5);
        assert_eq!(secs("2s"), 2.0);
        assert_eq!(secs("1.5s"), 1.5);
        assert_eq!(secs("1m30s"), 90.0);
        assert_eq!(secs("1h"), 3_600.0);
        assert_eq!(secs("0s"), 0.0);
    }

    #[test]
    fn rejects_signs_spaces_and_missing_units() {
        for bad in [
            "-500ms", "500", "ms", "5 s", "1.s", ".5s", "5sec", "1..2s", "5S",
        ] {
            let err = bad.parse::<Duration>().expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
        assert_eq!("".parse::<Duration>(), Err(DurationError::Empty));
    }

    #[test]
    fn round_trips_as_written_and_formats_status_values() {
        let d: Duration = serde_json::from_str("\"1m30s\"").expect("valid");
        assert_eq!(serde_json::to_string(&d).expect("serialise"), "\"1m30s\"");
        assert_eq!(
            Duration::from_std(std::time::Duration::from_millis(412)).to_string(),
            "412ms"
        );
        assert_eq!(
            Duration::from_std(std::time::Duration::from_millis(2_500)).to_string(),
            "2.5s"
        );
        assert!(matches!(
            "99999999999999999999999h".parse::<Duration>(),
            Err(DurationError::TooLarge { .. })
        ));
    }
}
