//! SVG line charts for docs/benchmarks.md (plotters, SVG backend only: no font files or
//! native libraries needed; the viewer renders the text).

use std::path::Path;

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
    /// Lower right (CDFs).
    LowerRight,
}

/// A chart with a logarithmic x axis (commit intervals, partition counts and latencies all
/// span decades) and a linear y axis from 0; written to `path` as SVG. Errors are printed,
/// not raised: a missing plot must not fail a benchmark run.
pub fn log_x_chart(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series], legend: Legend) {
    if let Err(e) = draw(path, title, x_desc, y_desc, series, legend) {
        eprintln!("cannot draw {}: {e}", path.display());
    } else {
        println!("plot: {}", path.display());
    }
}

fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    legend: Legend,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let pts = || series.iter().flat_map(|s| s.points.iter()).filter(|(x, y)| *x > 0.0 && y.is_finite());
    let xmin = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pts().map(|p| p.0).fold(0.0, f64::max);
    let ymax = pts().map(|p| p.1).fold(0.0, f64::max);
    if !xmin.is_finite() || xmax <= 0.0 {
        return Err("no data".into());
    }
    let (xlo, xhi) = (xmin / 1.3, xmax * 1.3);
    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d((xlo..xhi).log_scale(), 0.0..(ymax * 1.1).max(1e-9))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| trim(*x))
        .y_label_formatter(&|y| trim(*y))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = s.points.iter().copied().filter(|(x, y)| *x > 0.0 && y.is_finite()).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        if s.markers {
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(match legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
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
