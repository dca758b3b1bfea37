//! An SVG chart of a benchmark's ratios (Tessera ÷ best baseline, per
//! phase), for people who would rather look than read.

use std::path::Path;

use plotters::prelude::*;

/// Draws one bar per (label, ratio) with a line at 1.0.
pub fn ratios_svg(path: &Path, title: &str, bars: &[(String, f64)]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (200 + 90 * bars.len() as u32, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let top = bars.iter().map(|b| b.1).fold(1.0f64, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(64)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..bars.len() as f64, 0f64..top)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        // Every bar is named below it (plotters' own labels fall on round
        // numbers, which skipped every other bar).
        .x_label_formatter(&|_| String::new())
        .x_desc("phase")
        .y_desc("Tessera / best baseline")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, r))| {
            let color = if *r >= 1.0 {
                GREEN.mix(0.7)
            } else {
                RED.mix(0.7)
            };
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *r)],
                color.filled(),
            )
        }))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    sim::plot::name_bars(&root, &chart, &labels)?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 1.0), (bars.len() as f64, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}
