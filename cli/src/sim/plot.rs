//! `--plot`: demand (requests/s) and each policy's replicas over time, as SVG (see
//! `bench::plot::check_svg` for why not PNG).

use std::path::Path;

use plotters::coord::Shift;
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

/// Writes the plot of `results` to `path`.
pub fn write(path: &Path, title: &str, results: &[PolicyResult]) -> Result<(), SimError> {
    let fail = |e: String| SimError::Plot {
        path: path.display().to_string(),
        message: e,
    };
    if results.is_empty() {
        return Ok(());
    }
    crate::bench::plot::check_svg(path).map_err(fail)?;
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    draw(&root, title, results).map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// Draws demand on the left axis and replicas on the right, hours along the bottom.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    results: &[PolicyResult],
) -> Result<(), String> {
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
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

    root.fill(&WHITE).map_err(fail)?;
    let mut chart = ChartBuilder::on(root)
        .caption(format!("tokenscale sim: {title}"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .right_y_label_area_size(55)
        .build_cartesian_2d(0.0..hours, 0.0..max_rps)
        .map_err(fail)?
        .set_secondary_coord(0.0..hours, 0.0..max_replicas);
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("requests/s")
        .draw()
        .map_err(fail)?;
    chart
        .configure_secondary_axes()
        .y_desc("replicas")
        .draw()
        .map_err(fail)?;
    chart
        .draw_series(LineSeries::new(
            first.series.iter().map(|p| (p.t_s / 3600.0, p.demand_rps)),
            BLACK.stroke_width(1),
        ))
        .map_err(fail)?
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
            .map_err(fail)?
            .label(format!("{} replicas", r.policy))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(fail)?;
    Ok(())
}
