//! SVG line charts for docs/benchmarks.md (plotters, SVG backend only: no font files or
//! native libraries needed; the viewer renders the text).

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// One named line: points `(x, y)`, x ascending.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
    /// Draw a marker at every point (for sparse data; CDFs have too many points).
    pub markers: bool,
}

/// Where the legend goes: out of the way of the curves.
#[derive(Clone, Copy)]
pub enum Legend {
    /// Upper left (rising curves that start low).
    UpperLeft,
    /// Upper right (time series that start high).
    UpperRight,
    /// Lower right (CDFs).
    LowerRight,
}

/// A chart with a logarithmic x axis (commit intervals, partition counts and latencies all
/// span decades) and a linear y axis from 0; written to `path` as SVG. Errors are printed,
/// not raised: a missing plot must not fail a benchmark run.
pub fn log_x_chart(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series], legend: Legend) {
    chart(path, &Axes { title, x_desc, y_desc, log_x: true, log_y: false, legend }, series);
}

/// A time series: a linear x axis over the points' range, the y axis logarithmic (`log_y`,
/// for latencies whose stalls are decades above the usual) or linear from 0; as
/// [`log_x_chart`] otherwise.
pub fn time_chart(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series], log_y: bool) {
    chart(path, &Axes { title, x_desc, y_desc, log_x: false, log_y, legend: Legend::UpperRight }, series);
}

/// What a chart looks like, but for its data.
struct Axes<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    log_x: bool,
    log_y: bool,
    legend: Legend,
}

fn chart(path: &Path, axes: &Axes, series: &[Series]) {
    if let Err(e) = draw(path, axes, series) {
        eprintln!("cannot draw {}: {e}", path.display());
    } else {
        println!("plot: {}", path.display());
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn draw(path: &Path, axes: &Axes, series: &[Series]) -> Res {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A log axis drops the points it cannot place (zero or below).
    let usable =
        |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!axes.log_x || x > 0.0) && (!axes.log_y || y > 0.0);
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            markers: s.markers,
            points: s.points.iter().copied().filter(usable).collect(),
        })
        .collect();
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (xmin, xmax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let (ymin, ymax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    if !xmin.is_finite() {
        return Err("no data".into());
    }
    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let ytop = (ymax * 1.1).max(1e-9);
    // A log y axis spans two decades at least, so that a flat series is not magnified.
    let (ylo, yhi) = ((ymin / 1.5).min(ymax / 100.0), ymax * 1.5);
    let xs = if axes.log_x { (xmin / 1.3, xmax * 1.3) } else { (xmin, xmax.max(xmin + 1e-9)) };
    match (axes.log_x, axes.log_y) {
        (true, true) => render(&root, axes, &series, (xs.0..xs.1).log_scale(), (ylo..yhi).log_scale()),
        (true, false) => render(&root, axes, &series, (xs.0..xs.1).log_scale(), 0.0..ytop),
        (false, true) => render(&root, axes, &series, xs.0..xs.1, (ylo..yhi).log_scale()),
        (false, false) => render(&root, axes, &series, xs.0..xs.1, 0.0..ytop),
    }?;
    root.present()?;
    Ok(())
}

/// Draws the axes, the lines and the legend on `root`, whatever the axes' scales.
fn render<X, Y>(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    axes: &Axes,
    series: &[Series],
    x: X,
    y: Y,
) -> Res
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(axes.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(&|x| trim(*x))
        .y_label_formatter(&|y| trim(*y))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        if s.markers {
            chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(match axes.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// `1000` -> `1000`, `0.5` -> `0.5`, `12345.6` -> `12346`: axis labels without noise.
fn trim(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.1}").trim_end_matches(".0").to_string()
    } else {
        format!("{x:.2}")
    }
}
