//! The availability chart: operations per second and each operation's latency over time,
//! with the fault windows shaded. An SVG file that a person opens.
//!
//! Plain SVG built with `write!`: no scripts, no external fonts or resources, so the file
//! opens the same anywhere and can be attached to a report as is. Hovering a fault window,
//! its label or an error bar shows a `<title>` tooltip with the exact text and figures.

use std::fmt::Write;

use crate::history::{FaultWindow, History, Op, OpKind, Outcome};

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 700.0;
/// Plot area, shared by both panels so their time axes line up.
const LEFT: f64 = 72.0;
const RIGHT: f64 = 1000.0;
/// Fault labels sit in rows above the panels, so a long label never hides the data.
const LABEL_TOP: f64 = 70.0;
const LABEL_ROW_H: f64 = 11.0;
const LABEL_ROWS: usize = 3;
/// Roughly the width of one character of a 9.5 px label; used to keep labels apart.
const LABEL_CHAR_W: f64 = 5.6;
const LABEL_MAX_CHARS: usize = 40;
/// Throughput panel.
const TOP_Y0: f64 = 106.0;
const TOP_Y1: f64 = 326.0;
/// Latency panel.
const BOT_Y0: f64 = 352.0;
const BOT_Y1: f64 = 620.0;
/// The legend column, right of the plots.
const LEGEND_X: f64 = 1016.0;
/// Above this many operations the latency panel is sampled, so the file stays small enough
/// for a browser.
const MAX_DOTS: usize = 20_000;
/// A run of hours with a bucket per second would give a line with more points than pixels.
const MAX_BUCKETS: u64 = 4_000;

const KINDS: [OpKind; 3] = [OpKind::Send, OpKind::Poll, OpKind::Commit];
/// Send, Poll, Commit (in `kind_index` order).
const KIND_COLOURS: [&str; 3] = ["#1f77b4", "#2ca02c", "#9467bd"];
const UNKNOWN_COLOUR: &str = "#ff7f0e";
const FAILED_COLOUR: &str = "#d62728";
/// Colours for fault kinds: none of them red, orange or a series colour, so a shaded window
/// is never mistaken for an error marker.
const FAULT_PALETTE: [&str; 8] =
    ["#8c8c8c", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#7f9fd0", "#c49c94", "#98df8a"];

/// The whole chart as an SVG document.
pub fn svg(h: &History, title: &str) -> String {
    let mut out = String::with_capacity(64 * 1024 + h.ops.len().min(MAX_DOTS) * 48);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">"#
    );
    out.push('\n');
    let _ = writeln!(out, r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="28" font-size="18" font-weight="bold" fill="#222">{}</text>"##,
        esc(title)
    );
    let _ = writeln!(out, r##"<text x="{LEFT}" y="48" font-size="12" fill="#444">{}</text>"##, esc(&summary(h)));

    if h.ops.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="16" fill="#666" text-anchor="middle">nothing to plot: the history has no timed operations</text>"##,
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
        out.push_str("</svg>\n");
        return out;
    }

    let xs = XScale::new(h);
    let faults = FaultColours::new(&h.faults);
    draw_faults(&mut out, &h.faults, &faults, &xs);
    draw_time_axis(&mut out, &xs);
    draw_throughput(&mut out, h, &xs);
    draw_latency(&mut out, &h.ops, &xs);
    draw_legend(&mut out, &h.ops, &faults);
    out.push_str("</svg>\n");
    out
}

/// Maps milliseconds since the start of the run to an x position.
struct XScale {
    max_ms: u64,
}

impl XScale {
    /// Wide enough for the whole run: the workload's duration, the last op to finish and the
    /// last fault to be healed, whichever is latest (never less than a second).
    fn new(h: &History) -> XScale {
        let ops = h.ops.iter().map(|o| o.start_ms.saturating_add(o.latency_ms));
        let faults = h.faults.iter().map(|f| f.end_ms.max(f.start_ms));
        let max_ms = ops.chain(faults).fold(h.duration_ms, u64::max).max(1_000);
        XScale { max_ms }
    }

    fn x(&self, ms: u64) -> f64 {
        LEFT + (RIGHT - LEFT) * (ms as f64 / self.max_ms as f64)
    }
}

/// One colour per fault kind (the fault text up to its first space: `kill`, `partition`...),
/// in order of first appearance so the same history always gets the same colours.
struct FaultColours<'a> {
    kinds: Vec<(&'a str, &'static str)>,
}

impl<'a> FaultColours<'a> {
    fn new(faults: &'a [FaultWindow]) -> FaultColours<'a> {
        let mut kinds: Vec<(&str, &'static str)> = Vec::new();
        for f in faults {
            let p = fault_prefix(&f.fault);
            if !kinds.iter().any(|(k, _)| *k == p) {
                kinds.push((p, FAULT_PALETTE[kinds.len() % FAULT_PALETTE.len()]));
            }
        }
        FaultColours { kinds }
    }

    fn colour(&self, fault: &str) -> &'static str {
        let p = fault_prefix(fault);
        self.kinds.iter().find(|(k, _)| *k == p).map_or(FAULT_PALETTE[0], |(_, c)| c)
    }
}

fn fault_prefix(fault: &str) -> &str {
    let t = fault.trim();
    t.split_whitespace().next().unwrap_or(t)
}

/// Shaded windows over both panels, each with its label above the panels. Drawn first so
/// the data stays on top of the shading.
fn draw_faults(out: &mut String, faults: &[FaultWindow], colours: &FaultColours, xs: &XScale) {
    let labels = layout_labels(faults, xs);
    for (f, label) in faults.iter().zip(labels) {
        let colour = colours.colour(&f.fault);
        let end = f.end_ms.max(f.start_ms);
        let x0 = xs.x(f.start_ms);
        // A fault that lasted no time at all still gets a visible sliver.
        let w = (xs.x(end) - x0).max(1.0);
        let tip = format!("{} ({} – {})", f.fault, seconds(f.start_ms), seconds(end));
        let _ = writeln!(
            out,
            r#"<rect class="fault" x="{}" y="{TOP_Y0}" width="{}" height="{}" fill="{colour}" fill-opacity="0.18"><title>{}</title></rect>"#,
            num(x0),
            num(w),
            num(BOT_Y1 - TOP_Y0),
            esc(&tip)
        );
        let y = LABEL_TOP + LABEL_ROW_H * label.row as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{TOP_Y0}" stroke="{colour}" stroke-width="1"/>"#,
            num(y + 2.0),
            x = num(x0)
        );
        // Two letters and an ellipsis say nothing: then the tick and the tooltip are all.
        if label.chars >= 4 {
            let _ = writeln!(
                out,
                r##"<text class="fault-label" x="{}" y="{}" font-size="9.5" fill="#333">{}<title>{}</title></text>"##,
                num(x0 + LABEL_PAD),
                num(y),
                esc(&shorten(&f.fault, label.chars)),
                esc(&tip)
            );
        }
    }
}

/// Space between a fault's tick and its label, and between two labels in a row.
const LABEL_PAD: f64 = 2.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label {
    row: usize,
    /// How many characters of the fault text fit.
    chars: usize,
}

/// Where each fault's label goes. Rows are filled first-fit from the left; when every row is
/// taken, the label goes to the row whose last label ends first and cuts that one short, so
/// labels never overlap (the full text stays in the window's tooltip).
fn layout_labels(faults: &[FaultWindow], xs: &XScale) -> Vec<Label> {
    let x_of = |i: usize| xs.x(faults[i].start_ms) + LABEL_PAD;
    let fits = |room: f64| (room / LABEL_CHAR_W).max(0.0) as usize;
    let mut order: Vec<usize> = (0..faults.len()).collect();
    order.sort_by_key(|&i| faults[i].start_ms);
    let mut labels = vec![Label { row: 0, chars: 0 }; faults.len()];
    let mut row_end = [f64::NEG_INFINITY; LABEL_ROWS];
    let mut row_last: [Option<usize>; LABEL_ROWS] = [None; LABEL_ROWS];
    for i in order {
        let x = x_of(i);
        let row = (0..LABEL_ROWS)
            .find(|&r| row_end[r] <= x)
            .or_else(|| (0..LABEL_ROWS).min_by(|&a, &b| row_end[a].total_cmp(&row_end[b])))
            .unwrap_or(0);
        if let Some(prev) = row_last[row].filter(|_| row_end[row] > x) {
            let room = fits(x - x_of(prev) - LABEL_PAD);
            labels[prev].chars = labels[prev].chars.min(room);
        }
        let chars = faults[i].fault.chars().count().min(LABEL_MAX_CHARS).min(fits(WIDTH - LABEL_PAD - x));
        labels[i] = Label { row, chars };
        row_end[row] = x + chars as f64 * LABEL_CHAR_W + LABEL_PAD;
        row_last[row] = Some(i);
    }
    labels
}

/// Vertical grid lines through both panels and the time labels under the bottom one.
fn draw_time_axis(out: &mut String, xs: &XScale) {
    let step_s = x_step_s(xs.max_ms as f64 / 1000.0);
    let mut t = 0u64;
    while t.saturating_mul(1000) <= xs.max_ms {
        let x = num(xs.x(t * 1000));
        for (y0, y1) in [(TOP_Y0, TOP_Y1), (BOT_Y0, BOT_Y1)] {
            let _ = writeln!(out, r##"<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="#e4e4e4"/>"##);
        }
        let _ = writeln!(
            out,
            r##"<text x="{x}" y="{}" font-size="11" fill="#444" text-anchor="middle">{t} s</text>"##,
            BOT_Y1 + 16.0
        );
        t = t.saturating_add(step_s);
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-size="12" fill="#444" text-anchor="middle">time since the start of the run (s)</text>"##,
        num((LEFT + RIGHT) / 2.0),
        BOT_Y1 + 38.0
    );
}

/// A step that gives at most about ten time labels, on round values a person reads easily.
fn x_step_s(max_s: f64) -> u64 {
    const STEPS: [u64; 15] = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600];
    STEPS.iter().copied().find(|&s| max_s / s as f64 <= 10.0).unwrap_or_else(|| nice_step(max_s / 10.0) as u64)
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

/// Per bucket (a second, longer for very long runs): Ok ops per kind, and the unknown and
/// failed ops of every kind, by when they started.
struct Buckets {
    bucket_ms: u64,
    /// Where the last bucket ends: when the workload stopped, or after the last op started.
    end_ms: u64,
    ok: [Vec<u64>; 3],
    unknown: Vec<u64>,
    failed: Vec<u64>,
}

impl Buckets {
    fn new(ops: &[Op], duration_ms: u64) -> Buckets {
        let last_start = ops.iter().map(|o| o.start_ms).max().unwrap_or(0);
        let end_ms = duration_ms.max(last_start.saturating_add(1));
        let bucket_ms = 1000 * end_ms.div_ceil(1000).div_ceil(MAX_BUCKETS).max(1);
        let (full, rest) = (end_ms / bucket_ms, end_ms % bucket_ms);
        // A short tail of its own would turn its few ops into a spike or a drop to zero that
        // never happened: it joins the bucket before.
        let n = if full == 0 || rest * 2 >= bucket_ms { full + 1 } else { full } as usize;
        let mut b = Buckets {
            bucket_ms,
            end_ms,
            ok: [vec![0; n], vec![0; n], vec![0; n]],
            unknown: vec![0; n],
            failed: vec![0; n],
        };
        for op in ops {
            let i = ((op.start_ms / bucket_ms) as usize).min(n - 1);
            match op.outcome {
                Outcome::Ok => b.ok[kind_index(op.kind)][i] += 1,
                Outcome::Unknown => b.unknown[i] += 1,
                Outcome::Failed => b.failed[i] += 1,
            }
        }
        b
    }

    fn len(&self) -> usize {
        self.unknown.len()
    }

    /// The milliseconds bucket `i` covers (the last one may be shorter or longer).
    fn span(&self, i: usize) -> (u64, u64) {
        let start = i as u64 * self.bucket_ms;
        let end = if i + 1 == self.len() { self.end_ms } else { start + self.bucket_ms };
        (start, end.max(start + 1))
    }

    fn per_s(&self, i: usize, count: u64) -> f64 {
        let (start, end) = self.span(i);
        count as f64 * 1000.0 / (end - start) as f64
    }
}

/// Ok ops per second as one line per kind; unknown and failed ops per second as bars along
/// the bottom that are never thinner than a few pixels, so a handful of errors among
/// thousands of successes still shows. The lines go over the bars so the Ok throughput
/// during an outage stays readable.
fn draw_throughput(out: &mut String, h: &History, xs: &XScale) {
    let b = Buckets::new(&h.ops, h.duration_ms);
    let peak = (0..b.len())
        .flat_map(|i| {
            let bad = b.unknown[i] + b.failed[i];
            [b.ok[0][i], b.ok[1][i], b.ok[2][i], bad].map(|c| b.per_s(i, c))
        })
        .fold(1.0, f64::max);
    let step = nice_step(peak / 5.0);
    let top = (peak / step).ceil().max(1.0) * step;
    let y = |v: f64| TOP_Y1 - (TOP_Y1 - TOP_Y0) * (v / top);

    let mut v = 0.0;
    while v <= top + step / 2.0 {
        let yv = num(y(v));
        let _ = writeln!(out, r##"<line x1="{LEFT}" y1="{yv}" x2="{RIGHT}" y2="{yv}" stroke="#e4e4e4"/>"##);
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="11" fill="#444" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            num(y(v) + 4.0),
            compact(v)
        );
        v += step;
    }
    let unit = if b.bucket_ms == 1000 { "ops/s".to_string() } else { format!("ops/s (per {} s)", b.bucket_ms / 1000) };
    axis_title(out, (TOP_Y0 + TOP_Y1) / 2.0, &unit);
    frame(out, TOP_Y0, TOP_Y1);

    for i in 0..b.len() {
        let (u, f) = (b.unknown[i], b.failed[i]);
        if u + f == 0 {
            continue;
        }
        let (start, end) = b.span(i);
        let (x0, x1) = (xs.x(start), xs.x(end));
        let bar_w = ((x1 - x0) * 0.8).max(1.0);
        let x = num((x0 + x1 - bar_w) / 2.0);
        let tip = format!("{}: {u} unknown, {f} failed", seconds(start));
        let mut base = TOP_Y1;
        // Failed at the bottom, unknown stacked on top.
        for (count, colour, class) in [(f, FAILED_COLOUR, "failed"), (u, UNKNOWN_COLOUR, "unknown")] {
            if count == 0 {
                continue;
            }
            let hgt = ((TOP_Y1 - TOP_Y0) * (b.per_s(i, count) / top)).max(4.0);
            let _ = writeln!(
                out,
                r#"<rect class="bar-{class}" x="{x}" y="{}" width="{}" height="{}" fill="{colour}"><title>{}</title></rect>"#,
                num(base - hgt),
                num(bar_w),
                num(hgt),
                esc(&tip)
            );
            base -= hgt;
        }
    }

    for kind in KINDS {
        if !h.ops.iter().any(|o| o.kind == kind) {
            continue;
        }
        let mut points = String::new();
        for (i, &c) in b.ok[kind_index(kind)].iter().enumerate() {
            let (start, end) = b.span(i);
            let _ = write!(points, "{},{} ", num((xs.x(start) + xs.x(end)) / 2.0), num(y(b.per_s(i, c))));
        }
        let _ = writeln!(
            out,
            r#"<polyline class="ok-{}" points="{}" fill="none" stroke="{}" stroke-width="1.5" stroke-linejoin="round"/>"#,
            kind_name(kind),
            points.trim_end(),
            kind_colour(kind)
        );
    }
}

/// One dot per operation (or per sampled operation) on a log scale, Ok dots faint in their
/// kind's colour, unknown and failed ones solid and on top.
fn draw_latency(out: &mut String, ops: &[Op], xs: &XScale) {
    let max_latency = ops.iter().map(|o| o.latency_ms).max().unwrap_or(1);
    // Decades from 1 ms up to the first power of ten at or above the slowest op.
    let mut decades = 1u32;
    while decades < 19 && 10u64.pow(decades) < max_latency {
        decades += 1;
    }
    let y = |ms: u64| {
        let l = (ms.max(1) as f64).log10().min(decades as f64);
        BOT_Y1 - (BOT_Y1 - BOT_Y0) * (l / decades as f64)
    };
    for d in 0..=decades {
        let yv = num(y(10u64.pow(d)));
        let _ = writeln!(out, r##"<line x1="{LEFT}" y1="{yv}" x2="{RIGHT}" y2="{yv}" stroke="#e4e4e4"/>"##);
        let label = if d < 3 { format!("{} ms", 10u64.pow(d)) } else { format!("{} s", 10u64.pow(d - 3)) };
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="11" fill="#444" text-anchor="end">{label}</text>"##,
            LEFT - 6.0,
            num(y(10u64.pow(d)) + 4.0)
        );
    }
    axis_title(out, (BOT_Y0 + BOT_Y1) / 2.0, "latency (log scale)");
    frame(out, BOT_Y0, BOT_Y1);

    let drawn = sample(ops, MAX_DOTS);
    if drawn.len() < ops.len() {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="10" fill="#666" text-anchor="end">{} of {} ops drawn: every unknown and failed one, an even sample of the ok ones</text>"##,
            RIGHT - 4.0,
            BOT_Y0 + 12.0,
            drawn.len(),
            ops.len()
        );
    }
    for (group, (class, colour, opacity, r)) in DOT_GROUPS.iter().enumerate() {
        let mut dots = drawn.iter().filter(|o| dot_group(o) == group).peekable();
        if dots.peek().is_none() {
            continue;
        }
        let _ = writeln!(out, r#"<g class="dots-{class}" fill="{colour}" fill-opacity="{opacity}">"#);
        for o in dots {
            let _ = writeln!(out, r#"<circle cx="{}" cy="{}" r="{r}"/>"#, num(xs.x(o.start_ms)), num(y(o.latency_ms)));
        }
        out.push_str("</g>\n");
    }
}

/// Ok dots faint and small, so thousands of them read as a band; unknown and failed ones
/// solid, larger and drawn last, so each stands out.
const DOT_GROUPS: [(&str, &str, f64, f64); 5] = [
    ("ok-send", KIND_COLOURS[0], 0.35, 1.5),
    ("ok-poll", KIND_COLOURS[1], 0.35, 1.5),
    ("ok-commit", KIND_COLOURS[2], 0.35, 1.5),
    ("unknown", UNKNOWN_COLOUR, 0.9, 2.2),
    ("failed", FAILED_COLOUR, 0.9, 2.2),
];

/// The index in `DOT_GROUPS`: Ok ops by kind, the others by outcome whatever their kind.
fn dot_group(o: &Op) -> usize {
    match o.outcome {
        Outcome::Ok => kind_index(o.kind),
        Outcome::Unknown => 3,
        Outcome::Failed => 4,
    }
}

/// The ops drawn as dots: all of them when there are at most `max`, otherwise every op that
/// is not Ok (those are what the chart is for) and an evenly spaced, deterministic sample of
/// the Ok ones in the room left.
fn sample(ops: &[Op], max: usize) -> Vec<&Op> {
    if ops.len() <= max {
        return ops.iter().collect();
    }
    let ok_total = ops.iter().filter(|o| o.outcome == Outcome::Ok).count();
    let room = max.saturating_sub(ops.len() - ok_total);
    let mut out = Vec::with_capacity(max.max(ops.len() - ok_total));
    // The k-th Ok op is kept when it starts a new 1/room-th of the Ok ops.
    let mut ok_seen = 0usize;
    for op in ops {
        if op.outcome != Outcome::Ok {
            out.push(op);
            continue;
        }
        let keep = room > 0 && (ok_seen * room) / ok_total != ((ok_seen + 1) * room) / ok_total;
        if keep {
            out.push(op);
        }
        ok_seen += 1;
    }
    out
}

/// The series (only the kinds that occur) and the fault kinds.
fn draw_legend(out: &mut String, ops: &[Op], faults: &FaultColours) {
    let mut y = TOP_Y0 + 4.0;
    let _ = writeln!(
        out,
        r##"<text x="{LEGEND_X}" y="{y}" font-size="12" font-weight="bold" fill="#222">operations</text>"##
    );
    y += 18.0;
    for kind in KINDS {
        if !ops.iter().any(|o| o.kind == kind) {
            continue;
        }
        let colour = kind_colour(kind);
        let _ = writeln!(
            out,
            r#"<line x1="{LEGEND_X}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="2"/>"#,
            y - 4.0,
            LEGEND_X + 18.0,
            y - 4.0
        );
        legend_text(out, y, &format!("{} ok", kind_name(kind)));
        y += 16.0;
    }
    for (colour, name) in [(UNKNOWN_COLOUR, "unknown (any kind)"), (FAILED_COLOUR, "failed (any kind)")] {
        let _ = writeln!(out, r#"<rect x="{LEGEND_X}" y="{}" width="18" height="9" fill="{colour}"/>"#, y - 9.0);
        legend_text(out, y, name);
        y += 16.0;
    }
    let _ =
        writeln!(out, r##"<text x="{LEGEND_X}" y="{y}" font-size="10" fill="#666">bars: unknown/failed per s</text>"##);
    y += 13.0;
    let _ = writeln!(
        out,
        r##"<text x="{LEGEND_X}" y="{y}" font-size="10" fill="#666">dots: one per op, by outcome</text>"##
    );
    y += 26.0;
    if faults.kinds.is_empty() {
        return;
    }
    let _ =
        writeln!(out, r##"<text x="{LEGEND_X}" y="{y}" font-size="12" font-weight="bold" fill="#222">faults</text>"##);
    y += 18.0;
    for (n, (name, colour)) in faults.kinds.iter().enumerate() {
        // Past the bottom of the chart the rest are only counted.
        if y > BOT_Y1 {
            let _ = writeln!(
                out,
                r##"<text x="{LEGEND_X}" y="{y}" font-size="11" fill="#444">+{} more</text>"##,
                faults.kinds.len() - n
            );
            break;
        }
        let _ = writeln!(
            out,
            r#"<rect class="legend-fault" x="{LEGEND_X}" y="{}" width="18" height="9" fill="{colour}" fill-opacity="0.5"/>"#,
            y - 9.0
        );
        legend_text(out, y, &shorten(name, 24));
        y += 16.0;
    }
}

fn legend_text(out: &mut String, y: f64, text: &str) {
    let _ = writeln!(out, r##"<text x="{}" y="{y}" font-size="11" fill="#222">{}</text>"##, LEGEND_X + 24.0, esc(text));
}

fn axis_title(out: &mut String, y_mid: f64, text: &str) {
    let _ = writeln!(
        out,
        r##"<text x="18" y="{y}" font-size="12" fill="#444" text-anchor="middle" transform="rotate(-90 18 {y})">{}</text>"##,
        esc(text),
        y = num(y_mid)
    );
}

fn frame(out: &mut String, y0: f64, y1: f64) {
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{y0}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
        RIGHT - LEFT,
        y1 - y0
    );
}

/// `sends: 2900 ok, 3 unknown, 0 failed · polls: … · faults: 2`, for the kinds that occur.
fn summary(h: &History) -> String {
    let mut parts = Vec::new();
    for kind in KINDS {
        let of_kind: Vec<&Op> = h.ops.iter().filter(|o| o.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let count = |outcome: Outcome| of_kind.iter().filter(|o| o.outcome == outcome).count();
        parts.push(format!(
            "{}s: {} ok, {} unknown, {} failed",
            kind_name(kind),
            count(Outcome::Ok),
            count(Outcome::Unknown),
            count(Outcome::Failed)
        ));
    }
    if parts.is_empty() {
        parts.push("no operations".to_string());
    }
    parts.push(format!("faults: {}", h.faults.len()));
    if h.duration_ms > 0 {
        parts.push(format!("ran {}", seconds(h.duration_ms)));
    }
    parts.join(" · ")
}

fn kind_index(kind: OpKind) -> usize {
    match kind {
        OpKind::Send => 0,
        OpKind::Poll => 1,
        OpKind::Commit => 2,
    }
}

fn kind_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Send => "send",
        OpKind::Poll => "poll",
        OpKind::Commit => "commit",
    }
}

fn kind_colour(kind: OpKind) -> &'static str {
    KIND_COLOURS[kind_index(kind)]
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Coordinates to a tenth of a pixel: finer is invisible and only makes the file bigger.
fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or_else(|| s.clone(), str::to_string)
}

/// Tick labels: 1500 reads better as 1.5k once the numbers get large.
fn compact(v: f64) -> String {
    if v >= 10_000.0 {
        num(v / 1000.0) + "k"
    } else {
        num(v)
    }
}

fn shorten(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        s.chars().take(max_chars.saturating_sub(1)).chain(['…']).collect()
    }
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OpKind, start_ms: u64, latency_ms: u64, outcome: Outcome) -> Op {
        Op { kind, process: "p-0".into(), start_ms, latency_ms, outcome }
    }

    fn fault(text: &str, start_ms: u64, end_ms: u64) -> FaultWindow {
        FaultWindow { fault: text.into(), start_ms, end_ms, recovery: None, metadata_write_ms: None }
    }

    /// Ten seconds of work: 100 ok sends, 20 ok polls, 5 ok commits, 3 unknown sends and 2
    /// failed polls; two faults, one with a label that needs escaping.
    fn ten_seconds() -> History {
        let mut ops = Vec::new();
        for i in 0..100 {
            ops.push(op(OpKind::Send, i * 100, 5 + i / 10, Outcome::Ok));
        }
        for i in 0..20 {
            ops.push(op(OpKind::Poll, i * 500, 1, Outcome::Ok));
        }
        for i in 0..5 {
            ops.push(op(OpKind::Commit, i * 2000, 30, Outcome::Ok));
        }
        for i in 0..3 {
            ops.push(op(OpKind::Send, 3000 + i * 10, 5000, Outcome::Unknown));
        }
        ops.push(op(OpKind::Poll, 6000, 200, Outcome::Failed));
        ops.push(op(OpKind::Poll, 6100, 0, Outcome::Failed));
        History {
            ops,
            faults: vec![
                fault("kill -9 leader (broker 1)", 2000, 4000),
                fault("partition <broker 2> & rest", 5000, 7500),
            ],
            duration_ms: 10_000,
            ..Default::default()
        }
    }

    /// The value of `name="…"` in one tag.
    fn attr(tag: &str, name: &str) -> Option<f64> {
        let key = format!(" {name}=\"");
        let from = tag.find(&key)? + key.len();
        tag[from..].split('"').next()?.parse().ok()
    }

    /// Every start tag `<{element} class="{class}"…>`.
    fn tags<'a>(svg: &'a str, element: &str, class: &str) -> Vec<&'a str> {
        let open = format!("<{element} class=\"{class}\"");
        svg.match_indices(&open).filter_map(|(i, _)| svg[i..].split('>').next()).collect()
    }

    fn x_of(ms: f64, max_ms: f64) -> f64 {
        LEFT + (RIGHT - LEFT) * ms / max_ms
    }

    #[test]
    fn ten_second_run_is_a_complete_svg() {
        let h = ten_seconds();
        let s = svg(&h, "run <1> & \"more\"");
        let t = s.trim();
        assert!(t.starts_with("<svg"), "{}", &t[..60]);
        assert!(t.ends_with("</svg>"));
        assert!(t.contains("run &lt;1&gt; &amp; &quot;more&quot;"));
        assert!(!t.contains("<script"));
        assert!(!t.contains("href"));
        // Summary counts by kind and outcome.
        assert!(t.contains("sends: 100 ok, 3 unknown, 0 failed"));
        assert!(t.contains("polls: 20 ok, 0 unknown, 2 failed"));
        assert!(t.contains("commits: 5 ok, 0 unknown, 0 failed"));
        assert!(t.contains("faults: 2"));
        // Every opened element is closed (start tags minus self-closing ones match end tags).
        let opened = t.matches('<').count() - t.matches("</").count();
        let self_closed = t.matches("/>").count();
        assert_eq!(opened - self_closed, t.matches("</").count());
    }

    #[test]
    fn fault_windows_are_shaded_where_they_were_and_labelled() {
        let h = ten_seconds();
        let s = svg(&h, "faults");
        assert!(s.contains("kill -9 leader (broker 1)"));
        assert!(s.contains("partition &lt;broker 2&gt; &amp; rest"));
        assert!(!s.contains("<broker 2>"));

        let rects = tags(&s, "rect", "fault");
        assert_eq!(rects.len(), 2);
        // Every op ends within the 10 s the run lasted.
        let max_ms = 10_000.0;
        for (rect, f) in rects.iter().zip(&h.faults) {
            let x = attr(rect, "x").expect("x");
            let w = attr(rect, "width").expect("width");
            let want_x = x_of(f.start_ms as f64, max_ms);
            let want_w = x_of(f.end_ms as f64, max_ms) - want_x;
            assert!((x - want_x).abs() < 0.1, "x {x} want {want_x}");
            assert!((w - want_w).abs() < 0.15, "width {w} want {want_w}");
            // Spans both panels.
            assert_eq!(attr(rect, "y"), Some(TOP_Y0));
            assert_eq!(attr(rect, "height"), Some(BOT_Y1 - TOP_Y0));
        }
        // Two fault kinds, two colours, both in the legend.
        let fill = |r: &str| r.split("fill=\"").nth(1).and_then(|f| f.split('"').next()).map(str::to_string);
        assert_ne!(fill(rects[0]), fill(rects[1]));
        assert_eq!(tags(&s, "rect", "legend-fault").len(), 2);
        assert!(s.contains(">kill</text>") && s.contains(">partition</text>"));
    }

    #[test]
    fn axis_covers_faults_that_outlast_the_ops() {
        let mut h = ten_seconds();
        h.faults.push(fault("pause broker 3", 9000, 30_000));
        let s = svg(&h, "late");
        let rects = tags(&s, "rect", "fault");
        let last = rects[2];
        let right = attr(last, "x").expect("x") + attr(last, "width").expect("width");
        assert!((right - RIGHT).abs() < 0.2, "{right}");
        assert!(s.contains(">30 s</text>"));
    }

    #[test]
    fn one_dot_per_op_coloured_by_outcome() {
        let h = ten_seconds();
        let s = svg(&h, "dots");
        assert_eq!(s.matches("<circle").count(), h.ops.len());
        let group = |class: &str| {
            let open = format!("<g class=\"dots-{class}\"");
            let from = s.find(&open).unwrap_or_else(|| panic!("no {class} dots"));
            let body = &s[from..];
            let end = body.find("</g>").expect("closed group");
            body[..end].matches("<circle").count()
        };
        assert_eq!(group("ok-send"), 100);
        assert_eq!(group("ok-poll"), 20);
        assert_eq!(group("ok-commit"), 5);
        assert_eq!(group("unknown"), 3);
        assert_eq!(group("failed"), 2);
        assert!(s.contains(&format!("<g class=\"dots-unknown\" fill=\"{UNKNOWN_COLOUR}\"")));
        assert!(s.contains(&format!("<g class=\"dots-failed\" fill=\"{FAILED_COLOUR}\"")));
        // Log axis up to 10 s, since the slowest op took 5 s.
        for tick in [">1 ms<", ">10 ms<", ">100 ms<", ">1 s<", ">10 s<"] {
            assert!(s.contains(tick), "{tick}");
        }
        assert!(!s.contains(">100 s<"));
    }

    #[test]
    fn throughput_lines_and_error_bars() {
        let h = ten_seconds();
        let s = svg(&h, "throughput");
        for kind in ["send", "poll", "commit"] {
            let line = tags(&s, "polyline", &format!("ok-{kind}"));
            assert_eq!(line.len(), 1, "{kind}");
            // One point per second of the 10 s axis.
            let points = line[0].split("points=\"").nth(1).and_then(|p| p.split('"').next()).unwrap_or("");
            assert_eq!(points.split_whitespace().count(), 10, "{kind}");
        }
        // Unknowns in second 3, failures in second 6, each with a bar.
        assert_eq!(tags(&s, "rect", "bar-unknown").len(), 1);
        assert_eq!(tags(&s, "rect", "bar-failed").len(), 1);
        assert!(s.contains("3.0 s: 3 unknown, 0 failed"));
        assert!(s.contains("6.0 s: 0 unknown, 2 failed"));
        for bar in tags(&s, "rect", "bar-unknown").iter().chain(&tags(&s, "rect", "bar-failed")) {
            assert!(attr(bar, "height").expect("height") >= 4.0);
        }
    }

    #[test]
    fn only_kinds_that_occur_are_drawn() {
        let h = History {
            ops: (0..50).map(|i| op(OpKind::Send, i * 100, 3, Outcome::Ok)).collect(),
            duration_ms: 5_000,
            ..Default::default()
        };
        let s = svg(&h, "sends only");
        assert_eq!(tags(&s, "polyline", "ok-send").len(), 1);
        assert!(tags(&s, "polyline", "ok-poll").is_empty());
        assert!(tags(&s, "polyline", "ok-commit").is_empty());
        assert!(!s.contains("polls:"));
        assert!(!s.contains("commit ok"));
        assert!(tags(&s, "rect", "fault").is_empty());
    }

    #[test]
    fn sampling_keeps_every_op_that_is_not_ok() {
        let ops: Vec<Op> = (0..50_000u64)
            .map(|i| {
                let outcome = match i % 97 {
                    0 => Outcome::Unknown,
                    1 => Outcome::Failed,
                    _ => Outcome::Ok,
                };
                op(KINDS[(i % 3) as usize], i * 2, 1 + i % 300, outcome)
            })
            .collect();
        let not_ok = ops.iter().filter(|o| o.outcome != Outcome::Ok).count();
        let kept = sample(&ops, MAX_DOTS);
        assert_eq!(kept.len(), MAX_DOTS);
        assert_eq!(kept.iter().filter(|o| o.outcome != Outcome::Ok).count(), not_ok);
        // The Ok ones are spread over the whole run, at most three Ok ops apart (plus
        // the non-Ok ones between).
        let ok: Vec<u64> = kept.iter().filter(|o| o.outcome == Outcome::Ok).map(|o| o.start_ms).collect();
        assert!(ok[0] < 10 && *ok.last().unwrap_or(&0) > 99_000, "{} {:?}", ok[0], ok.last());
        assert!(ok.windows(2).all(|w| w[1] - w[0] <= 2 * 5), "uneven sample");
        // Deterministic.
        let again: Vec<u64> = sample(&ops, MAX_DOTS).iter().map(|o| o.start_ms).collect();
        assert_eq!(again, kept.iter().map(|o| o.start_ms).collect::<Vec<_>>());

        let h = History { ops, duration_ms: 100_000, ..Default::default() };
        let s = svg(&h, "big");
        assert_eq!(s.matches("<circle").count(), MAX_DOTS);
        assert!(s.contains(&format!("{MAX_DOTS} of 50000 ops drawn")));
    }

    #[test]
    fn more_failures_than_room_keeps_them_all() {
        let ops: Vec<Op> =
            (0..30u64).map(|i| op(OpKind::Send, i, 1, if i < 20 { Outcome::Failed } else { Outcome::Ok })).collect();
        let kept = sample(&ops, 10);
        assert_eq!(kept.len(), 20);
        assert!(kept.iter().all(|o| o.outcome == Outcome::Failed));
    }

    #[test]
    fn empty_history_says_nothing_to_plot() {
        let s = svg(&History::default(), "empty & idle");
        let t = s.trim();
        assert!(t.starts_with("<svg") && t.ends_with("</svg>"));
        assert!(t.contains("nothing to plot"));
        assert!(t.contains("empty &amp; idle"));
        assert!(!t.contains("<circle") && !t.contains("<polyline"));
    }

    #[test]
    fn a_steady_rate_stays_flat_to_the_end() {
        // 100 ops a second until the run stops, for durations that end mid-second: a short
        // tail joins the second before, a longer one is a bucket of its own.
        for (duration_ms, want) in [(10_000, 10), (10_300, 10), (10_700, 11), (400, 1)] {
            let ops: Vec<Op> = (0..duration_ms / 10).map(|i| op(OpKind::Send, i * 10, 2, Outcome::Ok)).collect();
            let b = Buckets::new(&ops, duration_ms);
            assert_eq!(b.len(), want, "{duration_ms}");
            for i in 0..b.len() {
                let rate = b.per_s(i, b.ok[0][i]);
                assert!((rate - 100.0).abs() < 1.0, "{duration_ms} ms, bucket {i}: {rate}/s");
            }
        }
    }

    #[test]
    fn long_runs_get_wider_buckets_and_ticks() {
        assert_eq!(x_step_s(10.0), 1);
        assert_eq!(x_step_s(65.0), 10);
        assert_eq!(x_step_s(600.0), 60);
        assert_eq!(x_step_s(100_000.0), 10_000);
        let h = History { ops: vec![op(OpKind::Send, 10_000_000, 1, Outcome::Ok)], ..Default::default() };
        let b = Buckets::new(&h.ops, h.duration_ms);
        assert!(b.len() as u64 <= MAX_BUCKETS);
        assert_eq!(b.ok[0].iter().sum::<u64>(), 1);
        assert!(svg(&h, "long").contains("ops/s (per 3 s)"));
    }

    #[test]
    fn overlapping_fault_labels_go_to_different_rows() {
        let faults = vec![
            fault("kill broker 1", 1000, 2000),
            fault("kill broker 2", 1100, 2000),
            fault("kill broker 3", 1200, 2000),
        ];
        let h = History { duration_ms: 60_000, faults, ..Default::default() };
        let labels = layout_labels(&h.faults, &XScale::new(&h));
        assert_eq!(labels.iter().map(|l| l.row).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(labels.iter().all(|l| l.chars == "kill broker 1".len()));
    }

    #[test]
    fn crowded_fault_labels_are_cut_short_and_never_overlap() {
        let faults: Vec<FaultWindow> = (0..12)
            .map(|i| fault(&format!("clock skew of broker {i} by {i}00 ms"), 36_000 + i * 700, 36_500 + i * 700))
            .collect();
        let h = History { duration_ms: 60_000, faults, ..Default::default() };
        let xs = XScale::new(&h);
        let labels = layout_labels(&h.faults, &xs);
        for row in 0..LABEL_ROWS {
            let mut in_row: Vec<(f64, usize)> = (0..h.faults.len())
                .filter(|&i| labels[i].row == row)
                .map(|i| (xs.x(h.faults[i].start_ms), labels[i].chars))
                .collect();
            in_row.sort_by(|a, b| a.0.total_cmp(&b.0));
            for w in in_row.windows(2) {
                assert!(w[0].0 + LABEL_PAD + w[0].1 as f64 * LABEL_CHAR_W <= w[1].0 + LABEL_PAD, "{row}: {w:?}");
            }
        }
        // The last one has the room to its right and keeps its whole text.
        assert_eq!(labels[11].chars, h.faults[11].fault.chars().count());
        let ops = vec![op(OpKind::Send, 0, 1, Outcome::Ok)];
        let s = svg(&History { ops, ..h.clone() }, "crowded");
        assert_eq!(tags(&s, "rect", "fault").len(), 12);
        assert!(s.contains("clock skew of broker 11 by 1100 ms"));
    }

    #[test]
    fn escapes_all_five() {
        assert_eq!(esc(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&apos;");
    }
}
