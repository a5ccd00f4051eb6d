//! Durations as flags and manifests write them: one or more `<number><unit>` parts (`500ms`,
//! `1.5s`, `1m30s`; units `us`, `ms`, `s`, `m`, `h`, `d`) or a bare number of seconds. One
//! parser, so a flag that the operator renders from a manifest reads the same on every side.

use std::time::Duration;

/// Parses `text` into a positive, finite duration, or says why it is not one.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a duration (e.g. 500ms, 1.5s, 1m30s)");
    if text.is_empty() {
        return Err(bad());
    }
    let mut rest = text;
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            // A bare number is seconds, but only alone: "1m30" is a typo, not 90 s.
            "" if seconds == 0.0 && digits == text.len() => 1.0,
            "us" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "" => return Err(bad()),
            unit => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?} (use us, ms, s, m, h or d)"
                ));
            }
        };
        seconds += number * scale;
        rest = &rest[unit_len..];
    }
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("{text:?} must be a positive duration"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_flags_and_manifests_use() {
        let ms = |t: &str| parse(t).map(|d| d.as_secs_f64() * 1e3);
        assert_eq!(ms("50ms"), Ok(50.0));
        assert_eq!(ms("1.5s"), Ok(1500.0));
        assert_eq!(ms("1m30s"), Ok(90_000.0));
        assert_eq!(ms("0.05"), Ok(50.0));
        assert_eq!(ms(" 2h "), Ok(7_200_000.0));
        for bad in [
            "",
            "ms",
            "fast",
            "1m30",
            "-5s",
            "0s",
            "5 parsecs",
            "1e999s",
            "3w",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
