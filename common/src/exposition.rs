//! The one Prometheus text (format 0.0.4) writer of the engine, the gateway and the operator:
//! each describes its families as a table of [`Family`] rows and [`render`] writes them all.
//!
//! Our own writer rather than `prometheus-client` or `prometheus`: neither writes the exact
//! text the dashboards and tests read. `prometheus-client` writes OpenMetrics (`# EOF`,
//! counter families named without `_total`, a `.` added to every help), and `prometheus`
//! sorts families by name and writes a bound of `1.0` as `le="1"`, where the engine writes
//! vLLM's `le="1.0"`. Either would have needed a rewriting pass on its output.

mod atomics;
mod histogram;
mod quantile;

use std::fmt::Write as _;

pub use atomics::{Counter, Gauge};
pub use histogram::{Histogram, HistogramSnapshot, LeFormat};
pub use quantile::quantile;

/// A family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Bucketed observations with their sum and count.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// One sample's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A measurement.
    Float(f64),
    /// A histogram's buckets, sum and count.
    Histogram(HistogramSnapshot),
}

impl From<u64> for Value {
    fn from(value: u64) -> Self {
        Self::Int(value)
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Self {
        Self::Float(value)
    }
}

/// One series: its labels in the order written, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series<'a> {
    /// `(name, value)`; values are escaped when written.
    pub labels: Labels<'a>,
    /// The value.
    pub value: Value,
}

impl<'a> Series<'a> {
    /// A series labelled `labels`.
    pub fn new(labels: Labels<'a>, value: impl Into<Value>) -> Self {
        Self {
            labels,
            value: value.into(),
        }
    }

    /// A series without labels.
    pub fn bare(value: impl Into<Value>) -> Self {
        Self::new(Vec::new(), value)
    }
}

/// One family: the `# HELP` and `# TYPE` lines, then its series (none is fine: the header
/// alone tells a reader the family is counted).
#[derive(Debug, Clone, PartialEq)]
pub struct Family<'a> {
    /// The name as exposed (a counter's ends in `_total`).
    pub name: &'a str,
    /// Its type.
    pub kind: Kind,
    /// One line of help.
    pub help: &'a str,
    /// Its series.
    pub series: Vec<Series<'a>>,
}

impl<'a> Family<'a> {
    /// A family of `kind` with `series`.
    pub fn new(name: &'a str, kind: Kind, help: &'a str, series: Vec<Series<'a>>) -> Self {
        Self {
            name,
            kind,
            help,
            series,
        }
    }
}

/// A series' labels: `(name, value)` in the order written.
pub type Labels<'a> = Vec<(&'a str, String)>;

/// A table's row: a family's name and help, and how to read its value off one item.
pub type Row<'a, T, V> = (&'a str, &'a str, fn(&T) -> V);

/// One family of `kind` per row, each with one series per `(labels, item)`, in order.
pub fn table<'a, T, V: Into<Value>>(
    kind: Kind,
    rows: &[Row<'a, T, V>],
    items: &[(Labels<'a>, &T)],
) -> Vec<Family<'a>> {
    let family = |&(name, help, read): &Row<'a, T, V>| {
        let series = items
            .iter()
            .map(|(labels, item)| Series::new(labels.clone(), read(item)))
            .collect();
        Family::new(name, kind, help, series)
    };
    rows.iter().map(family).collect()
}

/// Writes every family in order: the whole exposition.
pub fn render(families: &[Family<'_>]) -> String {
    let mut out = String::with_capacity(families.len() * 256);
    for family in families {
        let (name, help, kind) = (family.name, family.help, family.kind.as_str());
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for series in &family.series {
            let labels = label_text(&series.labels);
            match &series.value {
                Value::Int(v) => sample(&mut out, name, "", &labels, v),
                Value::Float(v) => sample(&mut out, name, "", &labels, &number(*v)),
                Value::Histogram(h) => write_histogram(&mut out, name, &labels, h),
            }
        }
    }
    out
}

/// `name{labels} value`, or `name value` without labels.
fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, value: &dyn std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name}{suffix} {value}");
    } else {
        let _ = writeln!(out, "{name}{suffix}{{{labels}}} {value}");
    }
}

fn write_histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (le, count) in h.le_labels().iter().zip(&h.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let count = h.count();
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    sample(out, name, "_sum", labels, &number(h.sum));
    sample(out, name, "_count", labels, &count);
}

/// `k="v",...` with every value escaped.
fn label_text(labels: &[(&str, String)]) -> String {
    let mut text = String::new();
    for (i, (key, value)) in labels.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(text, "{sep}{key}=\"{}\"", escape_label(value));
    }
    text
}

/// A float as the text format spells it (`+Inf`, `-Inf` and `NaN` included).
fn number(value: f64) -> String {
    match value {
        v if v == f64::INFINITY => "+Inf".into(),
        v if v == f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

/// A label value with `\`, `"` and newlines escaped, as the text format requires.
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
