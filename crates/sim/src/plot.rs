//! SVG line charts for the simulators' figures (plotters' SVG backend: no C
//! font libraries needed).

use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line: its legend and its points.
pub type Series = (String, Vec<(f64, f64)>);

/// Axis scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Logarithmic (values must be positive; others are dropped).
    Log,
    /// Linear, counting things (clients, ranks): ticks only at whole numbers.
    Integer,
    /// Linear, a share in percent: the axis starts at 0 and reaches 100 at
    /// least, so a few points close together are not magnified into a
    /// difference that is not there.
    Percent,
}

/// A line chart's labels and scales.
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X-axis label.
    pub x: &'a str,
    /// Y-axis label.
    pub y: &'a str,
    /// X-axis scale.
    pub x_scale: Scale,
    /// Y-axis scale.
    pub y_scale: Scale,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err(e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

/// Draws `series` as lines with markers into an SVG file at `path`.
pub fn lines_svg(path: &Path, chart: &Chart, series: &[Series]) -> anyhow::Result<()> {
    let keep = |v: f64, s: Scale| v.is_finite() && (s != Scale::Log || v > 0.0);
    let series: Vec<Series> = series
        .iter()
        .map(|(n, pts)| {
            let pts = pts
                .iter()
                .copied()
                .filter(|(x, y)| keep(*x, chart.x_scale) && keep(*y, chart.y_scale))
                .collect();
            (n.clone(), pts)
        })
        .collect();
    let all = series.iter().flat_map(|s| s.1.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (1.0, 10.0, 1.0, 10.0);
    }
    let pad = |lo: f64, hi: f64, s: Scale| match s {
        Scale::Log => (lo / 1.2, hi * 1.2),
        Scale::Percent => (0.0, hi.max(100.0) * 1.02),
        _ if hi > lo => (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05),
        _ => (lo - 1.0, hi + 1.0),
    };
    let (x0, x1) = pad(x0, x1, chart.x_scale);
    let (y0, y1) = pad(y0, y1, chart.y_scale);
    match (chart.x_scale, chart.y_scale) {
        (Scale::Log, Scale::Log) => draw(
            path,
            chart,
            &series,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
        ),
        (Scale::Log, _) => draw(path, chart, &series, (x0..x1).log_scale(), y0..y1),
        (_, Scale::Log) => draw(path, chart, &series, x0..x1, (y0..y1).log_scale()),
        _ => draw(path, chart, &series, x0..x1, y0..y1),
    }
}

fn draw<X, Y>(path: &Path, chart: &Chart, series: &[Series], x: X, y: Y) -> anyhow::Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    // On a log or counting axis, a tick and a label at every measured x
    // (plotters' own ticks can miss them: 16 clients on a log axis had
    // none); a linear axis keeps plotters' round ticks.
    let xs = measured_xs(series);
    let own_x = chart.x_scale != Scale::Linear && !xs.is_empty() && xs.len() <= 24;
    let (fx, fy) = (
        |v: &f64| {
            if own_x {
                String::new()
            } else {
                label(*v, chart.x_scale)
            }
        },
        |v: &f64| label(*v, chart.y_scale),
    );
    let mut mesh = c.configure_mesh();
    mesh.x_desc(chart.x)
        .y_desc(chart.y)
        .x_label_formatter(&fx)
        .y_label_formatter(&fy);
    if own_x {
        mesh.x_labels(0).disable_x_mesh();
    }
    mesh.draw().map_err(err)?;
    if own_x {
        let (_, rows) = c.plotting_area().get_pixel_range();
        let any_y = series.iter().find_map(|s| s.1.first()).map_or(1.0, |p| p.1);
        let style =
            TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        for &x in &xs {
            let (px, _) = c.backend_coord(&(x, any_y));
            root.draw(&PathElement::new(
                vec![(px, rows.end), (px, rows.end + 5)],
                BLACK,
            ))
            .map_err(err)?;
            root.draw(&Text::new(short(x), (px, rows.end + 8), style.clone()))
                .map_err(err)?;
        }
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        // A lone point (one client, one run) is all there is: drawn so it shows.
        let r = if pts.len() == 1 { 6 } else { 2 };
        c.draw_series(pts.iter().map(|&p| Circle::new(p, r, color.filled())))
            .map_err(err)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Every x some series has a point at, in order (one per value).
fn measured_xs(series: &[Series]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * b.abs().max(1.0));
    xs
}

/// An axis label: whole numbers only on an [`Scale::Integer`] axis.
fn label(v: f64, s: Scale) -> String {
    if s == Scale::Integer && (v - v.round()).abs() > 1e-9 {
        String::new()
    } else {
        short(v)
    }
}

/// A compact axis label: 1e6 as "1M", 0.25 as "0.25".
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.3}G", v / 1e9)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else if a >= 1e6 {
        format!("{:.3}M", v / 1e6).replace(".000", "")
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// Draws one stacked bar per category: each stack is (legend, one value
/// per category), stacked bottom-up in order.
pub fn stacked_bars_svg(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    categories: &[String],
    stacks: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    let n = categories.len().max(1);
    let top = (0..n)
        .map(|i| {
            stacks
                .iter()
                .map(|s| s.1.get(i).copied().unwrap_or(0.0))
                .sum::<f64>()
        })
        .fold(1.0f64, f64::max)
        * 1.3;
    let root = SVGBackend::new(path, (200 + 120 * n as u32, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(64)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(err)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        // Every bar is named below it (plotters' own labels fall on round
        // numbers, which skipped every other bar).
        .x_label_formatter(&|_| String::new())
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    let mut base = vec![0.0; n];
    for (k, (name, vals)) in stacks.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
            .map(|i| {
                let v = vals.get(i).copied().unwrap_or(0.0);
                let r = Rectangle::new(
                    [(i as f64 + 0.2, base[i]), (i as f64 + 0.8, base[i] + v)],
                    color.mix(0.8).filled(),
                );
                base[i] += v;
                r
            })
            .collect();
        c.draw_series(bars)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    name_bars(&root, &c, categories)?;
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes each category's name centred under its bar (bar `i` spans
/// `i..i+1` on the x axis).
pub fn name_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    names: &[String],
) -> anyhow::Result<()> {
    let style = TextStyle::from(("sans-serif", 14).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ),
    );
    for (i, name) in names.iter().enumerate() {
        let (x, y) = c.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.clone(), (x, y + 6), style.clone()))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bar carries its name (plotters' own labels skipped every other
    /// bar), and an axis counting clients shows whole numbers only.
    #[test]
    fn every_bar_is_named_and_counts_have_whole_ticks() {
        let dir = std::env::temp_dir().join(format!("tessera-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cats: Vec<String> = [
            "create-order",
            "pseudo-random",
            "child-closest",
            "cousin-closest",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let bars = dir.join("bars.svg");
        stacked_bars_svg(
            &bars,
            "title",
            "object-id policy",
            "% of requests",
            &cats,
            &[
                ("mandatory".into(), vec![60.0, 60.0, 60.0, 60.0]),
                ("non-mandatory".into(), vec![5.0, 12.0, 4.0, 4.5]),
            ],
        )
        .expect("drawn");
        let svg = std::fs::read_to_string(&bars).expect("written");
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        for c in &cats {
            assert!(texts.contains(&c.as_str()), "{c} is not named");
        }
        assert!(svg.contains("object-id policy"));
        let lines = dir.join("lines.svg");
        let chart = Chart {
            title: "per client",
            x: "client (busiest first)",
            y: "%",
            x_scale: Scale::Integer,
            y_scale: Scale::Linear,
        };
        lines_svg(&lines, &chart, &[("a".into(), vec![(1.0, 67.4)])]).expect("drawn");
        let svg = std::fs::read_to_string(&lines).expect("written");
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(texts.contains(&"1"), "the client's tick");
        assert!(
            !texts.contains(&"0.2") && !texts.contains(&"1.2"),
            "no fractional ticks"
        );
        // A share: from 0 to 100 at least, whatever the points' spread.
        let pct = dir.join("percent.svg");
        let chart = Chart {
            y_scale: Scale::Percent,
            ..chart
        };
        lines_svg(
            &pct,
            &chart,
            &[
                ("a".into(), vec![(1.0, 67.3)]),
                ("b".into(), vec![(1.0, 71.2)]),
            ],
        )
        .expect("drawn");
        let svg = std::fs::read_to_string(&pct).expect("written");
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(texts.contains(&"0") && texts.contains(&"100"), "0 to 100");
        assert!(svg.contains("r=\"6\""), "a lone point is drawn large");
        // On a log axis every measured x has its tick (16 clients had
        // none among plotters' own).
        let log = dir.join("log.svg");
        let chart = Chart {
            title: "creates per second by clients",
            x: "clients",
            y: "creates/s",
            x_scale: Scale::Log,
            y_scale: Scale::Linear,
        };
        let pts = |k: f64| {
            vec![
                (1.0, k),
                (2.0, 2.0 * k),
                (4.0, 3.0 * k),
                (8.0, 3.5 * k),
                (16.0, 3.7 * k),
            ]
        };
        lines_svg(
            &log,
            &chart,
            &[("atomic".into(), pts(900.0)), ("mds".into(), pts(400.0))],
        )
        .expect("drawn");
        let svg = std::fs::read_to_string(&log).expect("written");
        let texts: Vec<&str> = svg.lines().map(str::trim).collect();
        for x in ["1", "2", "4", "8", "16"] {
            assert!(texts.contains(&x), "no tick label at {x} clients");
        }
        assert!(
            texts.contains(&"atomic") && texts.contains(&"mds"),
            "legend"
        );
        if std::env::var_os("TESSERA_KEEP_PLOTS").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
