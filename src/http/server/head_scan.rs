//! The size of a request head, measured byte by byte as it arrives, before hyper parses it.
//!
//! Invariant: a head is refused as soon as it is known to exceed a limit, on the byte that
//! exceeds it, so the parser behind never holds a head that would trip its own limits (hyper
//! answers those itself, with an empty body). The end of a head is found as httparse finds
//! it: an empty line (`\r\n` or a bare `\n`) after a non-empty one; empty lines before the
//! request line are skipped, as httparse skips them, but count towards the size.

/// The longest request line taken, its line end excluded. hyper refuses a request-target over
/// 65,534 bytes itself; with a method and ` HTTP/1.1` around it, a line within this limit
/// never carries one that long.
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// The largest request head taken, line ends included: the request line at its longest and
/// as much again for the headers (hyper's own buffer limit is about 400 KiB).
pub const MAX_REQUEST_HEAD: usize = 128 * 1024;

/// The most header lines a head may have: hyper's own count, past which it answers itself.
pub const MAX_HEADER_LINES: usize = 100;

/// Which limit a head went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TooLong {
    /// The request line is longer than [`MAX_REQUEST_LINE`]: 414.
    RequestLine,
    /// The head is larger than [`MAX_REQUEST_HEAD`], or has more than [`MAX_HEADER_LINES`]
    /// header lines: 431.
    Head,
}

/// What the bytes given to [`HeadScan::scan`] turned out to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scanned {
    /// The first `n` bytes belong to a head that has not ended yet (`n` is all of them).
    Partial(usize),
    /// The head ends with the `n`-th byte; the bytes after it are not the head's.
    Ended(usize),
    /// The first `n` bytes are within the limits; the next one is over `TooLong`.
    Over(usize, TooLong),
}

/// One head's measure so far.
#[derive(Debug, Default, Clone)]
pub(super) struct HeadScan {
    /// Bytes of the head so far.
    size: usize,
    /// Bytes of the current line so far, its `\n` excluded.
    line: usize,
    /// Whether the current line's last byte is `\r`.
    after_cr: bool,
    /// Non-empty lines ended so far: the request line, then the header lines.
    lines: usize,
}

impl HeadScan {
    /// Take `bytes`, the next ones on the connection, until the head ends or goes over a limit.
    pub(super) fn scan(&mut self, bytes: &[u8]) -> Scanned {
        for (at, &byte) in bytes.iter().enumerate() {
            if let Some(over) = self.push(byte) {
                return match over {
                    Step::Ended => Scanned::Ended(at + 1),
                    Step::Over(why) => Scanned::Over(at, why),
                };
            }
        }
        Scanned::Partial(bytes.len())
    }

    fn push(&mut self, byte: u8) -> Option<Step> {
        self.size += 1;
        if self.size > MAX_REQUEST_HEAD {
            return Some(Step::Over(self.too_long()));
        }
        if byte != b'\n' {
            self.line += 1;
            self.after_cr = byte == b'\r';
            // The `\r` of a line end is not the line's; one byte more may still be that.
            let content = self.line - usize::from(self.after_cr);
            return (self.lines == 0 && content > MAX_REQUEST_LINE)
                .then_some(Step::Over(TooLong::RequestLine));
        }
        let empty = self.line == usize::from(self.after_cr);
        self.line = 0;
        self.after_cr = false;
        if empty {
            return (self.lines > 0).then_some(Step::Ended);
        }
        self.lines += 1;
        (self.lines > MAX_HEADER_LINES + 1).then_some(Step::Over(TooLong::Head))
    }

    /// Over the size limit: on the request line still, the line is what is too long.
    fn too_long(&self) -> TooLong {
        if self.lines == 0 {
            TooLong::RequestLine
        } else {
            TooLong::Head
        }
    }
}

/// What one byte did to a head.
enum Step {
    Ended,
    Over(TooLong),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(bytes: &[u8]) -> Scanned {
        HeadScan::default().scan(bytes)
    }

    #[test]
    fn a_head_ends_at_its_first_empty_line_with_either_line_end() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nnext";
        assert_eq!(scan(head), Scanned::Ended(head.len() - 4));
        assert_eq!(scan(b"GET / HTTP/1.1\nHost: a\n\nx"), Scanned::Ended(24));
        // Empty lines before the request line are skipped, not an end.
        assert_eq!(scan(b"\r\n\nGET / HTTP/1.1\r\n\r\n"), Scanned::Ended(21));
        assert_eq!(scan(b"GET / HTTP/1.1\r\nHost"), Scanned::Partial(20));
    }

    #[test]
    fn a_head_given_in_pieces_ends_where_it_would_whole() {
        let head = b"GET /sessions HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let mut scan = HeadScan::default();
        let (first, rest) = head.split_at(23);
        assert_eq!(scan.scan(first), Scanned::Partial(23));
        assert_eq!(scan.scan(rest), Scanned::Ended(rest.len()));
    }

    #[test]
    fn the_request_line_is_refused_on_the_byte_past_its_limit() {
        let mut line = b"GET /".to_vec();
        line.resize(MAX_REQUEST_LINE, b'a');
        // At the limit, with its line end, it passes.
        let mut whole = line.clone();
        whole.extend_from_slice(b"\r\n\r\n");
        assert_eq!(scan(&whole), Scanned::Ended(whole.len()));
        line.push(b'a');
        assert_eq!(
            scan(&line),
            Scanned::Over(MAX_REQUEST_LINE, TooLong::RequestLine)
        );
    }

    #[test]
    fn too_many_header_lines_or_bytes_are_refused() {
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        for n in 0..MAX_HEADER_LINES {
            head.extend_from_slice(format!("X-{n}: v\r\n").as_bytes());
        }
        let mut ok = head.clone();
        ok.extend_from_slice(b"\r\n");
        assert_eq!(scan(&ok), Scanned::Ended(ok.len()));
        head.extend_from_slice(b"X-over: v\r\n");
        assert_eq!(scan(&head), Scanned::Over(head.len() - 1, TooLong::Head));

        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_REQUEST_HEAD + 10, b'v');
        assert_eq!(scan(&big), Scanned::Over(MAX_REQUEST_HEAD, TooLong::Head));
    }

    proptest::proptest! {
        /// However a head is cut into pieces, it ends (or is refused) at the same byte.
        #[test]
        fn pieces_do_not_change_the_verdict(
            head in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b' ', b'\r', b'\n']), 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let whole = scan(&head);
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= head.len()).collect();
            cuts.sort_unstable();
            let mut scanner = HeadScan::default();
            let (mut from, mut pieces) = (0, Scanned::Partial(0));
            for end in cuts.into_iter().chain([head.len()]) {
                let end = end.max(from);
                pieces = match scanner.scan(&head[from..end]) {
                    Scanned::Partial(_) => Scanned::Partial(end),
                    Scanned::Ended(n) => Scanned::Ended(from + n),
                    Scanned::Over(n, why) => Scanned::Over(from + n, why),
                };
                if !matches!(pieces, Scanned::Partial(_)) {
                    break;
                }
                from = end;
            }
            proptest::prop_assert_eq!(pieces, whole);
        }
    }
}
