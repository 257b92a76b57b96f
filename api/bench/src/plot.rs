//! `--plot FILE.svg`: latency percentiles and throughput against load, the
//! SLO and the knee marked, as an SVG a browser or a report can show.

use std::path::Path;

use plotters::prelude::*;

use super::report::Report;
use super::stats::{Dist, Summary};

type Series = (&'static str, RGBColor, fn(&Summary) -> Option<f64>);

/// A percentile of `d` picked by `f`, when `d` was measured and finite.
pub(crate) fn p(d: &Option<Dist>, f: fn(&Dist) -> f64) -> Option<f64> {
    d.as_ref().map(f).filter(|v| v.is_finite())
}

const LATENCY: [Series; 4] = [
    ("TTFT p50", RGBColor(31, 119, 180), |s| {
        p(&s.ttft_ms, |d| d.p50)
    }),
    ("TTFT p99", RGBColor(214, 39, 40), |s| {
        p(&s.ttft_ms, |d| d.p99)
    }),
    ("TPOT p99", RGBColor(44, 160, 44), |s| {
        p(&s.tpot_ms, |d| d.p99)
    }),
    ("E2E p50", RGBColor(148, 103, 189), |s| {
        p(&s.e2e_ms, |d| d.p50)
    }),
];

pub fn write(path: &Path, r: &Report) -> Result<(), String> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !ext.eq_ignore_ascii_case("svg") {
        return Err(format!(
            "--plot {}: only .svg is written (a PNG would need a font and image stack \
             on every machine); convert the SVG if you need one",
            path.display()
        ));
    }
    draw(path, r).map_err(|e| format!("--plot {}: {e}", path.display()))
}

fn draw(path: &Path, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let levels = &r.levels;
    let xmax = levels.iter().map(|s| s.level).fold(0.0, f64::max) * 1.08 + 1e-9;
    let lat_max = levels
        .iter()
        .flat_map(|s| LATENCY.iter().filter_map(|(_, _, f)| f(s)))
        .chain(r.slo.ttft_ms)
        .fold(1.0, f64::max)
        * 1.1;
    let tok_max = levels
        .iter()
        .map(|s| s.output_throughput)
        .fold(1.0, f64::max)
        * 1.1;
    let knee = r.knee.as_ref().map(|k| k.level);

    let root = SVGBackend::new(path, (960, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, lower) = root.split_vertically(400);

    let mut chart = ChartBuilder::on(&upper)
        .caption(
            format!("{} ({}): latency against load", r.model, r.workload.name),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..xmax, 0f64..lat_max)?;
    chart
        .configure_mesh()
        .x_desc(r.level_name.as_str())
        .y_desc("ms")
        .draw()?;
    for (name, color, f) in LATENCY {
        let pts: Vec<(f64, f64)> = levels
            .iter()
            .filter_map(|s| f(s).map(|v| (s.level, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(pts.iter().map(|&c| Circle::new(c, 3, color.filled())))?;
    }
    if let Some(slo) = r.slo.ttft_ms {
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(vec![(0.0, slo), (xmax, slo)], grey))?
            .label("TTFT SLO")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    }
    if let Some(k) = knee {
        chart
            .draw_series(LineSeries::new(
                vec![(k, 0.0), (k, lat_max)],
                BLACK.stroke_width(2),
            ))?
            .label("knee")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let mut chart = ChartBuilder::on(&lower)
        .caption("throughput against load", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..xmax, 0f64..tok_max)?;
    chart
        .configure_mesh()
        .x_desc(r.level_name.as_str())
        .y_desc("output tok/s")
        .draw()?;
    let blue = RGBColor(31, 119, 180);
    let pts: Vec<(f64, f64)> = levels
        .iter()
        .map(|s| (s.level, s.output_throughput))
        .collect();
    chart.draw_series(LineSeries::new(pts.clone(), blue.stroke_width(2)))?;
    chart.draw_series(pts.iter().map(|&c| Circle::new(c, 3, blue.filled())))?;
    if let Some(k) = knee {
        chart.draw_series(LineSeries::new(
            vec![(k, 0.0), (k, tok_max)],
            BLACK.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}
