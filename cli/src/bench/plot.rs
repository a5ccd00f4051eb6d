//! `--plot`: the curve, p95 TTFT and p95 TPOT against output tokens/s (a panel each), one
//! point per load level labelled by it, the SLO as dashed lines, the operating point circled;
//! SVG.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::BenchError;
use super::report::{Point, Report};
use super::stats::Percentiles;

/// Writes the plot of `report` to `path`.
pub fn write(path: &Path, report: &Report) -> Result<(), BenchError> {
    let fail = |e: String| BenchError::Plot {
        path: path.display().to_string(),
        message: e,
    };
    check_svg(path).map_err(fail)?;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(&root, report).map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// Width and height of the picture: two panels side by side.
const SIZE: (u32, u32) = (1100, 500);

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

/// One panel: a p95 latency (ms) against output tokens/s, one point per level in the order
/// measured (the curve), its SLO as a dashed line.
struct Panel {
    name: &'static str,
    color: RGBColor,
    /// (tokens/s, p95 ms, level label), in level order.
    points: Vec<(f64, f64, String)>,
    slo_ms: Option<f64>,
    /// The operating point's (tokens/s, p95 ms).
    marked: Option<(f64, f64)>,
}

impl Panel {
    fn of(
        report: &Report,
        name: &'static str,
        color: RGBColor,
        latency: fn(&Point) -> Option<Percentiles>,
        slo: Option<f64>,
    ) -> Self {
        let at = |p: &Point| Some((p.output_tokens_per_s, latency(p)?.p95 * 1e3));
        Self {
            name,
            color,
            points: report
                .points
                .iter()
                .filter_map(|p| at(p).map(|(x, y)| (x, y, p.level())))
                .collect(),
            slo_ms: slo.filter(|s| s.is_finite()).map(|s| s * 1e3),
            marked: report
                .operating_point
                .and_then(|op| report.points.get(op.index))
                .and_then(at),
        }
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &Report) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let title = match &report.operating_point {
        Some(op) => format!(
            "tokenscale bench: {}, operating point {:.1} tokens/s",
            report.model, op.output_tokens_per_s
        ),
        None => format!("tokenscale bench: {}", report.model),
    };
    let root = root.titled(&title, ("sans-serif", 20)).map_err(err)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let slo = report.slo;
    let ttft = Panel::of(report, "TTFT", RED, |p| p.ttft_s, slo.map(|s| s.ttft_p95_s));
    let tpot = Panel::of(
        report,
        "TPOT",
        BLUE,
        |p| p.tpot_s,
        slo.map(|s| s.tpot_p95_s),
    );
    draw_panel(&left, &ttft)?;
    draw_panel(&right, &tpot)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let max_x = panel.points.iter().map(|p| p.0).fold(1.0, f64::max) * 1.15;
    let max_y = panel
        .points
        .iter()
        .map(|p| p.1)
        .chain(panel.slo_ms)
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("p95 {} by concurrency", panel.name),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("output tokens/s")
        .y_desc(format!("p95 {} (ms)", panel.name))
        .draw()
        .map_err(err)?;
    let color = panel.color;
    let curve = panel.points.iter().map(|p| (p.0, p.1));
    chart
        .draw_series(LineSeries::new(curve, color.stroke_width(2)).point_size(3))
        .map_err(err)?
        .label(format!("p95 {}", panel.name))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    let labels = panel.points.iter().map(|(x, y, level)| {
        EmptyElement::at((*x, *y)) + Text::new(level.clone(), (6, -16), ("sans-serif", 12))
    });
    chart.draw_series(labels).map_err(err)?;
    draw_marks(&mut chart, panel, max_x)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)
}

/// The panel's SLO line and its operating point, each with a legend entry.
fn draw_marks<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    panel: &Panel,
    max_x: f64,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let color = panel.color;
    if let Some(slo) = panel.slo_ms {
        let line = [(0.0, slo), (max_x, slo)];
        chart
            .draw_series(DashedLineSeries::new(
                line,
                8,
                6,
                color.mix(0.6).stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("{} SLO {slo:.1} ms", panel.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], color));
    }
    if let Some((x, y)) = panel.marked {
        let mark = EmptyElement::at((x, y))
            + Circle::new((0, 0), 9, BLACK.stroke_width(2))
            + Text::new("operating point", (10, 6), ("sans-serif", 13));
        chart
            .draw_series(std::iter::once(mark))
            .map_err(err)?
            .label("operating point")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, BLACK));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::report::ServerInfo;
    use super::super::report::tests::{SLO, at, report};
    use super::*;

    /// The SVG `report` draws.
    fn svg_of(report: &Report) -> String {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            draw(&root, report).unwrap();
            root.present().unwrap();
        }
        svg
    }

    /// Whether every element of `svg` opens and closes in order (`<a ...>` ... `</a>` or
    /// `<a .../>`), under one `<svg>` root.
    fn well_formed(svg: &str) -> bool {
        let mut open: Vec<&str> = Vec::new();
        let mut roots = 0;
        for tag in svg
            .split('<')
            .skip(1)
            .map(|t| t.split('>').next().unwrap_or(""))
        {
            let name = tag
                .trim_start_matches('/')
                .split([' ', '\n', '/'])
                .next()
                .unwrap_or("");
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            } else if tag.starts_with('/') {
                if open.pop() != Some(name) {
                    return false;
                }
            } else if !tag.ends_with('/') {
                roots += usize::from(open.is_empty());
                open.push(name);
            }
        }
        open.is_empty() && roots == 1 && svg.trim_start().starts_with("<svg")
    }

    /// The contents of every `<text>` element, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn the_plot_draws_the_curve_the_slo_lines_and_the_operating_point() {
        let points = vec![
            at(1, 100.0, 0.1, 0.01),
            at(4, 400.0, 0.4, 0.04),
            at(16, 900.0, 0.7, 0.08),
        ];
        let svg = svg_of(&report(points, Some(SLO), ServerInfo::default()));
        assert!(well_formed(&svg), "{svg}");
        let texts = texts(&svg);
        for text in [
            "TTFT SLO 500.0 ms",
            "TPOT SLO 50.0 ms",
            "c=1",
            "c=4",
            "c=16",
        ] {
            assert_eq!(
                texts.iter().filter(|t| *t == text).count(),
                if text.starts_with('c') { 2 } else { 1 },
                "{text} in {texts:?}"
            );
        }
        assert!(
            texts
                .iter()
                .any(|t| t.contains("operating point 400.0 tokens/s")),
            "{texts:?}"
        );
        // The circle's label in each panel and each panel's legend.
        assert_eq!(
            texts.iter().filter(|t| *t == "operating point").count(),
            4,
            "{texts:?}"
        );
    }

    #[test]
    fn without_an_operating_point_nothing_is_circled() {
        let points = vec![at(1, 100.0, 0.9, 0.01), at(4, 400.0, 0.4, 0.09)];
        let svg = svg_of(&report(points, Some(SLO), ServerInfo::default()));
        assert!(well_formed(&svg), "{svg}");
        let texts = texts(&svg);
        assert!(texts.iter().any(|t| t == "TPOT SLO 50.0 ms"), "{texts:?}");
        assert!(
            !texts.iter().any(|t| t.contains("operating point")),
            "{texts:?}"
        );
    }

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
