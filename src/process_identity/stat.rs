//! The line `/proc/<pid>/stat`: read whole on the stack, and parsed for the fields the
//! registry needs (state and start time for layers 1–2; CPU time, threads and resident pages
//! for what a process costs). Fields are counted after the command name's last `)`.

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// The two fields of `/proc/<pid>/stat` the layers need, taken from one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StatFields {
    /// Field 3: `R`, `S`, `Z`, …
    pub(super) state: char,
    /// Field 22: start time in clock ticks since boot, kept as text.
    pub(super) start_token: String,
}

impl StatFields {
    /// A zombie (`Z`) or a dead task (`X`, `x`) will never answer; the spec counts it as no
    /// process.
    pub(super) fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parse a `/proc/<pid>/stat` line.
///
/// The command name (field 2) is in parentheses and may itself hold spaces and `)`, so fields
/// are counted from the *last* `)`: after it come field 3 (state) … field 22 (start time).
fn parse_stat(line: &str) -> Option<StatFields> {
    let after_comm = &line[line.rfind(')')? + 1..];
    let mut fields = after_comm.split_ascii_whitespace();
    let state_field = fields.next()?;
    let mut state_chars = state_field.chars();
    let state = state_chars.next()?;
    if state_chars.next().is_some() {
        return None;
    }
    // Field 3 was consumed; field 22 is 19 further on.
    let start_token = fields.nth(18)?;
    if start_token.is_empty() || !start_token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(StatFields {
        state,
        start_token: start_token.to_owned(),
    })
}

/// [`parse_stat`] of a stat line as read: the command name may hold any bytes, so only what
/// follows its closing `)` is decoded (that part is ASCII on every kernel).
pub(super) fn parse_stat_bytes(line: &[u8]) -> Option<StatFields> {
    let from_comm_end = line.iter().rposition(|b| *b == b')')?;
    parse_stat(std::str::from_utf8(&line[from_comm_end..]).ok()?)
}

pub(super) fn read_stat(pid: u32) -> std::io::Result<StatFields> {
    let mut buf = [0u8; STAT_LINE_BYTES];
    let line = read_stat_line(pid, &mut buf)?;
    parse_stat_bytes(line).ok_or_else(|| unexpected_stat(pid))
}

/// Room for any `/proc/<pid>/stat` line: at most about 1.2 KiB (52 fields of at most 20
/// digits and a 16-byte name).
const STAT_LINE_BYTES: usize = 4096;

/// `/proc/<pid>/stat` read whole into `buf` (on the caller's stack: this runs for every record
/// of every request).
fn read_stat_line(pid: u32, buf: &mut [u8; STAT_LINE_BYTES]) -> std::io::Result<&[u8]> {
    let path = format!("/proc/{pid}/stat");
    let fd = rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(&buf[..len])
}

fn unexpected_stat(pid: u32) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("/proc/{pid}/stat does not have the expected fields"),
    )
}

/// What a process has used so far, and which process that is, from one read of its
/// `/proc/<pid>/stat`: the figures belong to the process whose start time is read with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessUsage {
    /// Fields 14 + 15: user and system CPU time, in clock ticks, over every thread.
    pub(crate) cpu_ticks: u64,
    /// Field 20: threads in the process.
    pub(crate) threads: u64,
    /// Field 22: when the process started, in clock ticks since boot.
    pub(crate) start_ticks: u64,
    /// Field 24: resident pages.
    pub(crate) rss_pages: u64,
}

/// [`ProcessUsage`] of `pid`, read from one line of `/proc/<pid>/stat` (the kernel sums the
/// CPU time over the process's threads as it renders it).
pub(crate) fn process_usage(pid: u32) -> std::io::Result<ProcessUsage> {
    let mut buf = [0u8; STAT_LINE_BYTES];
    let line = read_stat_line(pid, &mut buf)?;
    parse_usage(line).ok_or_else(|| unexpected_stat(pid))
}

/// Parse [`ProcessUsage`] out of a stat line, counting fields from the last `)` as
/// [`parse_stat`] does.
fn parse_usage(line: &[u8]) -> Option<ProcessUsage> {
    let after_comm = &line[line.iter().rposition(|b| *b == b')')? + 1..];
    let mut fields = std::str::from_utf8(after_comm)
        .ok()?
        .split_ascii_whitespace();
    // Field 3 is the first after the name; `nth(k)` skips k fields.
    let mut field = |skip: usize| -> Option<u64> { fields.nth(skip)?.parse().ok() };
    let utime = field(11)?; // field 14
    let stime = field(0)?; // 15
    let threads = field(4)?; // 20
    let start_ticks = field(1)?; // 22
    let rss_pages = field(1)?; // 24
    Some(ProcessUsage {
        cpu_ticks: utime.checked_add(stime)?,
        threads,
        start_ticks,
        rss_pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(comm: &str, state: char, start: &str) -> String {
        // Fields 4..21 are filler; field 22 is `start`; a few trailing fields follow.
        let filler: Vec<String> = (4..=21).map(|n| n.to_string()).collect();
        format!(
            "4242 ({comm}) {state} {} {start} 23 24 25\n",
            filler.join(" ")
        )
    }

    #[test]
    fn counts_fields_after_the_last_parenthesis() {
        for comm in ["cat", "a b", "x) S 1 2 3", ") (", "((", "tricky) Z 9 9 9 9"] {
            let parsed = parse_stat(&stat_line(comm, 'S', "987654")).unwrap();
            assert_eq!(parsed.state, 'S', "{comm}");
            assert_eq!(parsed.start_token, "987654", "{comm}");
        }
    }

    #[test]
    fn zombie_and_dead_states_are_dead() {
        assert!(parse_stat(&stat_line("z", 'Z', "1")).unwrap().is_dead());
        assert!(parse_stat(&stat_line("x", 'X', "1")).unwrap().is_dead());
        assert!(!parse_stat(&stat_line("r", 'R', "1")).unwrap().is_dead());
    }

    #[test]
    fn usage_is_read_from_its_fields_after_the_last_parenthesis() {
        // Fields 3..=24 of a real line, with a name holding spaces and a `)`.
        let line = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 120 0 0 0 \
            731 269 0 0 20 0 7 0 987654 12345678 2048 18446744073709551615";
        let usage = parse_usage(line).expect("parses");
        assert_eq!(
            usage,
            ProcessUsage {
                cpu_ticks: 731 + 269,
                threads: 7,
                start_ticks: 987654,
                rss_pages: 2048,
            }
        );
        assert_eq!(parse_usage(b"4242 (short) S 1 2 3"), None);
        assert_eq!(parse_usage(b"no parenthesis at all"), None);
    }

    #[test]
    fn malformed_lines_do_not_parse() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("1 (no close paren S 1 2"), None);
        assert_eq!(parse_stat("1 (short) S 1 2 3"), None);
        assert_eq!(parse_stat(&stat_line("n", 'S', "12a")), None);
    }
}

/// Properties of the `/proc/<pid>/stat` parser over arbitrary lines.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_text_never_panics(line in "\\PC{0,300}") {
            let _ = parse_stat(&line);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_stat(&String::from_utf8_lossy(&bytes));
        }

        /// Whatever the command name holds (spaces, parentheses, digits), fields are counted
        /// after its last `)` and field 22 is found.
        #[test]
        fn any_command_name_yields_the_real_state_and_start(
            pid in 1u32..4_194_304,
            comm in "[ -~]{0,15}",
            state in prop::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 't', 'X', 'I']),
            start in any::<u64>(),
            middle in prop::collection::vec(any::<i64>(), 18),
            tail in prop::collection::vec(any::<u64>(), 0..30),
        ) {
            let middle: Vec<String> = middle.iter().map(i64::to_string).collect();
            let tail: Vec<String> = tail.iter().map(u64::to_string).collect();
            let line = format!(
                "{pid} ({comm}) {state} {} {start} {}\n",
                middle.join(" "),
                tail.join(" ")
            );
            let parsed = parse_stat(&line);
            prop_assert_eq!(
                parsed,
                Some(StatFields { state, start_token: start.to_string() }),
                "{:?}", line
            );
        }

        /// A line cut anywhere before field 22 never yields a start token.
        #[test]
        fn a_truncated_line_yields_no_start(
            comm in "[ -~]{0,15}",
            start in any::<u64>(),
            cut in 0usize..200,
        ) {
            let fields: Vec<String> = (0..18).map(|i| i.to_string()).collect();
            let line = format!("7 ({comm}) S {} {start}", fields.join(" "));
            let keep = line.len().saturating_sub(cut + start.to_string().len() + 1);
            if let Some(truncated) = line.get(..keep) {
                prop_assert_eq!(parse_stat(truncated), None, "{:?}", truncated);
            }
        }
    }
}
