//! `--plot`: output tokens/s against p95 latency (TTFT and TPOT), one point per load level,
//! the operating point circled, as SVG.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::BenchError;
use super::report::Report;

/// Writes the plot of `report` to `path`.
pub fn write(path: &Path, report: &Report) -> Result<(), BenchError> {
    let fail = |e: String| BenchError::Plot {
        path: path.display().to_string(),
        message: e,
    };
    check_svg(path).map_err(fail)?;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    draw(&root, report).map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// Plots are SVG: a raster image needs a font renderer and a font file, and a PNG named plot
/// that came out blank (or a panic inside the plotting library) would be worse than a clear
/// "no". Any browser opens the SVG; `rsvg-convert` turns it into a PNG.
pub fn check_svg(path: &Path) -> Result<(), String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(()),
        _ => Err(
            "plots are written as SVG: give a path ending in .svg (convert it with \
                  rsvg-convert if you need a PNG)"
                .into(),
        ),
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &Report) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let ttft: Vec<(f64, f64)> = report
        .points
        .iter()
        .filter_map(|p| Some((p.output_tokens_per_s, p.ttft_s?.p95 * 1e3)))
        .collect();
    let tpot: Vec<(f64, f64)> = report
        .points
        .iter()
        .filter_map(|p| Some((p.output_tokens_per_s, p.tpot_s?.p95 * 1e3)))
        .collect();
    let max_x = report
        .points
        .iter()
        .map(|p| p.output_tokens_per_s)
        .fold(1.0, f64::max)
        * 1.1;
    let max_y = ttft.iter().chain(&tpot).map(|p| p.1).fold(1.0, f64::max) * 1.1;
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("tokenscale bench: {}", report.model),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("output tokens/s")
        .y_desc("p95 latency (ms)")
        .draw()
        .map_err(err)?;
    for (series, color, label) in [(&ttft, RED, "p95 TTFT"), (&tpot, BLUE, "p95 TPOT")] {
        chart
            .draw_series(
                LineSeries::new(series.iter().copied(), color.stroke_width(2)).point_size(3),
            )
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    if let Some(p) = report.operating_point.and_then(|i| report.points.get(i)) {
        let marks = [p.ttft_s.map(|l| l.p95), p.tpot_s.map(|l| l.p95)];
        let circles = marks
            .into_iter()
            .flatten()
            .map(|y| Circle::new((p.output_tokens_per_s, y * 1e3), 8, BLACK.stroke_width(2)));
        chart
            .draw_series(circles)
            .map_err(err)?
            .label("operating point")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, BLACK));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_svg_paths_are_plots() {
        assert!(check_svg(Path::new("out/report.svg")).is_ok());
        assert!(check_svg(Path::new("REPORT.SVG")).is_ok());
        for bad in ["report.png", "report", "report.svg.txt"] {
            let err = check_svg(Path::new(bad)).unwrap_err();
            assert!(err.contains(".svg"), "{bad}: {err}");
        }
    }
}
