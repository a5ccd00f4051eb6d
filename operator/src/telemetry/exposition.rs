//! OpenMetrics text (what `prometheus-client` writes) to the classic Prometheus text format
//! 0.0.4, the format the engine and gateway serve and `promtool check metrics` reads.

/// Rewrites `openmetrics`: a counter family `x` becomes `x_total` in its `# HELP`/`# TYPE`
/// lines (its samples already carry `_total`), and `# UNIT` and `# EOF` lines are dropped.
pub fn to_classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_metadata_gets_total_and_eof_goes() {
        let open = "# HELP a Things.\n# TYPE a counter\na_total 3\n# HELP g Level.\n\
                    # TYPE g gauge\n# UNIT g seconds\ng{x=\"1\"} 2\n# EOF\n";
        assert_eq!(
            to_classic_text(open),
            "# HELP a_total Things.\n# TYPE a_total counter\na_total 3\n# HELP g Level.\n\
             # TYPE g gauge\ng{x=\"1\"} 2\n"
        );
    }
}
