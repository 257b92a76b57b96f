//! `--plot-dir DIR`: one SVG per tenant, `DIR/<scenario>-<tenant>.svg`, with
//! its TTFT p50/p99 and ITL p50/p99 in each phase it ran in (above) and its
//! throughput, output tok/s or a batch job's rows/s (below), drawn with
//! plotters as `crate::plot` draws a sweep.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::figures::TenantFigures;
use super::report::ScenarioReport;
use crate::plot::p;

type Series = (&'static str, RGBColor, fn(&TenantFigures) -> Option<f64>);

const LATENCY: [Series; 4] = [
    ("TTFT p50", RGBColor(31, 119, 180), |t| {
        p(&t.ttft_ms, |d| d.p50)
    }),
    ("TTFT p99", RGBColor(214, 39, 40), |t| {
        p(&t.ttft_ms, |d| d.p99)
    }),
    ("ITL p50", RGBColor(44, 160, 44), |t| {
        p(&t.itl_ms, |d| d.p50)
    }),
    ("ITL p99", RGBColor(148, 103, 189), |t| {
        p(&t.itl_ms, |d| d.p99)
    }),
];

/// Writes every tenant's SVG; the paths written.
pub fn write_all(dir: &Path, r: &ScenarioReport) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot-dir {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for t in &r.tenants {
        let path = dir.join(format!("{}-{}.svg", r.scenario, t.name));
        let rows: Vec<(&str, &TenantFigures)> = r
            .phases
            .iter()
            .filter_map(|ph| {
                ph.tenants
                    .iter()
                    .find(|f| f.tenant == t.name)
                    .map(|f| (ph.name.as_str(), f))
            })
            .collect();
        draw(&path, &r.scenario, &t.name, &rows)
            .map_err(|e| format!("--plot-dir {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(
    path: &Path,
    scenario: &str,
    tenant: &str,
    rows: &[(&str, &TenantFigures)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (960, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!("{scenario}: tenant {tenant}");
    let has_latency = rows
        .iter()
        .any(|(_, f)| LATENCY.iter().any(|(_, _, g)| g(f).is_some()));
    // A batch tenant has no latencies: its throughput gets the whole page.
    if has_latency {
        let (upper, lower) = root.split_vertically(420);
        latency(&upper, &format!("{title}, latency per phase"), rows)?;
        throughput(&lower, "throughput per phase", rows)?;
    } else {
        throughput(&root, &format!("{title}, throughput per phase"), rows)?;
    }
    root.present()?;
    Ok(())
}

/// Phase names under their segments, one segment per phase.
fn label(rows: &[(&str, &TenantFigures)]) -> impl Fn(&SegmentValue<usize>) -> String {
    let names: Vec<String> = rows.iter().map(|(name, _)| (*name).to_owned()).collect();
    move |v| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
            names.get(*i).cloned().unwrap_or_default()
        }
        SegmentValue::Last => String::new(),
    }
}

fn latency(
    area: &Area<'_>,
    caption: &str,
    rows: &[(&str, &TenantFigures)],
) -> Result<(), Box<dyn std::error::Error>> {
    // `0..=last` segments: one per phase.
    let last = rows.len().saturating_sub(1);
    let lat_max = rows
        .iter()
        .flat_map(|(_, f)| LATENCY.iter().filter_map(|(_, _, g)| g(f)))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((0..last).into_segmented(), 0f64..lat_max)?;
    chart
        .configure_mesh()
        .x_labels(rows.len())
        .x_label_formatter(&label(rows))
        .y_desc("ms")
        .draw()?;
    for (name, color, f) in LATENCY {
        let pts: Vec<(SegmentValue<usize>, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, (_, t))| f(t).map(|v| (SegmentValue::CenterOf(i), v)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(
            pts.iter()
                .map(|c| Circle::new(c.clone(), 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn throughput(
    area: &Area<'_>,
    caption: &str,
    rows: &[(&str, &TenantFigures)],
) -> Result<(), Box<dyn std::error::Error>> {
    let last = rows.len().saturating_sub(1);
    let unit = rows.first().map_or("tok/s", |(_, f)| f.throughput_unit());
    let max = rows.iter().map(|(_, f)| f.throughput()).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{caption} ({unit})"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((0..last).into_segmented(), 0f64..max)?;
    chart
        .configure_mesh()
        .x_labels(rows.len())
        .x_label_formatter(&label(rows))
        .y_desc(unit)
        .draw()?;
    let blue = RGBColor(31, 119, 180);
    chart.draw_series(rows.iter().enumerate().map(|(i, (_, f))| {
        let end = if i == last {
            SegmentValue::Last
        } else {
            SegmentValue::Exact(i + 1)
        };
        Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (end, f.throughput())],
            blue.mix(0.6).filled(),
        )
    }))?;
    Ok(())
}
