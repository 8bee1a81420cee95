//! Whether a periodic pass reads the directory again, or judges afresh the records the last read
//! found: with an unbroken watch on a local filesystem, a directory nothing nudged about is the
//! directory last read, and reading it again (an `lstat` of every record) finds nothing new.
//!
//! Invariants:
//! - Pure: the loop tells what it knows; nothing here looks at the directory or the watch.
//! - Only a periodic pass may skip the read, and only while the watch vouches for the time
//!   since the last read: every change since then has nudged, and a nudged pass reads. (A
//!   nudge still on its way, or a change no watch sees, is caught by the loop: a pass that
//!   skipped the read and finds a record gone reads the directory when its file changed.)
//! - A read is never skipped after a pass that failed to read, and never more than
//!   [`READ_AT_LEAST_EVERY`] − 1 periodic passes in a row: what no watch reports (the directory
//!   made unreachable above it, a watch broken in a way it cannot tell) is still seen within
//!   that many intervals.

/// A periodic pass reads the directory at least once in this many, whatever the watch says: 10 s
/// at the default 2 s interval, one door recheck.
pub(super) const READ_AT_LEAST_EVERY: u32 = 5;

/// What the loop knows, at a periodic pass, about the time since the directory was last read.
#[derive(Debug, Clone, Copy)]
pub(super) struct SinceLastRead {
    /// The watch that was running then still runs, unbroken, on the same directory, on a
    /// filesystem whose every change it sees (`Registry::watch_sees_every_change`).
    pub(super) watch_unbroken: bool,
    /// The last pass (periodic or nudged) read the directory successfully.
    pub(super) last_read_succeeded: bool,
}

/// When the loop reads the directory.
#[derive(Debug)]
pub(super) struct Rescans {
    /// Periodic passes since the directory was last read.
    skipped: u32,
    every: u32,
}

impl Default for Rescans {
    fn default() -> Self {
        Self::every(READ_AT_LEAST_EVERY)
    }
}

impl Rescans {
    /// Read at least once in `every` periodic passes (at least 1: every one).
    pub(super) fn every(every: u32) -> Self {
        Self {
            skipped: 0,
            every: every.max(1),
        }
    }

    /// Whether the periodic pass starting now reads the directory; counts it as made either way.
    pub(super) fn periodic_reads(&mut self, since: SinceLastRead) -> bool {
        let read =
            !since.watch_unbroken || !since.last_read_succeeded || self.skipped + 1 >= self.every;
        if read {
            self.skipped = 0;
        } else {
            self.skipped += 1;
        }
        read
    }

    /// A pass (nudged or first) read the directory.
    pub(super) fn read(&mut self) {
        self.skipped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: SinceLastRead = SinceLastRead {
        watch_unbroken: true,
        last_read_succeeded: true,
    };

    fn reads(rescans: &mut Rescans, since: SinceLastRead, passes: usize) -> Vec<bool> {
        (0..passes).map(|_| rescans.periodic_reads(since)).collect()
    }

    #[test]
    fn a_quiet_directory_under_an_unbroken_watch_is_read_once_in_every_few_passes() {
        let mut rescans = Rescans::every(3);
        assert_eq!(
            reads(&mut rescans, QUIET, 7),
            [false, false, true, false, false, true, false]
        );
    }

    #[test]
    fn a_nudged_read_starts_the_count_again() {
        let mut rescans = Rescans::every(3);
        assert_eq!(reads(&mut rescans, QUIET, 2), [false, false]);
        rescans.read();
        assert_eq!(reads(&mut rescans, QUIET, 3), [false, false, true]);
    }

    #[test]
    fn every_pass_reads_without_an_unbroken_watch_or_after_a_failed_read() {
        let mut rescans = Rescans::default();
        let broken = SinceLastRead {
            watch_unbroken: false,
            ..QUIET
        };
        let failed = SinceLastRead {
            last_read_succeeded: false,
            ..QUIET
        };
        assert_eq!(reads(&mut rescans, broken, 3), [true; 3]);
        assert_eq!(reads(&mut rescans, failed, 3), [true; 3]);
        assert!(!rescans.periodic_reads(QUIET), "and skips again once quiet");
    }

    #[test]
    fn every_one_reads_every_pass() {
        let mut rescans = Rescans::every(1);
        assert_eq!(reads(&mut rescans, QUIET, 3), [true; 3]);
        assert_eq!(reads(&mut Rescans::every(0), QUIET, 2), [true; 2]);
    }
}
