//! Reading a `text/event-stream` body as it comes, chunk by chunk, into whole events.
//!
//! Invariant: an event is handed on only once its blank line has arrived, so a chunk cut
//! anywhere (inside a line, inside a UTF-8 sequence) yields the same events as one body.

/// One event: its `event:` name (`message` when none was given) and its `data:` lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Frame {
    pub(super) name: String,
    pub(super) data: String,
}

/// The part of a stream read so far that is not yet a whole event.
#[derive(Debug, Default)]
pub(super) struct Frames {
    line: Vec<u8>,
    name: Option<String>,
    data: Option<String>,
}

impl Frames {
    /// Take `chunk`; answers the events it completed.
    pub(super) fn push(&mut self, chunk: &[u8]) -> Vec<Frame> {
        let mut done = Vec::new();
        for &byte in chunk {
            if byte == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.end_line(&line, &mut done);
            } else {
                self.line.push(byte);
            }
        }
        done
    }

    fn end_line(&mut self, line: &[u8], done: &mut Vec<Frame>) {
        let line = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line));
        if line.is_empty() {
            let name = self.name.take();
            if let Some(data) = self.data.take() {
                let name = name.unwrap_or_else(|| "message".to_owned());
                done.push(Frame { name, data });
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.name = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_wherever_the_chunks_are_cut() {
        let body = "id: 1\nevent: snapshot\ndata: {\"a\":\"é\"}\n\n: keep-alive\n\n\
                    event: session.added\r\ndata: x\r\ndata:y\r\n\r\nid: 3\n";
        let whole = Frames::default().push(body.as_bytes());
        assert_eq!(
            whole,
            vec![
                Frame {
                    name: "snapshot".into(),
                    data: "{\"a\":\"é\"}".into()
                },
                Frame {
                    name: "session.added".into(),
                    data: "x\ny".into()
                },
            ]
        );
        for cut in 1..body.len() {
            let mut frames = Frames::default();
            let mut got = frames.push(&body.as_bytes()[..cut]);
            got.extend(frames.push(&body.as_bytes()[cut..]));
            assert_eq!(got, whole, "cut at {cut}");
        }
    }
}
