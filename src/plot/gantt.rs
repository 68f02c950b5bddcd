//! Timeline Gantt charts: one lane per rank × stream, coloured by op kind, exposed
//! communication marked on a strip under each rank, a time axis with units, a legend;
//! several runs stacked as panels on one time scale; a predicted timeline drawn as
//! outlines over a measured one.

use super::{Figure, PALETTE, time_unit};
use crate::plan::{OpClass, StreamKind};
use crate::timeline::metrics::rank_metrics;
use crate::timeline::{Lane, Timeline};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::HashMap;

/// One panel: a timeline, and optionally another drawn over it as outlines (a prediction
/// over a measurement).
pub struct Panel<'a> {
    pub title: String,
    pub main: &'a Timeline,
    pub overlay: Option<&'a Timeline>,
}

pub struct Gantt<'a> {
    pub title: String,
    pub panels: Vec<Panel<'a>>,
    /// Ranks shown (all when `None`).
    pub ranks: Option<Vec<u32>>,
}

/// What a bar is, for its colour and the legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Gemm,
    Add,
    Activation,
    Copy,
    Send,
    Recv,
    /// A send posted while no bytes move yet (α, or the peer not ready).
    Wait,
}

impl Kind {
    fn of(c: OpClass) -> Kind {
        match c {
            OpClass::Gemm => Kind::Gemm,
            OpClass::Add => Kind::Add,
            OpClass::Activation => Kind::Activation,
            OpClass::Copy => Kind::Copy,
            OpClass::Send => Kind::Send,
            OpClass::Recv => Kind::Recv,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Gemm => "GEMM",
            Kind::Add => "add",
            Kind::Activation => "activation",
            Kind::Copy => "copy",
            Kind::Send => "send",
            Kind::Recv => "recv",
            Kind::Wait => "wait (send posted, no bytes moving)",
        }
    }
    fn colour(self) -> RGBColor {
        match self {
            Kind::Gemm => PALETTE[0],
            Kind::Add => PALETTE[1],
            Kind::Activation => PALETTE[2],
            Kind::Copy => PALETTE[3],
            Kind::Send => PALETTE[4],
            Kind::Recv => PALETTE[5],
            Kind::Wait => RGBColor(200, 200, 200),
        }
    }
}

const EXPOSED: RGBColor = RGBColor(214, 39, 40);
const LANE_PX: u32 = 24;
const STRIP: f64 = 0.45;
const LABEL_PX: u32 = 190;
const WIDTH: u32 = 1500;

struct LaneRow {
    label: String,
    /// (y bottom, y top) in lane units, top lane highest.
    y0: f64,
    y1: f64,
    stream: Option<u32>,
    /// The exposed-communication strip of this rank.
    exposed_of: Option<u32>,
    comm: bool,
}

impl Gantt<'_> {
    fn shown(&self, t: &Timeline, r: u32) -> bool {
        r < t.ranks && self.ranks.as_ref().is_none_or(|rs| rs.contains(&r))
    }

    fn lanes(&self, t: &Timeline) -> Vec<LaneRow> {
        let mut rows = Vec::new();
        let mut y = 0.0;
        for r in 0..t.ranks {
            if !self.shown(t, r) {
                continue;
            }
            for (i, s) in t.streams.iter().enumerate() {
                if s.rank != r {
                    continue;
                }
                rows.push(LaneRow {
                    label: format!("rank {r} {}", s.name),
                    y0: y,
                    y1: y + 1.0,
                    stream: Some(i as u32),
                    exposed_of: None,
                    comm: s.kind == StreamKind::Comm,
                });
                y += 1.0;
            }
            rows.push(LaneRow {
                label: format!("rank {r} exposed comm"),
                y0: y,
                y1: y + STRIP,
                stream: None,
                exposed_of: Some(r),
                comm: false,
            });
            y += STRIP + 0.25;
        }
        // Top lane highest: flip.
        let h = y;
        for l in &mut rows {
            let (a, b) = (h - l.y1, h - l.y0);
            l.y0 = a;
            l.y1 = b;
        }
        rows
    }

    fn height_units(&self, t: &Timeline) -> f64 {
        self.lanes(t).iter().map(|l| l.y1).fold(0.0, f64::max)
    }

    fn end_us(t: &Timeline) -> f64 {
        t.spans.iter().map(|s| s.end).fold(0.0, f64::max) * 1e6
    }

    fn panel_px(&self, p: &Panel) -> u32 {
        (self.height_units(p.main) * LANE_PX as f64).ceil() as u32 + 90
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut k: Vec<Kind> = Vec::new();
        for p in &self.panels {
            for s in &p.main.spans {
                if matches!(s.lane, Lane::Stream(_)) {
                    k.push(Kind::of(s.class));
                }
            }
            if p.main.spans.iter().any(|s| matches!(s.lane, Lane::Link(_))) {
                k.push(Kind::Wait);
            }
        }
        k.sort();
        k.dedup();
        k
    }
}

impl Figure for Gantt<'_> {
    fn size(&self) -> (u32, u32) {
        let h: u32 = self.panels.iter().map(|p| self.panel_px(p)).sum();
        (WIDTH, h.saturating_add(100))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let title_font = ("sans-serif", 22).into_font().style(FontStyle::Bold);
        let font = ("sans-serif", 14).into_font();
        root.draw(&Text::new(self.title.clone(), (20, 12), title_font.clone()))
            .map_err(e)?;
        // Legend.
        let mut x = 20;
        let overlaid = self.panels.iter().any(|p| p.overlay.is_some());
        let mut entries: Vec<(String, ShapeStyle)> = self
            .kinds()
            .into_iter()
            .map(|k| (k.name().to_string(), k.colour().filled()))
            .collect();
        entries.push(("exposed communication".into(), EXPOSED.filled()));
        if overlaid {
            entries.push(("predicted (outline)".into(), BLACK.stroke_width(2)));
        }
        for (name, style) in entries {
            root.draw(&Rectangle::new([(x, 52), (x + 16, 66)], style))
                .map_err(e)?;
            // A stroked box draws half its stroke outside: keep the text clear of it.
            root.draw(&Text::new(name.clone(), (x + 26, 52), font.clone()))
                .map_err(e)?;
            let (w, _) = root
                .estimate_text_size(&name, &font.clone().into_text_style(root))
                .map_err(e)?;
            x += 26 + w as i32 + 24;
        }
        let max_us = self
            .panels
            .iter()
            .flat_map(|p| std::iter::once(p.main).chain(p.overlay))
            .map(Self::end_us)
            .fold(0.0, f64::max)
            .max(1e-3);
        let (div, unit) = time_unit(max_us);
        let body = root.margin(90, 10, 10, 20);
        let breaks: Vec<u32> = self
            .panels
            .iter()
            .scan(0u32, |acc, p| {
                *acc += self.panel_px(p);
                Some(*acc)
            })
            .collect();
        let areas = body.split_by_breakpoints::<u32, u32, _, _>([], &breaks[..breaks.len() - 1]);
        for (p, area) in self.panels.iter().zip(areas) {
            let lanes = self.lanes(p.main);
            let h = lanes.iter().map(|l| l.y1).fold(0.0, f64::max).max(1.0);
            let mut chart = ChartBuilder::on(&area)
                .caption(p.title.clone(), ("sans-serif", 17).into_font())
                .margin_right(20)
                .x_label_area_size(42)
                .y_label_area_size(LABEL_PX)
                .build_cartesian_2d(0.0..max_us / div, 0.0..h)
                .map_err(e)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .x_desc(format!("time ({unit})"))
                .x_label_style(font.clone())
                .axis_desc_style(font.clone())
                .draw()
                .map_err(e)?;
            for l in &lanes {
                let (px, py) = chart.backend_coord(&(0.0, (l.y0 + l.y1) / 2.0));
                let style = if l.exposed_of.is_some() {
                    ("sans-serif", 12).into_font().color(&EXPOSED)
                } else {
                    font.clone().color(&BLACK)
                };
                root.draw(&Text::new(
                    l.label.clone(),
                    (px - 8, py),
                    style.pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(e)?;
            }
            let by_stream: HashMap<u32, &LaneRow> = lanes
                .iter()
                .filter_map(|l| l.stream.map(|s| (s, l)))
                .collect();
            let main_bars = bars(p.main, &by_stream, div);
            chart
                .draw_series(main_bars.iter().map(|(x0, x1, y0, y1, k)| {
                    Rectangle::new([(*x0, *y0), (*x1, *y1)], k.colour().filled())
                }))
                .map_err(e)?;
            // A white edge between abutting ops where a bar is wide enough to keep its
            // colour visible.
            let px_per_unit = {
                let (a, _) = chart.backend_coord(&(0.0, 0.0));
                let (b, _) = chart.backend_coord(&(max_us / div, 0.0));
                (b - a) as f64 / (max_us / div)
            };
            chart
                .draw_series(
                    main_bars
                        .iter()
                        .filter(|(x0, x1, ..)| (x1 - x0) * px_per_unit >= 6.0)
                        .map(|(x0, x1, y0, y1, _)| {
                            Rectangle::new([(*x0, *y0), (*x1, *y1)], WHITE.stroke_width(1))
                        }),
                )
                .map_err(e)?;
            let metrics = rank_metrics(p.main);
            let strips = lanes.iter().filter_map(|l| l.exposed_of.map(|r| (r, l)));
            for (r, l) in strips {
                let iv = metrics[r as usize].exposed.as_slice();
                chart
                    .draw_series(iv.iter().map(|(a, b)| {
                        Rectangle::new(
                            [(a * 1e6 / div, l.y0 + 0.05), (b * 1e6 / div, l.y1 - 0.05)],
                            EXPOSED.filled(),
                        )
                    }))
                    .map_err(e)?;
            }
            if let Some(o) = p.overlay {
                let by_stream: HashMap<u32, &LaneRow> = lanes
                    .iter()
                    .filter_map(|l| l.stream.map(|s| (s, l)))
                    .filter(|(s, _)| (*s as usize) < o.streams.len())
                    .collect();
                let outline = bars(o, &by_stream, div);
                chart
                    .draw_series(outline.iter().map(|(x0, x1, y0, y1, _)| {
                        Rectangle::new([(*x0, *y0), (*x1, *y1)], BLACK.stroke_width(1))
                    }))
                    .map_err(e)?;
            }
        }
        Ok(())
    }
}

/// Bars of a timeline's stream spans: (x0, x1, y0, y1, kind) in chart units. A comm lane
/// shows sends in its upper half and receives in its lower half; a send's part before its
/// first link moves bytes is a wait.
fn bars(t: &Timeline, lanes: &HashMap<u32, &LaneRow>, div: f64) -> Vec<(f64, f64, f64, f64, Kind)> {
    let mut moving: HashMap<u32, f64> = HashMap::new();
    for s in &t.spans {
        if let Lane::Link(_) = s.lane {
            let e = moving.entry(s.op).or_insert(f64::INFINITY);
            *e = e.min(s.start);
        }
    }
    let mut out = Vec::new();
    for s in &t.spans {
        let Lane::Stream(st) = s.lane else { continue };
        let Some(l) = lanes.get(&st) else { continue };
        let k = Kind::of(s.class);
        let (y0, y1) = match (l.comm, k) {
            (true, Kind::Send) => (l.y0 + 0.5, l.y1 - 0.08),
            (true, Kind::Recv) => (l.y0 + 0.08, l.y0 + 0.5),
            _ => (l.y0 + 0.08, l.y1 - 0.08),
        };
        let (a, b) = (s.start * 1e6 / div, s.end * 1e6 / div);
        match moving.get(&s.op) {
            Some(&m) if k == Kind::Send && m > s.start && m < s.end => {
                let m = m * 1e6 / div;
                out.push((a, m, y0, y1, Kind::Wait));
                out.push((m, b, y0, y1, k));
            }
            _ => out.push((a, b, y0, y1, k)),
        }
    }
    out
}
