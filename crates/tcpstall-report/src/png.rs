//! SVG to PNG without any system library: resvg and tiny-skia rasterize, and the text is
//! set in Hack (MIT and Bitstream Vera licences), which ships inside the
//! `epaint_default_fonts` crate. No font is looked up on the machine.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

use crate::ReportError;

/// The font database: Hack only, standing in for every generic family.
fn fonts() -> Arc<usvg::fontdb::Database> {
    static FONTS: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_font_data(epaint_default_fonts::HACK_REGULAR.to_vec());
            for family in db.faces().map(|f| f.families.clone()).collect::<Vec<_>>() {
                if let Some((name, _)) = family.first() {
                    db.set_monospace_family(name.clone());
                    db.set_sans_serif_family(name.clone());
                    db.set_serif_family(name.clone());
                }
            }
            Arc::new(db)
        })
        .clone()
}

/// Rasterizes an SVG document at `scale` (1.0: one pixel per SVG unit).
pub fn svg_to_png(svg: &str, what: &str, scale: f32) -> Result<Vec<u8>, ReportError> {
    let fail = |detail: String| ReportError::Png {
        what: what.to_string(),
        detail,
    };
    let mut options = usvg::Options {
        font_family: "Hack".to_string(),
        ..usvg::Options::default()
    };
    options.fontdb = fonts();
    let tree = usvg::Tree::from_str(svg, &options).map_err(|e| fail(e.to_string()))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(scale)
        .ok_or_else(|| fail("empty picture".into()))?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        fail(format!(
            "cannot allocate {}x{} pixels",
            size.width(),
            size.height()
        ))
    })?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_text_with_the_shipped_font() {
        let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="30"><text x="5" y="20" font-family="monospace" font-size="14">40 ms</text></svg>"#;
        let png = svg_to_png(svg, "test", 1.0).expect("renders");
        assert_eq!(&png[1..4], b"PNG");
        let blank = r#"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="30"></svg>"#;
        let blank_png = svg_to_png(blank, "test", 1.0).expect("renders");
        assert!(png.len() > blank_png.len(), "the text drew some pixels");
    }

    #[test]
    fn bad_svg_is_an_error_not_a_panic() {
        assert!(svg_to_png("<svg", "bad", 1.0).is_err());
    }
}
