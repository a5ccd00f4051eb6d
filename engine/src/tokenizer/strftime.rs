//! `strftime_now(format)`, which Llama 3.x chat templates call to print today's date (Hugging
//! Face provides it to templates). Supports the common directives, in UTC.

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Formats the current UTC time with `format`.
pub fn strftime_now(format: String) -> String {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    strftime(&format, now_s)
}

/// Formats `unix_s` (seconds since 1970, UTC) with `%Y %y %m %d %e %B %b %H %M %S %%`; other
/// directives are kept as written.
pub fn strftime(format: &str, unix_s: u64) -> String {
    let (year, month, day) = civil_from_days((unix_s / 86_400) as i64);
    let secs_of_day = unix_s % 86_400;
    let month_name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('B') => out.push_str(month_name),
            Some('b') => out.push_str(&month_name[..3]),
            Some('H') => out.push_str(&format!("{:02}", secs_of_day / 3600)),
            Some('M') => out.push_str(&format!("{:02}", secs_of_day / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", secs_of_day % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn formats_known_dates() {
        assert_eq!(strftime("%d %b %Y", 0), "01 Jan 1970");
        // 2024-02-29 12:34:56 UTC, a leap day.
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %B %y %%", 1_709_210_096),
            "2024-02-29 12:34:56 February 24 %"
        );
        assert_eq!(strftime("%e %q", 1_709_210_096), "29 %q");
    }
}
