//! The field formatter of `serve --log-format text`: every field of every event and span, the
//! message among them, is written through [`crate::control_chars`]'s one rule.
//!
//! Invariant: one event is one line. Values that come from outside (an etcd key, a path, a
//! peer's reason, serde's error text quoting what it read) cannot break the line or forge the
//! next one, nor steer the terminal the log is read on. The JSON format needs none of this:
//! its encoder escapes every control character already.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

use crate::control_chars::Escaping;

/// Fields as `name=value`, space-separated, the message bare and first-come as written; each
/// value escaped. Field names are the program's own and written as they are.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes the fields of one event or span; the first write error ends it.
struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // A string field is quoted (as the default formatter does), the message is not.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_ok() {
            self.result = self.write_field(field.name(), value);
        }
    }
}

impl EscapingVisitor<'_> {
    fn write_field(&mut self, name: &str, value: &dyn fmt::Debug) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if self.writer.has_ansi_escapes() {
                // Italic name, dimmed `=`: the default formatter's look on a terminal.
                write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")?;
            } else {
                write!(self.writer, "{name}=")?;
            }
        }
        // `%value` fields and the message reach here as `Debug` that prints their `Display`.
        write!(Escaping(&mut self.writer), "{value:?}")
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("sink").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// What the text format writes for the events `emit` makes.
    fn logged(emit: impl FnOnce()) -> String {
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = sink.0.lock().expect("sink").clone();
        String::from_utf8(bytes).expect("UTF-8")
    }

    #[test]
    fn hostile_values_and_messages_stay_on_their_one_line() {
        let forged = "x\n2026-01-01T00:00:00Z  WARN forged\r\x1b[2J\u{202E}";
        let log = logged(|| {
            let span = tracing::info_span!("request", route = %forged);
            let _entered = span.enter();
            tracing::warn!(key = %forged, quoted = forged, n = 3, "skipped {forged}");
        });
        assert_eq!(log.lines().count(), 1, "{log}");
        let escaped = r"x\n2026-01-01T00:00:00Z  WARN forged\r\u{1b}[2J\u{202e}";
        assert!(
            log.contains(&format!("request{{route={escaped}}}")),
            "{log}"
        );
        assert!(
            log.contains(&format!("skipped {escaped} key={escaped} ")),
            "{log}"
        );
        // Debug already wrote `\n` as `\\n` inside the quotes; only what it left is escaped.
        assert!(log.contains(r#"quoted="x\n2026"#), "{log}");
        assert!(log.contains(r"\u{1b}[2J\u{202e}"), "{log}");
        assert!(log.trim_end().ends_with(" n=3"), "{log}");
    }

    #[test]
    fn ordinary_fields_read_as_the_default_format_writes_them() {
        let log =
            logged(|| tracing::info!(method = %"GET", status = 200u16, r#type = "a", "request"));
        assert!(
            log.trim_end()
                .ends_with(r#"request method=GET status=200 type="a""#),
            "{log}"
        );
    }
}
