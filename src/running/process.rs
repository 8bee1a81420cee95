//! Layers 1 and 2: is the recorded pid held by a living process, and is that process the one
//! that wrote the record?
//!
//! Invariants kept here:
//! - Only evidence makes a process `Gone`: `kill(pid, 0)` answering ESRCH, a zombie whose
//!   every thread has exited (it will never answer again; a leader alone in `Z` with live
//!   threads is still a process), a pid no process can hold (0, or beyond `pid_t`), or a start
//!   token read off `/proc` that differs from the recorded one (the pid was reused).
//! - Anything that could not be read is `Unverified`, never `Gone`: an EPERM from `kill` still
//!   means a process holds the pid, and a `/proc` entry we may not read (hidepid) proves nothing.
//! - A recorded token of `""` (its writer could not read its own) never matches, so it is never
//!   `Alive` and never signalled; it is not evidence of reuse either, so it is `Unverified`.
//!   So is a recorded token that is not decimal: it was not written by this platform's rule.
//! - The pid is range-checked before any syscall: a record's `u32` cast blindly to `pid_t` could
//!   turn into a negative number, which `kill` reads as a process group, or `-1`, everyone.

use std::collections::BTreeSet;
use std::ffi::OsString;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::process::Pid;

use super::RunningRecord;

/// What layers 1 and 2 say about the process a record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessState {
    /// The pid is held, not by a zombie, and by the process that wrote the record.
    Alive,
    /// The pid is held, but whether by the writer could not be established. Kept, reported as
    /// unreachable, never signalled.
    Unverified {
        /// What could not be read, for a person.
        reason: String,
    },
    /// No process holds the pid, or another process does: evidence the session is over.
    Gone {
        /// The evidence, in the spec's words.
        reason: String,
    },
}

/// The reason given when no process holds `pid` (zombies count as none).
pub fn reason_no_process(pid: u32) -> String {
    format!("no process holds pid {pid}")
}

/// The reason given when the process a held pidfd names has exited (a zombie counts): the pid
/// itself may be held by another process by now.
pub fn reason_exited(pid: u32) -> String {
    format!("the process that held pid {pid} has exited")
}

/// The reason given when `pid` now belongs to a process that started at another time.
pub fn reason_pid_reused(pid: u32) -> String {
    format!("pid {pid} is held by a process that started at another time")
}

/// The recorded pid as a `Pid` a syscall may be given, or `None` when no process can hold it.
pub(crate) fn checked_pid(pid: u32) -> Option<Pid> {
    let raw = i32::try_from(pid).ok()?;
    // `raw` is positive here; zero is refused by `from_raw`.
    Pid::from_raw(raw)
}

/// Layers 1 and 2: the pid is alive, and the process holding it is the one that wrote the record.
///
/// Blocking (a syscall and a `/proc` read); call it off async workers.
pub fn process_state(record: &RunningRecord) -> ProcessState {
    state_of(record.pid, &record.process_start)
}

/// [`process_state`] for a bare pid and recorded start token.
pub(crate) fn state_of(pid: u32, recorded_start: &str) -> ProcessState {
    let gone = || ProcessState::Gone {
        reason: reason_no_process(pid),
    };
    let Some(checked) = checked_pid(pid) else {
        return gone();
    };
    match is_held(checked) {
        Held::No => return gone(),
        Held::Yes => {}
        Held::Unknown(errno) => {
            return ProcessState::Unverified {
                reason: format!("could not tell whether pid {pid} is held: {errno}"),
            };
        }
    }
    let stat = match read_stat(pid) {
        Ok(stat) => stat,
        Err(error) => {
            // The process may have exited between the two readings; only `kill` can say so.
            // An entry hidden from us (hidepid) also reads as missing while the pid is held.
            if matches!(is_held(checked), Held::No) {
                return gone();
            }
            return ProcessState::Unverified {
                reason: format!("pid {pid} is alive but its start time cannot be read: {error}"),
            };
        }
    };
    if stat.is_dead() {
        // A leader shows `Z` as soon as its own thread exits, while other threads of the
        // process may still run: only a thread group with no live task is no process.
        match live_threads_remain(pid) {
            Ok(false) => return gone(),
            Ok(true) => {}
            Err(error) => {
                if matches!(is_held(checked), Held::No) {
                    return gone();
                }
                return ProcessState::Unverified {
                    reason: format!(
                        "pid {pid}'s main thread has exited and its other threads cannot be read: {error}"
                    ),
                };
            }
        }
    }
    if recorded_start.is_empty() {
        return ProcessState::Unverified {
            reason: format!(
                "pid {pid} is alive but the record holds no start time to compare, \
                 so it cannot be confirmed as the capsule"
            ),
        };
    }
    // A recorded token that is not a number this platform writes (another OS, or a damaged
    // record) proves nothing about reuse, so it leaves the process unverified.
    let (Some(recorded), Some(now)) = (start_ticks(recorded_start), start_ticks(&stat.start_token))
    else {
        return ProcessState::Unverified {
            reason: format!(
                "pid {pid} is alive but the record's start time {recorded_start:?} is not one \
                 this machine can compare"
            ),
        };
    };
    if recorded != now {
        return ProcessState::Gone {
            reason: reason_pid_reused(pid),
        };
    }
    ProcessState::Alive
}

/// A start token as the number it stands for, or `None` when it is not one this platform
/// writes. Tokens are compared as numbers: a writer might pad with zeros.
pub(crate) fn start_ticks(token: &str) -> Option<u64> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

enum Held {
    Yes,
    No,
    Unknown(Errno),
}

/// Layer 1's raw reading: `kill(pid, 0)`. EPERM still means a process holds the pid.
fn is_held(pid: Pid) -> Held {
    match rustix::process::test_kill_process(pid) {
        Ok(()) | Err(Errno::PERM) => Held::Yes,
        Err(Errno::SRCH) => Held::No,
        Err(errno) => Held::Unknown(errno),
    }
}

/// The two fields of `/proc/<pid>/stat` the layers need, taken from one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatFields {
    /// Field 3: `R`, `S`, `Z`, …
    pub(crate) state: char,
    /// Field 22: start time in clock ticks since boot, kept as text.
    pub(crate) start_token: String,
}

impl StatFields {
    /// A zombie (`Z`) or a dead task (`X`, `x`) will never answer; the spec counts it as no
    /// process.
    pub(crate) fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parse a `/proc/<pid>/stat` line.
///
/// The command name (field 2) is in parentheses and may itself hold spaces and `)`, so fields
/// are counted from the *last* `)`: after it come field 3 (state) … field 22 (start time).
pub(crate) fn parse_stat(line: &str) -> Option<StatFields> {
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
fn parse_stat_bytes(line: &[u8]) -> Option<StatFields> {
    let from_comm_end = line.iter().rposition(|b| *b == b')')?;
    parse_stat(std::str::from_utf8(&line[from_comm_end..]).ok()?)
}

/// How many listings of a zombie leader's tasks are read before the reading counts as failed.
/// A listing after the first is needed only when threads came and went while it was read.
const MAX_TASK_LISTINGS: usize = 32;

/// Whether any task of `pid`'s thread group is neither a zombie nor dead.
///
/// One listing cannot say "none": a listed thread may start another and exit before its stat
/// is read, and the thread it started is not in that listing. So "none" is answered only when
/// a listing names no task beyond an earlier listing whose tasks all read dead: any task live
/// when the later listing was taken would be in it, and was already dead.
fn live_threads_remain(pid: u32) -> std::io::Result<bool> {
    let mut dead_before: Option<BTreeSet<OsString>> = None;
    for _ in 0..MAX_TASK_LISTINGS {
        let Some(dead_now) = dead_tasks(pid)? else {
            return Ok(true);
        };
        if dead_before.is_some_and(|before| dead_now.is_subset(&before)) {
            return Ok(false);
        }
        dead_before = Some(dead_now);
    }
    Err(std::io::Error::other(
        "they kept changing while they were read",
    ))
}

/// The tasks `/proc/<pid>/task` lists now when every one reads dead or has exited; `None` as
/// soon as one reads live.
fn dead_tasks(pid: u32) -> std::io::Result<Option<BTreeSet<OsString>>> {
    let mut listed = BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        // Bytes, not a string: a thread may name itself with any bytes, and a name that is not
        // UTF-8 must not turn a live thread into an unreadable one.
        match std::fs::read(entry.path().join("stat")) {
            Ok(line) => {
                if parse_stat_bytes(&line).is_some_and(|task| !task.is_dead()) {
                    return Ok(None);
                }
            }
            Err(e) if task_exited(&e) => {}
            Err(e) => return Err(e),
        }
        listed.insert(entry.file_name());
    }
    Ok(Some(listed))
}

/// Whether reading a task's stat failed because the task exited while we looked: before the
/// open (ENOENT) or between the open and the read (ESRCH).
fn task_exited(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound
        || error.raw_os_error() == Some(Errno::SRCH.raw_os_error())
}

fn read_stat(pid: u32) -> std::io::Result<StatFields> {
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

/// Layer 2's reading: an opaque, platform-local token for when `pid`'s process started.
///
/// On Linux, field 22 of `/proc/<pid>/stat` (clock ticks since boot). `None` when it cannot be
/// read; a writer then records `""`, which never matches.
pub fn process_start_token(pid: u32) -> Option<String> {
    checked_pid(pid)?;
    read_stat(pid).ok().map(|stat| stat.start_token)
}

/// Whether the calling process has a controlling terminal, which decides `outlives_launcher`:
/// a capsule attached to a terminal dies with that window.
///
/// Opens `/dev/tty`, which succeeds exactly when there is one.
pub fn has_controlling_terminal() -> bool {
    rustix::fs::open(
        "/dev/tty",
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .is_ok()
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

    #[test]
    fn pids_no_process_can_hold_are_refused_before_any_syscall() {
        assert!(checked_pid(0).is_none());
        assert!(checked_pid(i32::MAX as u32 + 1).is_none());
        assert!(checked_pid(u32::MAX).is_none());
        assert!(checked_pid(1).is_some());
    }

    #[test]
    fn only_a_task_that_exited_is_skipped_as_exited() {
        let exited = [Errno::NOENT, Errno::SRCH];
        let unreadable = [Errno::ACCESS, Errno::PERM, Errno::IO, Errno::NOMEM];
        for errno in exited {
            assert!(task_exited(&errno.into()), "{errno:?}");
        }
        for errno in unreadable {
            assert!(!task_exited(&errno.into()), "{errno:?}");
        }
    }

    #[test]
    fn this_process_reads_its_own_token() {
        let token = process_start_token(std::process::id()).unwrap();
        assert!(token.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(state_of(std::process::id(), &token), ProcessState::Alive);
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
