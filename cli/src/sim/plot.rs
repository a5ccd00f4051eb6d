//! `--plot`: demand (requests/s) and each policy's replicas over time, as SVG.

use std::path::Path;

use plotters::prelude::*;

use super::SimError;
use super::run::PolicyResult;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

/// Draws demand on the left axis and replicas on the right, hours along the bottom.
pub fn write_svg(path: &Path, title: &str, results: &[PolicyResult]) -> Result<(), SimError> {
    let fail = |e: String| SimError::Plot {
        path: path.display().to_string(),
        message: e,
    };
    let Some(first) = results.first() else {
        return Ok(());
    };
    let hours = first
        .series
        .last()
        .map_or(1.0, |p| p.t_s / 3600.0)
        .max(1e-3);
    let max_rps = first
        .series
        .iter()
        .map(|p| p.demand_rps)
        .fold(1.0, f64::max)
        * 1.1;
    let max_replicas = results
        .iter()
        .flat_map(|r| r.series.iter().map(|p| p.replicas))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;

    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("tokenscale sim: {title}"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .right_y_label_area_size(55)
        .build_cartesian_2d(0.0..hours, 0.0..max_rps)
        .map_err(|e| fail(e.to_string()))?
        .set_secondary_coord(0.0..hours, 0.0..max_replicas);
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("requests/s")
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_secondary_axes()
        .y_desc("replicas")
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    chart
        .draw_series(LineSeries::new(
            first.series.iter().map(|p| (p.t_s / 3600.0, p.demand_rps)),
            BLACK.stroke_width(1),
        ))
        .map_err(|e| fail(e.to_string()))?
        .label("demand (req/s)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, r) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_secondary_series(LineSeries::new(
                r.series
                    .iter()
                    .map(|p| (p.t_s / 3600.0, f64::from(p.replicas))),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(e.to_string()))?
            .label(format!("{} replicas", r.policy))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}
