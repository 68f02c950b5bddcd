//! Pictures (plotters), SVG or PNG: timeline Gantt charts of one or several runs
//! (predicted and measured overlaid), and charts of a sweep (a metric against a field per
//! strategy, a heatmap of the best strategy over two fields).
//!
//! Everything here is pure: a figure renders to bytes, and `cli` writes them. Text is
//! drawn with an embedded DejaVu Sans (assets/fonts), so rendering needs no system fonts.

mod charts;
mod gantt;

pub use charts::{Heatmap, LineChart, Series, heatmap_from_sweep, lines_from_sweep};
pub use gantt::{Gantt, Panel};

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: the image format is taken from the extension; use .svg or .png")]
    Format { path: String },
    #[error("{0}")]
    Input(String),
    #[error("drawing failed: {0}")]
    Draw(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Svg,
    Png,
}

impl ImageFormat {
    pub fn from_path(p: &Path) -> Result<ImageFormat, PlotError> {
        match p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(ImageFormat::Svg),
            Some("png") => Ok(ImageFormat::Png),
            _ => Err(PlotError::Format {
                path: p.display().to_string(),
            }),
        }
    }
}

/// A figure that can draw itself on any plotters backend.
pub trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

fn register_fonts() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The embedded font is a valid TrueType file; a failure would only leave
            // text undrawn, which the tests would catch.
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

/// Largest picture we draw (pixels per side).
const MAX_SIDE: u32 = 16_384;

/// Render a figure to SVG text or PNG bytes.
/// `svg` with every character XML 1.0 forbids (the C0 controls but tab, newline and
/// carriage return, which a label can carry from a scenario or strategy name in a file)
/// replaced by U+FFFD, so the picture stays well-formed; the backend writes none itself.
fn xml_safe(svg: String) -> String {
    if !svg.chars().any(forbidden_in_xml) {
        return svg;
    }
    svg.chars()
        .map(|c| if forbidden_in_xml(c) { '\u{FFFD}' } else { c })
        .collect()
}

fn forbidden_in_xml(c: char) -> bool {
    (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{FFFE}' | '\u{FFFF}')
}

pub fn render(fig: &impl Figure, format: ImageFormat) -> Result<Vec<u8>, PlotError> {
    register_fonts();
    let (w, h) = fig.size();
    if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
        return Err(PlotError::Input(format!(
            "a {w}x{h} px picture is outside 1..{MAX_SIDE} px per side; select fewer ranks or panels"
        )));
    }
    match format {
        ImageFormat::Svg => {
            let mut s = String::new();
            {
                let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
                root.fill(&WHITE)
                    .map_err(|e| PlotError::Draw(e.to_string()))?;
                fig.draw(&root).map_err(PlotError::Draw)?;
                root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
            }
            Ok(xml_safe(s).into_bytes())
        }
        ImageFormat::Png => {
            let mut buf = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
                root.fill(&WHITE)
                    .map_err(|e| PlotError::Draw(e.to_string()))?;
                fig.draw(&root).map_err(PlotError::Draw)?;
                root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
            }
            let mut out = Vec::new();
            {
                let mut enc = png::Encoder::new(&mut out, w, h);
                enc.set_color(png::ColorType::Rgb);
                enc.set_depth(png::BitDepth::Eight);
                let mut wr = enc
                    .write_header()
                    .map_err(|e| PlotError::Draw(e.to_string()))?;
                wr.write_image_data(&buf)
                    .map_err(|e| PlotError::Draw(e.to_string()))?;
            }
            Ok(out)
        }
    }
}

/// Colours that stay distinguishable (Tableau 10, colour-blind-friendlier order).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
];

/// One fixed colour per strategy family, the same in every chart: `flash` blue,
/// `chunked` orange, `sequential` grey, and so on. Variants of a family (`chunked:4`,
/// `chunked:8`) share its hue, lighter as K grows. `None` for a name that is no
/// strategy (a series of another field).
pub fn strategy_colour(name: &str) -> Option<RGBColor> {
    let (family, k) = match name.split_once(':') {
        Some((f, k)) => (f, k.parse::<u32>().ok()),
        None => (name, None),
    };
    let base = match family {
        "flash" => RGBColor(31, 119, 180),
        "chunked" => RGBColor(255, 127, 14),
        "sequential" => RGBColor(100, 100, 100),
        "direct" => RGBColor(44, 160, 44),
        "permute-loop" => RGBColor(148, 103, 189),
        "permute-loop-bidir" => RGBColor(140, 86, 75),
        "query-split" => RGBColor(227, 119, 194),
        "bulk" => RGBColor(188, 189, 34),
        "flash-a2a" => RGBColor(23, 190, 207),
        _ => return None,
    };
    // K = 2 is the family's colour; each doubling mixes in a sixth more white, at most
    // half.
    let light = k.map_or(0.0, |k| {
        (f64::from(k.max(2)).log2() - 1.0).clamp(0.0, 3.0) / 6.0
    });
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * light).round() as u8;
    Some(RGBColor(mix(base.0), mix(base.1), mix(base.2)))
}

/// The colour of series `i` named `name`: its strategy's, else the palette's.
pub(crate) fn series_colour(name: &str, i: usize) -> RGBColor {
    strategy_colour(name).unwrap_or(PALETTE[i % PALETTE.len()])
}

/// An axis label with the quantity's name and unit, for a metric or a field.
pub fn axis_label(name: &str) -> String {
    let known = match name {
        "makespan_us" => "makespan (µs)",
        "compute_us" => "compute time of the critical rank (µs)",
        "comm_us" => "communication time of the critical rank (µs)",
        "exposed_comm_us" => "exposed communication (µs)",
        "max_exposed_comm_us" => "largest exposed communication of a rank (µs)",
        "overlap_efficiency_ratio" => "overlap efficiency (share of communication hidden)",
        "mfu_ratio" => "MFU (model FLOPs / peak)",
        "speedup_vs_sequential_x" => "speedup over sequential (×)",
        "events" => "simulation events",
        "tokens_per_s" => "throughput (tokens/s)",
        "bubble_ratio" => "pipeline bubble (share of the step)",
        "tp" => "tensor-parallel degree (tp)",
        "dp" => "data-parallel degree (dp)",
        "pp" => "pipeline stages (pp)",
        "ulysses" => "Ulysses degree",
        "seq" => "sequence length (tokens)",
        "batch" => "batch (sequences)",
        "tokens" => "tokens per step",
        "gpus" => "GPUs",
        "ranks" => "ranks",
        "chunks" => "chunk count K of chunked:K",
        "micro_batches" => "micro-batches per step",
        "global_batch" => "global batch (sequences)",
        "memory_gib" => "memory per GPU (GiB)",
        "hidden" => "hidden size",
        "ffn" => "FFN width",
        _ => return name.to_string(),
    };
    known.to_string()
}

/// A time axis unit fitting `max_us`: (divisor from µs, unit name).
pub(crate) fn time_unit(max_us: f64) -> (f64, &'static str) {
    if max_us >= 20_000.0 {
        (1000.0, "ms")
    } else {
        (1.0, "µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(
            ImageFormat::from_path(Path::new("a.SVG")),
            Ok(ImageFormat::Svg)
        );
        assert_eq!(
            ImageFormat::from_path(Path::new("x/a.png")),
            Ok(ImageFormat::Png)
        );
        assert!(ImageFormat::from_path(Path::new("a.jpg")).is_err());
        assert!(ImageFormat::from_path(Path::new("a")).is_err());
    }
}
