//! Log-log line plots as standalone SVG text, for `recall bench sweep` (docs/adr/0013-bench-plots-hand-written-svg.md
//! says why this is written by hand). Points that cannot be drawn on log axes (zero, negative, NaN,
//! infinite) are left out; a plot with no drawable point still renders, with a note.

use std::fmt::Write as _;

/// One line of a plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, drawn in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (reference lines: limits, break-even).
    pub dashed: bool,
}

/// A log-log plot.
#[derive(Debug, Clone)]
pub struct Plot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Text safe inside an SVG element or a double-quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// A tick label: `1k`, `10M`, `0.01`, `2`.
pub fn tick_label(v: f64) -> String {
    let units = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, unit) in units {
        if v >= scale {
            return format!("{}{unit}", trim(v / scale));
        }
    }
    trim(v)
}

fn trim(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.into() }
}

/// The decade range that holds every value: (floor(log10 min), ceil(log10 max)), at least one decade.
fn decades(values: impl Iterator<Item = f64>) -> Option<(i32, i32)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return None;
    }
    let a = lo.log10().floor() as i32;
    let b = (hi.log10().ceil() as i32).max(a + 1);
    Some((a, b))
}

fn drawable(p: &(f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite() && p.0 > 0.0 && p.1 > 0.0
}

impl Plot {
    /// The plot as a complete SVG document.
    pub fn render(&self) -> String {
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            svg,
            r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            (LEFT + WIDTH - RIGHT) / 2.0,
            escape(&self.title)
        );
        let pw = WIDTH - LEFT - RIGHT;
        let ph = HEIGHT - TOP - BOTTOM;
        let points = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| drawable(p))
        };
        let (Some((x0, x1)), Some((y0, y1))) = (
            decades(points().map(|p| p.0)),
            decades(points().map(|p| p.1)),
        ) else {
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">no data to plot</text>"#,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            svg.push_str("</svg>\n");
            return svg;
        };
        let sx = |x: f64| LEFT + (x.log10() - f64::from(x0)) / f64::from(x1 - x0) * pw;
        let sy = |y: f64| TOP + ph - (y.log10() - f64::from(y0)) / f64::from(y1 - y0) * ph;
        // Frame, grid and ticks at every decade.
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
        );
        for e in x0..=x1 {
            let v = 10f64.powi(e);
            let x = sx(v);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{}" stroke="#ddd"/>"##,
                TOP + ph
            );
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                TOP + ph + 16.0,
                escape(&tick_label(v))
            );
        }
        for e in y0..=y1 {
            let v = 10f64.powi(e);
            let y = sy(v);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/>"##,
                LEFT + pw
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                escape(&tick_label(v))
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            HEIGHT - 16.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
        // Lines, markers and the legend.
        for (i, s) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut pts: Vec<(f64, f64)> = s.points.iter().copied().filter(drawable).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            if !pts.is_empty() {
                let coords: Vec<String> = pts
                    .iter()
                    .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                    .collect();
                let _ = writeln!(
                    svg,
                    r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                    coords.join(" ")
                );
                if !s.dashed {
                    for &(x, y) in &pts {
                        let _ = writeln!(
                            svg,
                            r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                            sx(x),
                            sy(y)
                        );
                    }
                }
            }
            let ly = TOP + 12.0 + 20.0 * i as f64;
            let lx = LEFT + pw + 12.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>"#,
                lx + 24.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">{}</text>"#,
                lx + 30.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small XML well-formedness check: one root element, every tag closed in order, attribute values
    /// quoted, no raw `<` or `&` outside markup and entities. Enough for the SVG this module writes.
    pub(crate) fn well_formed(doc: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = doc.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('<') {
                let end = after.find('>').ok_or("unterminated tag")?;
                let tag = &after[..end];
                rest = &after[end + 1..];
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                    if open != name.trim() {
                        return Err(format!("<{open}> closed by </{name}>"));
                    }
                    continue;
                }
                let self_closing = tag.ends_with('/');
                let body = tag.trim_end_matches('/');
                let name = body.split_whitespace().next().ok_or("empty tag")?;
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    return Err(format!("bad tag name {name:?}"));
                }
                check_attributes(&body[name.len()..])?;
                if stack.is_empty() {
                    roots += 1;
                }
                if !self_closing {
                    stack.push(name.to_string());
                }
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                check_text(&rest[..end])?;
                if stack.is_empty() && !rest[..end].trim().is_empty() {
                    return Err("text outside the root element".into());
                }
                rest = &rest[end..];
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(())
    }

    fn check_attributes(mut a: &str) -> Result<(), String> {
        loop {
            a = a.trim_start();
            if a.is_empty() {
                return Ok(());
            }
            let eq = a
                .find('=')
                .ok_or(format!("attribute without a value: {a:?}"))?;
            let name = &a[..eq];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-:".contains(c))
            {
                return Err(format!("bad attribute name {name:?}"));
            }
            let v = &a[eq + 1..];
            let q = v.chars().next().ok_or("missing attribute value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute {name}"));
            }
            let close = v[1..].find(q).ok_or("unterminated attribute")?;
            let value = &v[1..1 + close];
            if value.contains('<') {
                return Err(format!("'<' in attribute {name}"));
            }
            check_text(value)?;
            a = &v[close + 2..];
        }
    }

    fn check_text(t: &str) -> Result<(), String> {
        let mut rest = t;
        while let Some(i) = rest.find('&') {
            let after = &rest[i + 1..];
            let end = after.find(';').ok_or("bare '&'")?;
            let entity = &after[..end];
            let ok =
                ["amp", "lt", "gt", "quot", "apos"].contains(&entity) || entity.starts_with('#');
            if !ok {
                return Err(format!("unknown entity &{entity};"));
            }
            rest = &after[end + 1..];
        }
        Ok(())
    }

    #[test]
    fn the_checker_catches_what_it_should() {
        assert!(well_formed(r#"<svg a="1"><g/><text>x &amp; y</text></svg>"#).is_ok());
        assert!(well_formed("<svg><g></svg>").is_err());
        assert!(well_formed("<svg a=1></svg>").is_err());
        assert!(well_formed("<svg>a & b</svg>").is_err());
        assert!(well_formed("<svg></svg><svg></svg>").is_err());
        assert!(well_formed("<svg><text>1 < 2</text></svg>").is_err());
    }

    #[test]
    fn plots_are_well_formed_and_escape_their_text() {
        let plot = Plot {
            title: "knn <cosine> & \"top-10\"".into(),
            x_label: "rows".into(),
            y_label: "ms".into(),
            series: vec![
                Series {
                    name: "cpu".into(),
                    points: vec![(1000.0, 0.5), (10_000.0, 4.0), (0.0, 1.0), (5.0, f64::NAN)],
                    dashed: false,
                },
                Series {
                    name: "limit <a&b>".into(),
                    points: vec![(1000.0, 2.0), (10_000.0, 2.0)],
                    dashed: true,
                },
            ],
        };
        let svg = plot.render();
        well_formed(&svg).unwrap();
        assert!(svg.contains("knn &lt;cosine&gt; &amp; &quot;top-10&quot;"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(
            svg.matches("<circle").count(),
            2,
            "undrawable points are left out"
        );
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains(">1k<") && svg.contains(">10k<"));
    }

    #[test]
    fn an_empty_plot_still_renders() {
        let plot = Plot {
            title: "nothing".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "gpu".into(),
                points: vec![],
                dashed: false,
            }],
        };
        let svg = plot.render();
        well_formed(&svg).unwrap();
        assert!(svg.contains("no data to plot"));
    }

    #[test]
    fn tick_labels() {
        assert_eq!(tick_label(1000.0), "1k");
        assert_eq!(tick_label(1e6), "1M");
        assert_eq!(tick_label(0.01), "0.01");
        assert_eq!(tick_label(100.0), "100");
        assert_eq!(tick_label(2.5e9), "2.5G");
    }
}
