//! The ratio/speed plot: compressed ratio against compression MB/s per core (log
//! scale), every candidate a point, the Pareto front joined, marked and labelled.
//! Text is drawn with a bundled font (DejaVu Sans Mono, see font/LICENSE-DejaVu.txt),
//! so no system font configuration is needed.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, bail};
use kpress_codec::Codec;
use kpress_measure::TrialResult;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONT: &[u8] = include_bytes!("font/DejaVuSansMono.ttf");
const FONT_FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1100, 700);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Svg,
    Png,
}

fn kind(path: &Path) -> Option<Kind> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "svg" => Some(Kind::Svg),
        "png" => Some(Kind::Png),
        _ => None,
    }
}

/// Refuses a plot file name that is neither `.svg` nor `.png` before anything is measured.
pub(super) fn check_extension(path: &Path) -> anyhow::Result<()> {
    if kind(path).is_none() {
        bail!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        );
    }
    Ok(())
}

pub(super) fn draw(
    path: &Path,
    title: &str,
    results: &[TrialResult],
    front: &[usize],
) -> anyhow::Result<()> {
    static FONT_REGISTERED: Once = Once::new();
    FONT_REGISTERED.call_once(|| {
        // The bundled font is a valid TrueType file; a failure would show as missing text.
        let _ = register_font(FONT_FAMILY, FontStyle::Normal, FONT);
    });
    // `none` (ratio 1) is the baseline, not a choice to plot; a speed below the
    // clock's resolution cannot be placed on a log axis.
    let points: Vec<Point> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.candidate.codec() != Codec::None && r.compress_mb_per_s() > 0.0)
        .map(|(i, r)| Point {
            label: r.candidate.to_string(),
            speed: r.compress_mb_per_s(),
            ratio: r.ratio(),
            front: front.contains(&i),
        })
        .collect();
    if points.is_empty() {
        bail!("no compressed result to plot");
    }
    let error = |e: &dyn std::fmt::Display| anyhow!("{e}");
    match kind(path) {
        Some(Kind::Svg) => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            chart(&root, title, &points).map_err(|e| error(&e))?;
            root.present().map_err(|e| error(&e))
        }
        Some(Kind::Png) => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            chart(&root, title, &points).map_err(|e| error(&e))?;
            root.present().map_err(|e| error(&e))
        }
        None => check_extension(path),
    }
}

#[derive(Debug)]
struct Point {
    label: String,
    speed: f64,
    ratio: f64,
    front: bool,
}

fn chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    points: &[Point],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let min_speed = points.iter().map(|p| p.speed).fold(f64::MAX, f64::min);
    let max_speed = points.iter().map(|p| p.speed).fold(0.0, f64::max);
    let min_ratio = points.iter().map(|p| p.ratio).fold(f64::MAX, f64::min);
    let max_ratio = points.iter().map(|p| p.ratio).fold(0.0, f64::max);
    let pad = ((max_ratio - min_ratio) * 0.08).max(0.005);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT_FAMILY, 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (min_speed / 1.5..max_speed * 1.5).log_scale(),
            (min_ratio - pad).max(0.0)..max_ratio + pad,
        )?;
    chart
        .configure_mesh()
        .x_desc("compression MB/s per core (log scale)")
        .y_desc("compressed / uncompressed batches")
        .label_style((FONT_FAMILY, 14))
        .axis_desc_style((FONT_FAMILY, 15))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()?;
    chart.draw_series(
        points
            .iter()
            .filter(|p| !p.front)
            .map(|p| Circle::new((p.speed, p.ratio), 3, BLUE.mix(0.45).filled())),
    )?;
    let mut front: Vec<&Point> = points.iter().filter(|p| p.front).collect();
    front.sort_by(|a, b| a.speed.total_cmp(&b.speed));
    chart
        .draw_series(LineSeries::new(
            front.iter().map(|p| (p.speed, p.ratio)),
            RED.stroke_width(2),
        ))?
        .label("Pareto front: smallest for its speed")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart.draw_series(
        front
            .iter()
            .map(|p| Circle::new((p.speed, p.ratio), 5, RED.filled())),
    )?;
    let anchors: Vec<(i32, i32)> = front
        .iter()
        .map(|p| chart.backend_coord(&(p.speed, p.ratio)))
        .collect();
    let labels: Vec<&str> = front.iter().map(|p| p.label.as_str()).collect();
    let placed = place_labels(&anchors, &labels);
    chart.draw_series(front.iter().zip(placed).map(|(p, offset)| {
        EmptyElement::at((p.speed, p.ratio))
            + Text::new(p.label.clone(), offset, (FONT_FAMILY, LABEL_PX).into_font())
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT_FAMILY, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

const LABEL_PX: u32 = 13;
/// Advance of one character of the bundled monospace font at [`LABEL_PX`].
const CHAR_PX: i32 = 8;

/// Offsets from each front point for its label: beside it, above or below, left or
/// right, whichever overlaps no label placed before it (else the first choice).
fn place_labels(anchors: &[(i32, i32)], labels: &[&str]) -> Vec<(i32, i32)> {
    let mut boxes: Vec<(i32, i32, i32, i32)> = Vec::new();
    let mut out = Vec::with_capacity(labels.len());
    for (&(x, y), label) in anchors.iter().zip(labels) {
        let width = CHAR_PX * label.chars().count() as i32;
        let height = LABEL_PX as i32 + 2;
        let choices = [
            (7, -height - 2),
            (7, 4),
            (-width - 7, -height - 2),
            (-width - 7, 4),
            (7, -2 * height - 4),
            (7, height + 6),
        ];
        let fits = |&(dx, dy): &(i32, i32)| {
            let b = (x + dx, y + dy, x + dx + width, y + dy + height);
            !boxes
                .iter()
                .any(|o| b.0 < o.2 && o.0 < b.2 && b.1 < o.3 && o.1 < b.3)
        };
        let offset = choices.iter().copied().find(fits).unwrap_or(choices[0]);
        boxes.push((
            x + offset.0,
            y + offset.1,
            x + offset.0 + width,
            y + offset.1 + height,
        ));
        out.push(offset);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_of_close_points_do_not_overlap() {
        let anchors = [(100, 100), (104, 102), (108, 98), (400, 300)];
        let labels = ["zstd:5", "zstd:6", "zstd:7", "lz4:9"];
        let offsets = place_labels(&anchors, &labels);
        let boxes: Vec<(i32, i32, i32, i32)> = anchors
            .iter()
            .zip(&offsets)
            .zip(labels)
            .map(|((a, o), l)| {
                let w = CHAR_PX * l.len() as i32;
                (
                    a.0 + o.0,
                    a.1 + o.1,
                    a.0 + o.0 + w,
                    a.1 + o.1 + LABEL_PX as i32 + 2,
                )
            })
            .collect();
        for i in 0..boxes.len() {
            for j in 0..i {
                let (a, b) = (boxes[i], boxes[j]);
                assert!(
                    !(a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3),
                    "{i} {j}"
                );
            }
        }
    }
}
