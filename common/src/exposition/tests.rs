//! The writer's text, the histogram's buckets and the quantile.

use super::*;

const INF: f64 = f64::INFINITY;

#[test]
fn families_are_written_in_order_with_escaped_labels() {
    let families = [
        Family::new(
            "a_total",
            Kind::Counter,
            "Things.",
            vec![Series::new(vec![("m", "x\"y\\z\nw".into())], 3)],
        ),
        Family::new("g", Kind::Gauge, "Level.", vec![Series::bare(0.25)]),
        Family::new("empty", Kind::Gauge, "None yet.", vec![]),
    ];
    assert_eq!(
        render(&families),
        "# HELP a_total Things.\n# TYPE a_total counter\na_total{m=\"x\\\"y\\\\z\\nw\"} 3\n\
         # HELP g Level.\n# TYPE g gauge\ng 0.25\n\
         # HELP empty None yet.\n# TYPE empty gauge\n"
    );
}

#[test]
fn histograms_are_cumulative_with_le_inclusive_in_either_spelling() {
    static BOUNDS: &[f64] = &[0.1, 1.0];
    for (le, one) in [(LeFormat::Decimal, "1.0"), (LeFormat::Shortest, "1")] {
        let h = Histogram::new(BOUNDS, le);
        for v in [0.05, 0.1, 0.5, 3.0] {
            h.observe(v);
        }
        let series = vec![Series::new(
            vec![("m", "a".into())],
            Value::Histogram(h.snapshot()),
        )];
        let text = render(&[Family::new("x", Kind::Histogram, "X.", series)]);
        let expected = format!(
            "# HELP x X.\n# TYPE x histogram\nx_bucket{{m=\"a\",le=\"0.1\"}} 2\n\
             x_bucket{{m=\"a\",le=\"{one}\"}} 3\nx_bucket{{m=\"a\",le=\"+Inf\"}} 4\n\
             x_sum{{m=\"a\"}} 3.65\nx_count{{m=\"a\"}} 4\n"
        );
        assert_eq!(text, expected);
        assert_eq!(h.count(), 4);
    }
}

#[test]
fn a_histogram_without_labels_and_infinite_values() {
    static BOUNDS: &[f64] = &[1.0];
    let h = Histogram::new(BOUNDS, LeFormat::Decimal);
    h.observe(0.5);
    let families = [
        Family::new(
            "h",
            Kind::Histogram,
            "H.",
            vec![Series::bare(Value::Histogram(h.snapshot()))],
        ),
        Family::new(
            "g",
            Kind::Gauge,
            "G.",
            vec![Series::bare(INF), Series::bare(-INF)],
        ),
    ];
    let text = render(&families);
    assert!(
        text.contains("h_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 0.5\nh_count 1\n"),
        "{text}"
    );
    assert!(text.ends_with("g +Inf\ng -Inf\n"), "{text}");
}

#[test]
fn quantile_interpolates_inside_the_bucket_holding_the_rank() {
    // 100 observations: 50 ≤ 0.1 s, 40 in (0.1, 0.5], 10 in (0.5, 1].
    let b = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (INF, 100.0)];
    // rank 95 is half-way through the (0.5, 1] bucket.
    assert!((quantile(0.95, &b).unwrap_or(0.0) - 0.75).abs() < 1e-9);
    // rank 50 is the top of the first bucket.
    assert!((quantile(0.5, &b).unwrap_or(0.0) - 0.1).abs() < 1e-9);
}

#[test]
fn quantile_of_the_inf_bucket_is_the_highest_finite_bound_and_empty_is_none() {
    let b = [(0.1, 1.0), (0.5, 2.0), (INF, 10.0)];
    assert_eq!(quantile(0.95, &b), Some(0.5));
    assert_eq!(quantile(0.95, &[(0.1, 0.0), (INF, 0.0)]), None);
    assert_eq!(quantile(0.95, &[]), None);
    assert_eq!(quantile(1.5, &b), None);
}

#[test]
fn a_snapshot_feeds_the_quantile() {
    static BOUNDS: &[f64] = &[0.1, 0.5, 1.0];
    let h = Histogram::new(BOUNDS, LeFormat::Shortest);
    for _ in 0..50 {
        h.observe(0.05);
    }
    for _ in 0..50 {
        h.observe(0.7);
    }
    let buckets = h.snapshot().buckets();
    assert_eq!(
        buckets,
        [(0.1, 50.0), (0.5, 50.0), (1.0, 100.0), (INF, 100.0)]
    );
    assert!((quantile(0.75, &buckets).unwrap_or(0.0) - 0.75).abs() < 1e-9);
}
