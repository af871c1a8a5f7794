//! A small SVG writer: the few elements the graphs need, attributes escaped, numbers
//! rounded so that a graph of many segments stays small.

use std::fmt::Write;

/// Monospace font stack: Hack ships with the PNG renderer, browsers pick the nearest.
pub const FONT: &str = "Hack, 'DejaVu Sans Mono', Menlo, Consolas, monospace";
/// Advance of one character of a monospace font, in em.
pub const CHAR_EM: f64 = 0.61;

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with at most one decimal, without a trailing ".0".
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".to_string();
    }
    let r = (v * 10.0).round() / 10.0;
    if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

/// Width of `text` at `size` px in the monospace font.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * CHAR_EM
}

/// An SVG document being written.
pub struct Svg {
    out: String,
    pub width: f64,
    pub height: f64,
}

impl Svg {
    /// Starts a document; `label` becomes its accessible name.
    pub fn new(width: f64, height: f64, label: &str) -> Svg {
        let mut out = String::with_capacity(16 * 1024);
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{label}" font-family="{font}" font-size="12">"#,
            w = num(width),
            h = num(height),
            label = escape(label),
            font = escape(FONT),
        );
        let _ = write!(
            out,
            r##"<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>"##,
            num(width),
            num(height)
        );
        Svg { out, width, height }
    }

    /// A picture with its title drawn in the top left corner, as every graph has.
    pub fn titled(width: f64, height: f64, title: &str) -> Svg {
        let mut svg = Svg::new(width, height, title);
        svg.text(
            10.0,
            18.0,
            "start",
            r##"font-size="13" font-weight="bold" fill="#111111""##,
            title,
        );
        svg
    }

    /// Appends raw markup (already escaped).
    pub fn raw(&mut self, markup: &str) {
        self.out.push_str(markup);
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, attrs: &str) {
        let _ = write!(
            self.out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" {attrs}/>"#,
            num(x),
            num(y),
            num(w.max(0.0)),
            num(h.max(0.0))
        );
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    pub fn path(&mut self, d: &str, attrs: &str) {
        if d.is_empty() {
            return;
        }
        let _ = write!(self.out, r#"<path d="{d}" {attrs}/>"#);
    }

    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, attrs: &str) {
        let _ = write!(
            self.out,
            r#"<circle cx="{}" cy="{}" r="{}" {attrs}/>"#,
            num(cx),
            num(cy),
            num(r)
        );
    }

    /// Text with its anchor (`start`, `middle`, `end`).
    pub fn text(&mut self, x: f64, y: f64, anchor: &str, attrs: &str, text: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{}" y="{}" text-anchor="{anchor}" {attrs}>{}</text>"#,
            num(x),
            num(y),
            escape(text)
        );
    }

    /// Text rotated by -90 degrees around its position (a vertical axis title).
    pub fn vtext(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{x}" y="{y}" text-anchor="middle" transform="rotate(-90 {x} {y})" {attrs}>{}</text>"#,
            escape(text),
            x = num(x),
            y = num(y),
        );
    }

    pub fn open_group(&mut self, attrs: &str) {
        let _ = write!(self.out, "<g {attrs}>");
    }

    pub fn close_group(&mut self) {
        self.out.push_str("</g>");
    }

    /// A tooltip for the enclosing element.
    pub fn title(&mut self, text: &str) {
        let _ = write!(self.out, "<title>{}</title>", escape(text));
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_rounds_numbers() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(num(1.04), "1");
        assert_eq!(num(1.25), "1.3");
        assert_eq!(num(f64::NAN), "0");
        let mut svg = Svg::new(10.0, 10.0, "t<");
        svg.text(1.0, 2.0, "start", "", "x&y");
        let s = svg.finish();
        assert!(s.contains("x&amp;y") && s.contains("aria-label=\"t&lt;\""));
    }
}
