//! The usage report as a text table: a line per tenant, model and window, each limit's use
//! as `used/limit (percent)`, the 429s per limit, and the limit that binds in that window.

use tokenscale_gateway::usage::{LimitUse, UsageList, WindowUsage};

/// Column titles, in order.
const HEADER: [&str; 8] = [
    "TENANT",
    "MODEL",
    "WINDOW",
    "REQUESTS",
    "INPUT TOKENS",
    "CACHED",
    "OUTPUT TOKENS",
    "429s REQ/IN/OUT",
];

/// The table of `list` (a line saying so when it is empty).
pub fn render(list: &UsageList) -> String {
    if list.data.is_empty() {
        return "no usage recorded yet".to_string();
    }
    let mut lines: Vec<Vec<String>> = vec![
        HEADER
            .iter()
            .map(|h| h.to_string())
            .chain(["BINDING".to_string()])
            .collect(),
    ];
    for row in &list.data {
        for (window, usage) in [("1m", &row.minute), ("1h", &row.hour)] {
            let mut line = vec![row.tenant.clone(), row.model.clone(), window.to_string()];
            line.extend(cells(usage));
            lines.push(line);
        }
    }
    aligned(&lines)
}

/// The cells after the window's name.
fn cells(usage: &WindowUsage) -> [String; 6] {
    let refused = &usage.rate_limited;
    [
        limit_cell(&usage.requests),
        limit_cell(&usage.input_tokens),
        usage.cached_input_tokens.to_string(),
        limit_cell(&usage.output_tokens),
        format!(
            "{}/{}/{}",
            refused.requests, refused.input_tokens, refused.output_tokens
        ),
        usage.binding.map_or("-", |kind| kind.as_str()).to_string(),
    ]
}

/// `used/limit (percent%)`, or `used/-` without a limit.
fn limit_cell(usage: &LimitUse) -> String {
    match (usage.limit, usage.percent) {
        (Some(limit), Some(percent)) => format!("{}/{limit} ({percent:.1}%)", usage.used),
        (Some(limit), None) => format!("{}/{limit}", usage.used),
        (None, _) => format!("{}/-", usage.used),
    }
}

/// `lines` in columns two spaces apart, each as wide as its widest cell.
fn aligned(lines: &[Vec<String>]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            let cells = lines.iter().filter_map(|l| l.get(c));
            cells.map(|cell| cell.chars().count()).max().unwrap_or(0)
        })
        .collect();
    let rendered: Vec<String> = lines
        .iter()
        .map(|line| {
            let padded: Vec<String> = line
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            padded.join("  ").trim_end().to_string()
        })
        .collect();
    rendered.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscale_gateway::config::LimitsConfig;
    use tokenscale_gateway::usage::{Counts, UsageRow};

    #[test]
    fn each_window_shows_use_beside_its_limit_and_names_the_binding_limit() {
        let limits = LimitsConfig {
            requests_per_minute: Some(60),
            input_tokens_per_minute: Some(1_000),
            output_tokens_per_minute: None,
        };
        let minute = Counts {
            requests: 3,
            input_tokens: 900,
            cached_input_tokens: 40,
            output_tokens: 12,
            rate_limited: [0, 2, 0],
        };
        let row = UsageRow::new("team-a", "m", &minute, &minute, Some(&limits));
        let list = UsageList {
            object: "list".into(),
            data: vec![row],
        };
        let table = render(&list);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("TENANT") && lines[0].ends_with("BINDING"));
        let minute_line: Vec<&str> = lines[1]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            minute_line,
            [
                "team-a",
                "m",
                "1m",
                "3/60 (5.0%)",
                "900/1000 (90.0%)",
                "40",
                "12/-",
                "0/2/0",
                "input_tokens"
            ]
        );
        assert!(lines[2].contains("900/60000 (1.5%)"), "{table}");
        let empty = UsageList {
            object: "list".into(),
            data: vec![],
        };
        assert_eq!(render(&empty), "no usage recorded yet");
    }
}
