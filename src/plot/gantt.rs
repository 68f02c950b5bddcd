//! Timeline Gantt charts: one lane per rank × stream, coloured by op kind, exposed
//! communication marked on a strip under each rank, a time axis with units, a legend;
//! several runs stacked as panels on one time scale; a predicted timeline drawn as
//! outlines over a measured one.

use super::{Figure, PALETTE, time_unit};
use crate::plan::{OpClass, Pass, StreamKind};
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
    /// Draw a rank whose timeline repeats an already drawn rank's once, with a note
    /// ("ranks 1–7 like rank 0"), instead of again.
    pub fold: bool,
    /// The time window drawn, in seconds (the whole run when `None`).
    pub window: Option<(f64, f64)>,
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
const NOTE: f64 = 0.7;
const BAND: f64 = 0.9;
const LABEL_PX: u32 = 190;
const WIDTH: u32 = 1500;
/// Band colours: forward, backward, recomputed forward, each in two shades that
/// neighbouring bands alternate.
const BANDS: [[RGBColor; 2]; 3] = [
    [RGBColor(198, 219, 239), RGBColor(158, 202, 225)],
    [RGBColor(253, 208, 162), RGBColor(253, 174, 107)],
    [RGBColor(217, 217, 217), RGBColor(189, 189, 189)],
];

/// What a row of a panel shows.
#[derive(Debug, Clone, PartialEq)]
enum Row {
    /// A stream's ops (index into the timeline's streams).
    Stream(u32),
    /// A rank's exposed communication.
    Exposed(u32),
    /// Ranks drawn as another (text only).
    Note,
    /// Layer or site bands of a rank.
    Bands(u32),
}

struct LaneRow {
    label: String,
    /// (y bottom, y top) in lane units, top lane highest.
    y0: f64,
    y1: f64,
    row: Row,
    comm: bool,
    /// Further streams drawn on this row: an NCCL communicator's per-channel slot
    /// streams share one lane (a data-parallel ring has channels × slots × 2 of them
    /// on every rank; a lane each would make a rank thousands of pixels tall).
    merged: Vec<u32>,
}

/// The lane an NCCL slot stream (`{name}-ch{c}-{send|recv}{slot}`) is drawn on: its
/// communicator's `name`; `None` for any other stream.
fn channel_group(stream: &str) -> Option<&str> {
    let (head, tail) = stream.rsplit_once('-')?;
    let slot = tail
        .strip_prefix("send")
        .or_else(|| tail.strip_prefix("recv"))?;
    let (name, ch) = head.rsplit_once("-ch")?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    (digits(slot) && digits(ch) && !name.is_empty()).then_some(name)
}

/// `[1, 2, 3, 5]` → `1–3, 5`.
fn rank_ranges(v: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}–{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Each rank's spans as (stream within the rank, kind, start ns, end ns): equal for two
/// ranks that run the same program at the same times.
fn signature(t: &Timeline, r: u32) -> Vec<(u32, OpClass, u64, u64)> {
    let first = t.streams.iter().position(|s| s.rank == r).unwrap_or(0) as u32;
    let mut v: Vec<_> = t
        .spans
        .iter()
        .filter_map(|s| match s.lane {
            Lane::Stream(i) if t.streams[i as usize].rank == r => Some((
                i.saturating_sub(first),
                s.class,
                (s.start * 1e9).round() as u64,
                (s.end * 1e9).round() as u64,
            )),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v
}

/// A span's site: its label without the slice and the op class (`fwd.qkv.gemm[s0]` →
/// `fwd.qkv`).
fn site_of(label: &str) -> &str {
    let l = label.split('[').next().unwrap_or(label);
    l.rsplit_once('.').map_or(l, |(a, _)| a)
}

/// A band: (start s, end s, label, pass colour, shade).
type Band = (f64, f64, String, usize, usize);

fn pass_colour(p: Pass) -> usize {
    match p {
        Pass::Forward => 0,
        Pass::Backward => 1,
        Pass::Recompute => 2,
    }
}

/// Whether the timeline covers more than one layer (a step): bands are then layers.
fn multi_layer(t: &Timeline) -> bool {
    let mut it = t.scopes.iter().filter_map(|(_, s)| s.layer);
    it.next().is_some_and(|a| it.any(|b| b != a))
}

/// Bands of rank `r` on its compute streams: per layer pass in a step (coloured by
/// pass, labelled with the layer) and the runs of one micro-batch's pass (`F3`: the
/// forward of micro-batch 3), else per site (coloured by pass).
fn bands(t: &Timeline, r: u32) -> (String, Vec<Band>, Vec<Band>) {
    let mut spans: Vec<&crate::timeline::Span> = t
        .spans
        .iter()
        .filter(|s| match s.lane {
            Lane::Stream(i) => {
                let st = &t.streams[i as usize];
                st.rank == r && st.kind == crate::plan::StreamKind::Compute
            }
            Lane::Link(_) => false,
        })
        .collect();
    spans.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut out: Vec<Band> = Vec::new();
    let mut runs: Vec<Band> = Vec::new();
    let push = |v: &mut Vec<Band>, s: &crate::timeline::Span, label: String, c: usize| match v
        .last_mut()
    {
        Some(b) if b.2 == label && b.3 == c => b.1 = b.1.max(s.end),
        _ => {
            let shade = v.last().map_or(0, |b| 1 - b.4);
            v.push((s.start, s.end, label, c, shade));
        }
    };
    if multi_layer(t) {
        for s in &spans {
            let Some(sc) = t.scope(s) else { continue };
            let c = pass_colour(sc.pass);
            if let Some(layer) = sc.layer {
                push(&mut out, s, format!("L{layer}"), c);
            }
            let p = match sc.pass {
                Pass::Forward => "F",
                Pass::Backward => "B",
                Pass::Recompute => "R",
            };
            push(&mut runs, s, format!("{p}{}", sc.micro_batch), c);
        }
        return (format!("rank {r} layers"), out, runs);
    }
    for s in &spans {
        let label = t.label(s);
        let site = site_of(&label).to_string();
        let c = t.scope(s).map_or(0, |sc| pass_colour(sc.pass));
        push(&mut out, s, site, c);
    }
    (format!("rank {r} sites"), out, runs)
}

/// Where each pass starts on rank `r`'s compute streams, for a layer's markers: the
/// first backward op (and the first recomputed forward), where the timeline holds one
/// layer's passes.
fn pass_starts(t: &Timeline, r: u32) -> Vec<(f64, &'static str)> {
    let mut first: std::collections::BTreeMap<Pass, f64> = Default::default();
    let mut layers = std::collections::BTreeSet::new();
    for s in &t.spans {
        let Lane::Stream(i) = s.lane else { continue };
        if t.streams[i as usize].rank != r {
            continue;
        }
        if let Some(sc) = t.scope(s) {
            layers.insert(sc.layer);
            let e = first.entry(sc.pass).or_insert(f64::INFINITY);
            *e = e.min(s.start);
        }
    }
    if layers.len() > 2 {
        return Vec::new();
    }
    first
        .into_iter()
        .filter(|(p, _)| *p != Pass::Forward)
        .map(|(p, t)| (t, p.name()))
        .collect()
}

/// A panel's rows, top to bottom, and its height in lane units.
struct Layout {
    rows: Vec<LaneRow>,
    height: f64,
    /// The rank whose bands and pass markers are drawn.
    band_rank: Option<u32>,
}

impl Gantt<'_> {
    fn shown(&self, t: &Timeline, r: u32) -> bool {
        r < t.ranks && self.ranks.as_ref().is_none_or(|rs| rs.contains(&r))
    }

    /// The ranks drawn, each with the ranks folded into it.
    fn groups(&self, t: &Timeline) -> Vec<(u32, Vec<u32>)> {
        let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
        let mut seen: HashMap<Vec<(u32, OpClass, u64, u64)>, usize> = HashMap::new();
        for r in (0..t.ranks).filter(|&r| self.shown(t, r)) {
            if self.fold {
                let sig = signature(t, r);
                if let Some(&g) = seen.get(&sig) {
                    out[g].1.push(r);
                    continue;
                }
                seen.insert(sig, out.len());
            }
            out.push((r, Vec::new()));
        }
        out
    }

    fn layout(&self, t: &Timeline) -> Layout {
        let mut rows = Vec::new();
        let mut y = 0.0;
        let groups = self.groups(t);
        let band_rank = groups.first().map(|g| g.0);
        let every = multi_layer(t);
        for (r, like) in groups {
            // In a step every rank drawn gets its layer bands (stages differ); else the
            // first rank its site bands.
            let want = if every {
                true
            } else {
                Some(r) == band_rank && !t.spans.is_empty()
            };
            if want {
                let label = if every {
                    format!("rank {r} layers")
                } else {
                    format!("rank {r} sites")
                };
                rows.push(LaneRow {
                    label,
                    y0: y,
                    y1: y + BAND,
                    row: Row::Bands(r),
                    comm: false,
                    merged: Vec::new(),
                });
                y += BAND;
            }
            let mut channel_rows: HashMap<&str, usize> = HashMap::new();
            for (i, s) in t.streams.iter().enumerate() {
                if s.rank != r {
                    continue;
                }
                let group = channel_group(&s.name);
                if let Some(&at) = group.and_then(|g| channel_rows.get(g)) {
                    rows[at].merged.push(i as u32);
                    continue;
                }
                if let Some(g) = group {
                    channel_rows.insert(g, rows.len());
                }
                rows.push(LaneRow {
                    label: match group {
                        Some(g) => format!("rank {r} {g} (NCCL channels)"),
                        None => format!("rank {r} {}", s.name),
                    },
                    y0: y,
                    y1: y + 1.0,
                    row: Row::Stream(i as u32),
                    comm: s.kind == StreamKind::Comm,
                    merged: Vec::new(),
                });
                y += 1.0;
            }
            rows.push(LaneRow {
                label: format!("rank {r} exposed comm"),
                y0: y,
                y1: y + STRIP,
                row: Row::Exposed(r),
                comm: false,
                merged: Vec::new(),
            });
            y += STRIP;
            if !like.is_empty() {
                let (n, s) = (like.len(), if like.len() > 1 { "s" } else { "" });
                rows.push(LaneRow {
                    label: format!("+ {n} rank{s} ({}) like rank {r}", rank_ranges(&like)),
                    y0: y,
                    y1: y + NOTE,
                    row: Row::Note,
                    comm: false,
                    merged: Vec::new(),
                });
                y += NOTE;
            }
            y += 0.25;
        }
        // Top lane highest: flip.
        for l in &mut rows {
            let (a, b) = (y - l.y1, y - l.y0);
            l.y0 = a;
            l.y1 = b;
        }
        Layout {
            rows,
            height: y,
            band_rank,
        }
    }

    fn end_us(t: &Timeline) -> f64 {
        t.spans.iter().map(|s| s.end).fold(0.0, f64::max) * 1e6
    }

    fn panel_px(layout: &Layout) -> u32 {
        (layout.height * LANE_PX as f64).ceil() as u32 + 90
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
        let h: u32 = self
            .panels
            .iter()
            .map(|p| Self::panel_px(&self.layout(p.main)))
            .sum();
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
        let scoped = self.panels.iter().any(|p| !p.main.scopes.is_empty());
        if scoped {
            entries.push(("forward".into(), BANDS[0][0].filled()));
            entries.push(("backward".into(), BANDS[1][0].filled()));
        }
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
        let (w0, w1) = match self.window {
            Some((a, b)) => (a * 1e6, b * 1e6),
            None => (0.0, max_us),
        };
        let (div, unit) = time_unit(w1 - w0);
        let (x0, x1) = (w0 / div, w1 / div);
        let body = root.margin(90, 10, 10, 20);
        // Each panel's rows once (folding compares every rank's spans).
        let layouts: Vec<Layout> = self.panels.iter().map(|p| self.layout(p.main)).collect();
        let breaks: Vec<u32> = layouts
            .iter()
            .scan(0u32, |acc, l| {
                *acc += Self::panel_px(l);
                Some(*acc)
            })
            .collect();
        let areas = body.split_by_breakpoints::<u32, u32, _, _>([], &breaks[..breaks.len() - 1]);
        for ((p, area), layout) in self.panels.iter().zip(areas).zip(&layouts) {
            let lanes = &layout.rows;
            let h = layout.height.max(1.0);
            let mut chart = ChartBuilder::on(&area)
                .caption(p.title.clone(), ("sans-serif", 17).into_font())
                .margin_right(20)
                .x_label_area_size(42)
                .y_label_area_size(LABEL_PX)
                .build_cartesian_2d(x0..x1, 0.0..h)
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
            for l in lanes {
                let (px, py) = chart.backend_coord(&(x0, (l.y0 + l.y1) / 2.0));
                let style = match l.row {
                    Row::Exposed(_) => ("sans-serif", 12).into_font().color(&EXPOSED),
                    Row::Note | Row::Bands(_) => ("sans-serif", 12).into_font().color(&BLACK),
                    _ => font.clone().color(&BLACK),
                };
                let (tx, pos) = match l.row {
                    // The note reads left to right from the plot's edge.
                    Row::Note => (px + 4, Pos::new(HPos::Left, VPos::Center)),
                    _ => (px - 8, Pos::new(HPos::Right, VPos::Center)),
                };
                root.draw(&Text::new(l.label.clone(), (tx, py), style.pos(pos)))
                    .map_err(e)?;
            }
            let px_per_unit = {
                let (a, _) = chart.backend_coord(&(x0, 0.0));
                let (b, _) = chart.backend_coord(&(x1, 0.0));
                (b - a) as f64 / (x1 - x0)
            };
            let clip = |a: f64, b: f64| -> Option<(f64, f64)> {
                let (a, b) = (a.max(x0), b.min(x1));
                (b >= a).then_some((a, b))
            };
            // Bands, labelled where wide enough: layers (or sites), and in a step the
            // runs of one micro-batch's pass where a layer's label does not fit.
            let small = ("sans-serif", 11).into_font();
            for l in lanes {
                let Row::Bands(r) = l.row else { continue };
                let (_, bs, runs) = bands(p.main, r);
                let fits = |a: f64, b: f64, label: &str| -> Result<bool, String> {
                    let (tw, _) = root
                        .estimate_text_size(label, &small.clone().into_text_style(root))
                        .map_err(e)?;
                    Ok((b - a) * px_per_unit > tw as f64 + 6.0)
                };
                // Layer labels where any visible layer's fits, else the runs'.
                let mut layer_labels = false;
                for (a, b, label, ..) in &bs {
                    if let Some((a, b)) = clip(a * 1e6 / div, b * 1e6 / div)
                        && fits(a, b, label)?
                    {
                        layer_labels = true;
                        break;
                    }
                }
                let mut texts = Vec::new();
                for (a, b, label, c, shade) in &bs {
                    let Some((a, b)) = clip(a * 1e6 / div, b * 1e6 / div) else {
                        continue;
                    };
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(a, l.y0 + 0.08), (b, l.y1 - 0.08)],
                            BANDS[*c][*shade].filled(),
                        )))
                        .map_err(e)?;
                    if (runs.is_empty() || layer_labels) && fits(a, b, label)? {
                        texts.push(((a + b) / 2.0, label.clone()));
                    }
                }
                if !layer_labels {
                    for (a, b, label, ..) in &runs {
                        if let Some((a, b)) = clip(a * 1e6 / div, b * 1e6 / div)
                            && fits(a, b, label)?
                        {
                            texts.push(((a + b) / 2.0, label.clone()));
                        }
                    }
                }
                for (x, label) in texts {
                    let (cx, cy) = chart.backend_coord(&(x, (l.y0 + l.y1) / 2.0));
                    root.draw(&Text::new(
                        label,
                        (cx, cy),
                        small
                            .clone()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    ))
                    .map_err(e)?;
                }
            }
            // Where a layer's backward (and recomputed forward) starts: a line across
            // the panel.
            if let Some(r) = layout.band_rank {
                for (t, name) in pass_starts(p.main, r) {
                    let tx = t * 1e6 / div;
                    if tx < x0 || tx > x1 {
                        continue;
                    }
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(tx, 0.0), (tx, h)],
                            BLACK.stroke_width(2),
                        )))
                        .map_err(e)?;
                    let (cx, cy) = chart.backend_coord(&(tx, h));
                    root.draw(&Text::new(
                        format!("{name} →"),
                        (cx + 4, cy + 2),
                        ("sans-serif", 12)
                            .into_font()
                            .style(FontStyle::Bold)
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Left, VPos::Top)),
                    ))
                    .map_err(e)?;
                }
            }
            let by_stream: HashMap<u32, &LaneRow> = lanes
                .iter()
                .flat_map(|l| {
                    let own = match l.row {
                        Row::Stream(s) => Some(s),
                        _ => None,
                    };
                    own.into_iter()
                        .chain(l.merged.iter().copied())
                        .map(move |s| (s, l))
                })
                .collect();
            let main_bars = coalesce(bars(p.main, &by_stream, div), 1.0 / px_per_unit, (x0, x1));
            chart
                .draw_series(main_bars.iter().map(|(x0, x1, y0, y1, k)| {
                    Rectangle::new([(*x0, *y0), (*x1, *y1)], k.colour().filled())
                }))
                .map_err(e)?;
            // A white edge between abutting ops where a bar is wide enough to keep its
            // colour visible.
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
            for l in lanes {
                let Row::Exposed(r) = l.row else { continue };
                let iv: Vec<(f64, f64, f64, f64, Kind)> = metrics[r as usize]
                    .exposed
                    .as_slice()
                    .iter()
                    .map(|(a, b)| {
                        (
                            a * 1e6 / div,
                            b * 1e6 / div,
                            l.y0 + 0.05,
                            l.y1 - 0.05,
                            Kind::Send,
                        )
                    })
                    .collect();
                let iv = coalesce(iv, 1.0 / px_per_unit, (x0, x1));
                chart
                    .draw_series(iv.iter().map(|(a, b, y0, y1, _)| {
                        Rectangle::new([(*a, *y0), (*b, *y1)], EXPOSED.filled())
                    }))
                    .map_err(e)?;
            }
            if let Some(o) = p.overlay {
                let by_stream: HashMap<u32, &LaneRow> = by_stream
                    .iter()
                    .filter(|(s, _)| (**s as usize) < o.streams.len())
                    .map(|(s, l)| (*s, *l))
                    .collect();
                let outline = coalesce(bars(o, &by_stream, div), 1.0 / px_per_unit, (x0, x1));
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

type Bar = (f64, f64, f64, f64, Kind);

/// Bars clipped to `(lo, hi)`, and on each row the bars of one kind that lie within
/// `px` (one pixel, in chart units) of each other merged into one: a step's thousands
/// of ops per lane become at most a bar per pixel, which keeps an SVG small.
fn coalesce(mut v: Vec<Bar>, px: f64, (lo, hi): (f64, f64)) -> Vec<Bar> {
    v.retain(|b| b.1 >= lo && b.0 <= hi);
    for b in &mut v {
        b.0 = b.0.max(lo);
        b.1 = b.1.min(hi);
    }
    v.sort_by(|a, b| {
        a.2.total_cmp(&b.2)
            .then(a.3.total_cmp(&b.3))
            .then(a.4.cmp(&b.4))
            .then(a.0.total_cmp(&b.0))
    });
    let mut out: Vec<Bar> = Vec::with_capacity(v.len());
    for b in v {
        match out.last_mut() {
            Some(l)
                if l.2 == b.2
                    && l.3 == b.3
                    && l.4 == b.4
                    && b.0 - l.1 < px
                    && (l.1 - l.0 < px || b.1 - b.0 < px) =>
            {
                l.1 = l.1.max(b.1)
            }
            _ => out.push(b),
        }
    }
    out
}

/// Bars of a timeline's stream spans: (x0, x1, y0, y1, kind) in chart units. A comm lane
/// shows sends in its upper half and receives in its lower half; a send's part before its
/// first link moves bytes is a wait.
fn bars(t: &Timeline, lanes: &HashMap<u32, &LaneRow>, div: f64) -> Vec<Bar> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_slot_streams_share_their_communicators_lane() {
        assert_eq!(channel_group("dp-ch0-send3"), Some("dp"));
        assert_eq!(channel_group("edp-comm-ch15-recv0"), Some("edp-comm"));
        for other in [
            "compute",
            "dp-comm",
            "ep-dispatch",
            "dp-ch-send1",
            "dp-ch2-send",
            "-ch1-send1",
            "dp-ch1-sendx",
        ] {
            assert_eq!(channel_group(other), None, "{other}");
        }
    }

    #[test]
    fn rank_lists_read_as_ranges() {
        assert_eq!(rank_ranges(&[1, 2, 3, 5, 7, 8]), "1–3, 5, 7–8");
        assert_eq!(rank_ranges(&[4]), "4");
    }

    #[test]
    fn sites_drop_the_class_and_slice() {
        assert_eq!(site_of("fwd.qkv.gemm[s0]"), "fwd.qkv");
        assert_eq!(site_of("bwd.fc1.dgrad.send[s1]→3"), "bwd.fc1.dgrad");
        assert_eq!(site_of("fc1.gemm[s2]"), "fc1");
    }

    #[test]
    fn coalescing_merges_sub_pixel_bars_of_a_row_and_kind() {
        let k = Kind::Gemm;
        let v = vec![
            (0.0, 0.1, 0.0, 1.0, k),
            (0.15, 0.2, 0.0, 1.0, k),
            (0.3, 5.0, 0.0, 1.0, k),
            // Another row, another kind: kept apart.
            (0.0, 0.1, 1.0, 2.0, k),
            (0.0, 0.1, 0.0, 1.0, Kind::Add),
            // Two wide bars that abut stay two (their edge is drawn).
            (6.0, 8.0, 0.0, 1.0, k),
            (8.0, 10.0, 0.0, 1.0, k),
        ];
        let out = coalesce(v, 1.0, (0.0, 9.0));
        let row0: Vec<(f64, f64)> = out
            .iter()
            .filter(|b| b.2 == 0.0 && b.4 == k)
            .map(|b| (b.0, b.1))
            .collect();
        assert_eq!(row0, [(0.0, 5.0), (6.0, 8.0), (8.0, 9.0)]);
        assert_eq!(out.len(), 5);
    }
}
