//! Charts of a sweep: a metric against a swept field, one line per strategy (the best
//! over every other swept field, or those fixed by filters), and a heatmap of the best
//! strategy over two swept fields.

use super::{Figure, axis_label, series_colour};
use crate::sweep::{Row, SweepFile, grid};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeSet;

/// One line: (x, y) points in x order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Lines over ordered x values (drawn equally spaced, labelled by value).
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Strategies without the x field (flash has no chunk count): horizontal lines.
    pub references: Vec<(String, f64)>,
}

/// The best strategy per cell of two swept fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub title: String,
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub xs: Vec<String>,
    pub ys: Vec<String>,
    /// (x index, y index, winner, text).
    pub cells: Vec<(usize, usize, String, String)>,
    /// Winners in legend order.
    pub winners: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Num(f64),
    Text(String),
}

impl Val {
    fn text(&self) -> String {
        match self {
            Val::Num(x) => format!("{x}"),
            Val::Text(s) => s.clone(),
        }
    }
}

/// The figures a chart can show: [`crate::report::FIGURES`] but the critical rank and
/// the op count.
fn is_metric(name: &str) -> bool {
    crate::report::FIGURES.contains(&name) && !matches!(name, "critical_rank" | "ops")
}

/// The [`is_metric`] names, in [`crate::report::FIGURES`]' order.
fn metrics() -> Vec<&'static str> {
    crate::report::FIGURES
        .into_iter()
        .filter(|m| is_metric(m))
        .collect()
}

use crate::report::higher_is_better;

fn family(s: &str) -> &str {
    s.split(':').next().unwrap_or(s)
}

/// A row's value of `name`: an input column, a metric, the strategy (`strategy`,
/// `family`, `chunks`), or any swept field.
fn value(r: &Row, name: &str) -> Option<Val> {
    let key = grid::canonical_key(name);
    let short = grid::short_key(&key);
    if let Some(m) = &r.metrics
        && is_metric(name)
        && let Some(x) = m.get(name)
    {
        return Some(Val::Num(x));
    }
    match name {
        "strategy" => return Some(Val::Text(r.strategy.clone())),
        "family" => return Some(Val::Text(family(&r.strategy).to_string())),
        "chunks" => {
            return r
                .strategy
                .strip_prefix("chunked:")
                .and_then(|k| k.parse::<f64>().ok())
                .map(Val::Num);
        }
        _ => {}
    }
    if let Some(i) = &r.inputs {
        let n = |x: u64| Some(Val::Num(x as f64));
        let t = |s: &String| Some(Val::Text(s.clone()));
        let v = match short {
            "workload" => t(&i.workload),
            "model" => t(&i.model),
            "hardware" => t(&i.hardware),
            "gpus" => n(i.gpus),
            "ranks" => n(i.ranks),
            "tp" => n(i.tp),
            "dp" => n(i.dp),
            "ulysses" => n(i.ulysses),
            "batch" => n(i.batch),
            "seq" => n(i.seq),
            "tokens" => n(i.tokens),
            "dtype" => t(&i.dtype),
            "transport" => t(&i.transport),
            "interference" => Some(Val::Text(i.interference.to_string())),
            "pp" => n(i.pp),
            "micro_batches" => n(i.micro_batches),
            "global_batch" => n(i.global_batch),
            "memory_gib" => i.memory_gib.map(Val::Num),
            "fits" => Some(Val::Text(i.fits.to_string())),
            _ => None,
        };
        if v.is_some() {
            return v;
        }
    }
    r.axes.get(&key).map(|s| match s.parse::<f64>() {
        Ok(x) => Val::Num(x),
        Err(_) => Val::Text(s.clone()),
    })
}

fn known(f: &SweepFile, name: &str) -> Result<(), String> {
    let key = grid::canonical_key(name);
    let fixed: Vec<&str> = ["strategy", "family", "chunks"]
        .into_iter()
        .chain(crate::sweep::output::INPUTS)
        .collect();
    if is_metric(name)
        || fixed.contains(&grid::short_key(&key))
        || f.grid.axes.iter().any(|a| a.field == key)
    {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is neither a metric ({}), a swept field, nor one of {}",
            metrics().join(", "),
            fixed.join(", ")
        ))
    }
}

/// Rows with metrics that pass every `field=value` filter.
fn filtered<'a>(f: &'a SweepFile, filters: &[(String, String)]) -> Result<Vec<&'a Row>, String> {
    for (k, _) in filters {
        known(f, k)?;
    }
    let rows: Vec<&Row> = f
        .rows
        .iter()
        .filter(|r| r.metrics.is_some())
        .filter(|r| {
            filters.iter().all(|(k, v)| match value(r, k) {
                Some(Val::Num(x)) => crate::units::parse_count(v)
                    .map(|n| n as f64 == x)
                    .unwrap_or_else(|_| v.parse::<f64>() == Ok(x)),
                Some(Val::Text(s)) => s == *v,
                None => false,
            })
        })
        .collect();
    if rows.is_empty() {
        return Err("no rows with results match the filters".into());
    }
    Ok(rows)
}

/// The swept fields a chart takes the best over (more than one value, not shown).
fn best_over(f: &SweepFile, shown: &[&str], filters: &[(String, String)]) -> String {
    let hidden: Vec<&str> = f
        .grid
        .axes
        .iter()
        .filter(|a| a.values.len() > 1)
        .map(|a| grid::short_key(&a.field))
        .filter(|k| !shown.contains(k))
        .filter(|k| {
            !filters
                .iter()
                .any(|(f, _)| grid::short_key(&grid::canonical_key(f)) == *k)
        })
        .collect();
    let mut s = format!("{}: {}", f.grid.scenario, f.rows.len());
    s.push_str(" rows");
    if !filters.is_empty() {
        let fs: Vec<String> = filters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("; {}", fs.join(", ")));
    }
    if !hidden.is_empty() {
        s.push_str(&format!("; each point the best over {}", hidden.join(", ")));
    }
    s
}

fn pick(better_high: bool, a: f64, b: f64) -> bool {
    if better_high { a > b } else { a < b }
}

/// `y` against `x`, one line per `series` value (`strategy` or `family` or a field).
pub fn lines_from_sweep(
    f: &SweepFile,
    x: &str,
    y: &str,
    series: &str,
    filters: &[(String, String)],
) -> Result<LineChart, String> {
    // Each chunked:K has one chunk count: per strategy there would be no lines.
    let series = match series {
        "auto" if x == "chunks" => "family",
        "auto" => "strategy",
        s => s,
    };
    known(f, x)?;
    known(f, series)?;
    if !is_metric(y) {
        return Err(format!("`{y}` is not a metric ({})", metrics().join(", ")));
    }
    let rows = filtered(f, filters)?;
    let high = higher_is_better(y);
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut refs: Vec<(String, f64)> = Vec::new();
    for r in rows {
        let name = value(r, series).map(|v| v.text()).unwrap_or_default();
        let Some(Val::Num(yv)) = value(r, y) else {
            continue;
        };
        match value(r, x) {
            Some(Val::Num(xv)) => {
                let pts = match lines.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, p)) => p,
                    None => {
                        lines.push((name.clone(), Vec::new()));
                        &mut lines.last_mut().expect("pushed").1
                    }
                };
                match pts.iter_mut().find(|(px, _)| *px == xv) {
                    Some(p) if pick(high, yv, p.1) => p.1 = yv,
                    Some(_) => {}
                    None => pts.push((xv, yv)),
                }
            }
            Some(Val::Text(t)) => {
                return Err(format!(
                    "x field `{x}` has the non-numeric value `{t}`; use it as --series or a filter"
                ));
            }
            None if x == "chunks" => match refs.iter_mut().find(|(n, _)| *n == name) {
                Some(p) if pick(high, yv, p.1) => p.1 = yv,
                Some(_) => {}
                None => refs.push((name, yv)),
            },
            None => {}
        }
    }
    if lines.is_empty() {
        return Err(format!("no row has a numeric `{x}`"));
    }
    for (_, p) in &mut lines {
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    // Reference lines of strategies the chunk count does not apply to, not of those
    // already drawn as lines.
    refs.retain(|(n, _)| !lines.iter().any(|(l, _)| l == n));
    let label = |k: &str| match k {
        "chunks" => "chunk count".to_string(),
        k => grid::short_key(&grid::canonical_key(k)).to_string(),
    };
    Ok(LineChart {
        title: format!(
            "{}: {} against {}, per {series}",
            f.grid.scenario,
            axis_label(y),
            label(x)
        ),
        subtitle: best_over(
            f,
            &[grid::short_key(&grid::canonical_key(x)), series],
            filters,
        ),
        x_label: axis_label(&label(x).replace("chunk count", "chunks")),
        y_label: axis_label(y),
        series: lines
            .into_iter()
            .map(|(name, points)| Series { name, points })
            .collect(),
        references: refs,
    })
}

/// The best `by` (`strategy` or `family`) by `metric` in each cell of `x` × `y`.
pub fn heatmap_from_sweep(
    f: &SweepFile,
    x: &str,
    y: &str,
    metric: &str,
    by: &str,
    filters: &[(String, String)],
) -> Result<Heatmap, String> {
    known(f, x)?;
    known(f, y)?;
    if !is_metric(metric) {
        return Err(format!(
            "`{metric}` is not a metric ({})",
            metrics().join(", ")
        ));
    }
    if by != "strategy" && by != "family" {
        return Err(format!("`{by}`: the heatmap ranks `strategy` or `family`"));
    }
    let rows = filtered(f, filters)?;
    let high = higher_is_better(metric);
    let order = |field: &str| -> Vec<String> {
        let vals: Vec<Val> = rows.iter().filter_map(|r| value(r, field)).collect();
        if vals.iter().all(|v| matches!(v, Val::Num(_))) {
            let mut n: Vec<f64> = vals
                .iter()
                .map(|v| if let Val::Num(x) = v { *x } else { 0.0 })
                .collect();
            n.sort_by(f64::total_cmp);
            n.dedup();
            n.into_iter().map(|x| format!("{x}")).collect()
        } else {
            let mut seen = Vec::new();
            for v in vals {
                let t = v.text();
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
            seen
        }
    };
    let (xs, ys) = (order(x), order(y));
    if xs.is_empty() || ys.is_empty() {
        return Err(format!("no row has both `{x}` and `{y}`"));
    }
    let name_of = |r: &Row| {
        if by == "family" {
            family(&r.strategy).to_string()
        } else {
            r.strategy.clone()
        }
    };
    // Per cell, the best value of each strategy (or family).
    let mut per_cell: Vec<Vec<(String, f64)>> = vec![Vec::new(); xs.len() * ys.len()];
    for r in &rows {
        let (Some(xv), Some(yv), Some(Val::Num(m))) = (value(r, x), value(r, y), value(r, metric))
        else {
            continue;
        };
        let xi = xs.iter().position(|v| *v == xv.text());
        let yi = ys.iter().position(|v| *v == yv.text());
        if let (Some(xi), Some(yi)) = (xi, yi) {
            let c = &mut per_cell[yi * xs.len() + xi];
            let w = name_of(r);
            match c.iter_mut().find(|(n, _)| *n == w) {
                Some(e) if pick(high, m, e.1) => e.1 = m,
                Some(_) => {}
                None => c.push((w, m)),
            }
        }
    }
    let mut winners: BTreeSet<String> = BTreeSet::new();
    let mut cells = Vec::new();
    for (i, c) in per_cell.iter_mut().enumerate() {
        // Best first (a stable sort keeps the first seen on a tie).
        c.sort_by(|a, b| {
            let o = a.1.total_cmp(&b.1);
            if high { o.reverse() } else { o }
        });
        let Some((w, m)) = c.first().cloned() else {
            continue;
        };
        winners.insert(w.clone());
        let value = match metric.strip_suffix("_us") {
            Some(_) => format!("{m:.1} µs"),
            None => format!("{m:.3}"),
        };
        // The margin: how much better the winner is than the runner-up, in %.
        let margin = match c.get(1) {
            Some((r, v)) => {
                let pct = if high { m / v - 1.0 } else { v / m - 1.0 } * 100.0;
                if pct < 1.0 {
                    format!("+{pct:.2}% vs {r}")
                } else {
                    format!("+{pct:.1}% vs {r}")
                }
            }
            None => "no runner-up".to_string(),
        };
        cells.push((
            i % xs.len(),
            i / xs.len(),
            w,
            format!("{}\n{value}\n{margin}", c[0].0),
        ));
    }
    let short = |k: &str| grid::short_key(&grid::canonical_key(k)).to_string();
    Ok(Heatmap {
        title: format!(
            "{}: best {by} by {} ({} is better), margin over the runner-up",
            f.grid.scenario,
            axis_label(metric),
            if high { "higher" } else { "lower" }
        ),
        subtitle: best_over(f, &[&short(x), &short(y), "strategy"], filters),
        x_label: axis_label(&short(x)),
        y_label: axis_label(&short(y)),
        xs,
        ys,
        cells,
        winners: winners.into_iter().collect(),
    })
}

fn shorten(x: f64) -> String {
    let a = x.abs();
    if a >= 1e6 && (x / 1048576.0).fract() == 0.0 {
        format!("{}M", x / 1048576.0)
    } else if a >= 1024.0 && (x / 1024.0).fract() == 0.0 {
        format!("{}k", x / 1024.0)
    } else {
        format!("{x}")
    }
}

impl Figure for LineChart {
    fn size(&self) -> (u32, u32) {
        (1200, 760)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let font = ("sans-serif", 15).into_font();
        heading(root, &self.title, &self.subtitle)?;
        let mut xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.references.iter().map(|r| r.1));
        let ymax = ys.fold(0.0, f64::max);
        let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
        let n = xs.len();
        let area = root.margin(70, 10, 10, 20);
        let (plot_area, legend_area) = area.split_horizontally(area.dim_in_pixel().0 - 260);
        let mut chart = ChartBuilder::on(&plot_area)
            .x_label_area_size(50)
            .y_label_area_size(90)
            .margin_right(20)
            .build_cartesian_2d(-0.3..(n as f64 - 0.7), 0.0..ymax)
            .map_err(e)?;
        let labels: Vec<String> = xs.iter().map(|x| shorten(*x)).collect();
        chart
            .configure_mesh()
            .x_labels(n.min(40))
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .label_style(font.clone())
            .axis_desc_style(font.clone())
            .draw()
            .map_err(e)?;
        let pos = |x: f64| xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
        for (i, s) in self.series.iter().enumerate() {
            let c = series_colour(&s.name, i);
            let pts: Vec<(f64, f64)> = s.points.iter().map(|(x, y)| (pos(*x), *y)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(3)))
                .map_err(e)?;
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 5, c.filled())))
                .map_err(e)?;
        }
        for (j, (name, y)) in self.references.iter().enumerate() {
            let c = series_colour(name, self.series.len() + j);
            let (x0, x1) = (-0.3, n as f64 - 0.7);
            // Dashes by hand: segments of a twentieth of the axis.
            let step = (x1 - x0) / 40.0;
            let segs = (0..40).step_by(2).map(move |k| {
                let a = x0 + k as f64 * step;
                PathElement::new(vec![(a, *y), (a + step, *y)], c.stroke_width(2))
            });
            chart.draw_series(segs).map_err(e)?;
        }
        // The legend beside the plot, never over the data.
        let names = self
            .series
            .iter()
            .map(|s| (s.name.clone(), s.name.clone(), true))
            .chain(
                self.references
                    .iter()
                    .map(|(n, _)| (format!("{n} (no chunk count)"), n.clone(), false)),
            );
        for (i, (name, key, solid)) in names.enumerate() {
            let c = series_colour(&key, i);
            let y = 30 + 26 * i as i32;
            let line: Vec<(i32, i32)> = if solid {
                vec![(10, y), (40, y)]
            } else {
                vec![(10, y), (20, y)]
            };
            legend_area
                .draw(&PathElement::new(line, c.stroke_width(3)))
                .map_err(e)?;
            if !solid {
                legend_area
                    .draw(&PathElement::new(vec![(28, y), (40, y)], c.stroke_width(3)))
                    .map_err(e)?;
            }
            legend_area
                .draw(&Text::new(
                    name,
                    (48, y),
                    font.clone()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(e)?;
        }
        Ok(())
    }
}

impl Figure for Heatmap {
    fn size(&self) -> (u32, u32) {
        let w = (self.xs.len() as u32 * 170 + 260).max(900);
        let h = self.ys.len() as u32 * 84 + 230;
        (w, h)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let font = ("sans-serif", 15).into_font();
        heading(root, &self.title, &self.subtitle)?;
        let colour = |w: &str| {
            let i = self.winners.iter().position(|x| x == w).unwrap_or(0);
            series_colour(w, i)
        };
        let mut x = 20;
        for w in &self.winners {
            root.draw(&Rectangle::new([(x, 76), (x + 18, 94)], colour(w).filled()))
                .map_err(e)?;
            root.draw(&Text::new(w.clone(), (x + 24, 77), font.clone()))
                .map_err(e)?;
            let (tw, _) = root
                .estimate_text_size(w, &font.clone().into_text_style(root))
                .map_err(e)?;
            x += 24 + tw as i32 + 26;
        }
        let area = root.margin(110, 10, 10, 20);
        let (nx, ny) = (self.xs.len(), self.ys.len());
        let mut chart = ChartBuilder::on(&area)
            .x_label_area_size(50)
            .y_label_area_size(100)
            .build_cartesian_2d(0.0..nx as f64, 0.0..ny as f64)
            .map_err(e)?;
        let xl = |v: &f64| label_at(&self.xs, *v);
        let yl = |v: &f64| label_at(&self.ys, *v);
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(nx * 2 + 1)
            .y_labels(ny * 2 + 1)
            .x_label_formatter(&xl)
            .y_label_formatter(&yl)
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .label_style(font.clone())
            .axis_desc_style(font.clone())
            .draw()
            .map_err(e)?;
        chart
            .draw_series(self.cells.iter().map(|(xi, yi, w, _)| {
                let (x, y) = (*xi as f64, *yi as f64);
                Rectangle::new(
                    [(x + 0.02, y + 0.04), (x + 0.98, y + 0.96)],
                    colour(w).mix(0.85).filled(),
                )
            }))
            .map_err(e)?;
        let cell_font = ("sans-serif", 13).into_font();
        for (xi, yi, w, text) in &self.cells {
            // Dark text on light cells (a lighter chunked:K), white on the rest.
            let c = colour(w);
            let lum = 0.299 * f64::from(c.0) + 0.587 * f64::from(c.1) + 0.114 * f64::from(c.2);
            let ink = if lum > 170.0 { BLACK } else { WHITE };
            for (k, line) in text.lines().enumerate() {
                let (px, py) = chart.backend_coord(&(*xi as f64 + 0.5, *yi as f64 + 0.5));
                root.draw(&Text::new(
                    line.to_string(),
                    (px, py - 16 + 16 * k as i32),
                    cell_font
                        .clone()
                        .color(&ink)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(e)?;
            }
        }
        Ok(())
    }
}

/// A chart's title and subtitle at the top left.
fn heading<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let bold = ("sans-serif", 22).into_font().style(FontStyle::Bold);
    root.draw(&Text::new(title.to_string(), (20, 12), bold))
        .map_err(e)?;
    root.draw(&Text::new(
        subtitle.to_string(),
        (20, 44),
        ("sans-serif", 15).into_font(),
    ))
    .map_err(e)
}

/// The label of the category whose centre is at `v` (`i + 0.5`).
fn label_at(cats: &[String], v: f64) -> String {
    let i = (v - 0.5).round();
    if (v - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < cats.len() {
        let s = &cats[i as usize];
        s.parse::<f64>().map(shorten).unwrap_or_else(|_| s.clone())
    } else {
        String::new()
    }
}

#[cfg(test)]
mod figure_names {
    /// The metrics a chart accepts are the figures every output names, but the critical
    /// rank and the op count, in their order.
    #[test]
    fn chart_metrics_are_figures() {
        assert_eq!(
            super::metrics(),
            [
                "makespan_us",
                "compute_us",
                "comm_us",
                "exposed_comm_us",
                "max_exposed_comm_us",
                "overlap_efficiency_ratio",
                "mfu_ratio",
                "speedup_vs_sequential_x",
                "events",
                "tokens_per_s",
                "bubble_ratio",
            ]
        );
        for m in super::metrics() {
            assert!(crate::report::FIGURES.contains(&m), "{m}");
        }
    }
}
