//! Control characters made visible, for text a person reads: the CLI's tables and lines, and
//! the `text` log format.
//!
//! Invariant: text passed through [`escaped`] (or written through [`Escaping`]) holds no
//! character that a terminal or a log reader acts on instead of showing: no C0 control (line
//! breaks and tabs included), no DEL, no C1 control, no bidirectional override or isolate.
//! Each such character becomes a visible escape (`\n`, `\r`, `\t`, else `\u{1b}`), so a value
//! from outside (a capsule name, a file name, a door's reason) stays on its one line and cannot
//! retitle, clear or repaint the terminal. Everything else, backslashes included, is left as it
//! is: this is for display, and `--json` (or `--log-format json`) is the lossless form.

use std::borrow::Cow;
use std::fmt::{self, Write};

/// Whether `c` must not reach a terminal or a log line as itself: a C0 control, DEL or a C1
/// control (Unicode's `Cc`), or a bidirectional embedding, override or isolate
/// (U+202A–U+202E, U+2066–U+2069), which reorder what follows them on screen.
pub fn is_hidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [`is_hidden_control`] character escaped; borrowed when there is none.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    // Writing into a `String` cannot fail.
    let _ = Escaping(&mut out).write_str(text);
    Cow::Owned(out)
}

/// A [`fmt::Write`] that escapes what is written through it before passing it on, so a
/// `Display` or `Debug` value can be formatted straight into escaped text.
pub struct Escaping<W>(pub W);

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| is_hidden_control(c)) {
            self.0.write_str(&rest[..at])?;
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                other => write!(self.0, "\\u{{{:x}}}", u32::from(other))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sequences_and_line_breaks_become_visible() {
        let hostile = "evil\x1b]0;owned\x07\x1b[2J\r\nses_fake  running\tx\u{7f}\u{9b}";
        assert_eq!(
            escaped(hostile),
            "evil\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\r\\nses_fake  running\\tx\\u{7f}\\u{9b}"
        );
        assert_eq!(
            escaped("a\u{202E}b\u{2066}c\u{2069}\u{202A}"),
            "a\\u{202e}b\\u{2066}c\\u{2069}\\u{202a}"
        );
        assert_eq!(escaped("\0"), "\\u{0}");
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        for text in [
            "",
            "review-bot@1.2.0",
            "C:\\path \\n",
            "naïve — 日本 🦀",
            "\u{a0}x",
        ] {
            assert!(
                matches!(escaped(text), Cow::Borrowed(t) if t == text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_characters_around_the_ranges_are_shown_as_they_are() {
        for c in [
            '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{202A}', '\u{202E}',
        ] {
            assert!(is_hidden_control(c), "{c:?}");
        }
        for c in [
            ' ', '~', '\u{a0}', '\u{2029}', '\u{202F}', '\u{2065}', '\u{206A}',
        ] {
            assert!(!is_hidden_control(c), "{c:?}");
        }
    }

    proptest::proptest! {
        /// Whatever goes in, nothing hidden comes out, and text without any is unchanged.
        #[test]
        fn nothing_hidden_survives(text in "\\PC{0,40}|[\\x00-\\x{a0}\\x{2060}-\\x{2070}]{0,40}") {
            let out = escaped(&text);
            proptest::prop_assert!(!out.chars().any(is_hidden_control), "{:?}", out);
            if !text.chars().any(is_hidden_control) {
                proptest::prop_assert_eq!(out.as_ref(), text.as_str());
            }
        }
    }
}
