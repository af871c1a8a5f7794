//! Text from outside the program shown on a terminal: a process's name, a cgroup or unit,
//! a file's name, anything read from a capture. Any of these can be chosen by someone
//! else (a local user names a process `"\x1b[2J"`, plants a file named with a newline), so
//! every text sink shows them through [`Escaped`]: control characters, invalid UTF-8 and
//! the characters that reorder a line come out as visible escapes, and such a string can
//! neither move the cursor, clear the screen, set the window's title nor forge a line.
//!
//! JSON and the Prometheus exposition escape by their own rules and do not use this.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// Bytes shown with every byte that is not printable UTF-8 as `\xNN`, a backslash as
/// `\\` (so the escapes cannot be forged either), and the C1 controls and the
/// bidirectional formatting characters as `\u{NNNN}`. Width and alignment (`{:<16}`)
/// apply to the escaped text.
#[derive(Clone, Copy)]
pub struct Escaped<'a>(&'a [u8]);

/// `text` for a terminal.
pub fn escaped(text: &str) -> Escaped<'_> {
    Escaped(text.as_bytes())
}

/// A path for a terminal: its bytes as they are on disk, invalid UTF-8 included.
pub fn escaped_path(path: &Path) -> Escaped<'_> {
    use std::os::unix::ffi::OsStrExt;
    Escaped(path.as_os_str().as_bytes())
}

/// Raw bytes (a capture's comment, a process name read from the kernel) for a terminal.
pub fn escaped_bytes(bytes: &[u8]) -> Escaped<'_> {
    Escaped(bytes)
}

/// Characters a terminal acts on or that reorder what it shows: C0 controls and DEL,
/// C1 controls (a UTF-8 terminal takes U+009B as CSI), and Unicode's bidirectional
/// marks, embeddings, overrides and isolates (Unicode TR 9), which can make a line read
/// in another order than its bytes.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

impl Escaped<'_> {
    /// The escaped text; borrowed when nothing needed escaping.
    pub fn to_text(&self) -> Cow<'_, str> {
        if let Ok(text) = std::str::from_utf8(self.0)
            && !text.chars().any(|c| c == '\\' || is_unsafe(c))
        {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(self.0.len() + 8);
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                    c if is_unsafe(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
                    c => out.push(c),
                }
            }
            for byte in chunk.invalid() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        }
        Cow::Owned(out)
    }
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.to_text())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_shown_as_it_is() {
        assert_eq!(escaped("nginx").to_string(), "nginx");
        assert_eq!(escaped("café ☕").to_string(), "café ☕");
        assert!(matches!(escaped("java").to_text(), Cow::Borrowed(_)));
    }

    #[test]
    fn terminal_controls_and_line_breaks_are_shown_as_escapes() {
        let name = "\x1b[2J\x1b]0;pwn\x07";
        assert_eq!(escaped(name).to_string(), "\\x1b[2J\\x1b]0;pwn\\x07");
        assert_eq!(
            escaped("a\nholder b\r\t\x7f").to_string(),
            "a\\x0aholder b\\x0d\\x09\\x7f"
        );
        assert!(!escaped(name).to_string().chars().any(char::is_control));
    }

    #[test]
    fn c1_controls_and_bidirectional_overrides_are_shown_as_escapes() {
        assert_eq!(escaped("a\u{9b}2J").to_string(), "a\\u{009b}2J");
        assert_eq!(escaped("x\u{202e}gpj.exe").to_string(), "x\\u{202e}gpj.exe");
        assert_eq!(
            escaped("\u{2066}\u{200f}").to_string(),
            "\\u{2066}\\u{200f}"
        );
    }

    #[test]
    fn invalid_utf8_is_shown_byte_by_byte_and_a_backslash_cannot_forge_an_escape() {
        assert_eq!(escaped_bytes(b"a\xff\xc3b").to_string(), "a\\xff\\xc3b");
        assert_eq!(escaped("\\x1b").to_string(), "\\\\x1b");
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xfe\n.pcap"));
        assert_eq!(escaped_path(path).to_string(), "/tmp/\\xfe\\x0a.pcap");
    }

    #[test]
    fn width_and_alignment_apply_to_the_escaped_text() {
        assert_eq!(format!("[{:<8}]", escaped("a\x07")), "[a\\x07   ]");
        assert_eq!(format!("[{:>6}]", escaped("ab")), "[    ab]");
    }
}
