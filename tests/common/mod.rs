//! Shared fixtures for the integration tests: real files, real processes, real sockets. Use it
//! from a test file with `mod common;`, then `use common::*;` (or by name).
//!
//! One topic a file; every name is re-exported here, so `common::RecordJson` and the like work
//! wherever the item lives:
//!
//! - [`files`]: private temporary directories, raw writes, FIFOs, directory snapshots.
//! - [`records`]: session ids shaped like murmur's, and record files ([`RecordJson`]) as murmur
//!   writes them or as no murmur would.
//! - [`processes`]: live children ([`TestProcess::sleeping`], `::ignoring_term`,
//!   `::zombie_leader`, `::uid_flipping` …), a [`Zombie`], an [`ExitedChild`], a real
//!   [`CapsuleProcess`] serving doors, and `/proc` readers.
//! - [`doors`]: [`DoorServer`], a hand-written door in one of the [`DoorMode`]s.
//! - [`served`]: [`ServedBinary`], the `murmur-registry serve` process and the address its
//!   first line names (the bench runs it through the same file).
//! - [`binary`]: the binary's command line for a test (a private `HOME`, run as which user).
//! - [`capsules`]: `tests/fixtures/capsule.py` started for the soaks ([`capsules::SoakCapsule`]),
//!   its signal log, the soaks' seeded [`capsules::Rng`] (the bench's `chaos` uses it too).
//! - [`server`]: the real app served in-process ([`server::TestServer`]).
//! - [`steps`]: named steps for long scenarios, so a failure says which step.
//! - [`sse`]: an [`EventStream`] reading `/events` or `/fleet/events` event by event, through
//!   the one [`SseParser`] that checks every event against the stream contract.
//! - [`etcd`] (feature `fleet`): real etcd servers and clusters on free loopback ports.
//! - [`fleet_sim`] (feature `fleet`): simulated hosts publishing through the real `Publisher`.
//! - [`fleet_members`] (feature `fleet`): a fleet host's `serve` command, the
//!   [`fleet_members::Picture`] a member serves, and polling a member until it serves what is
//!   wanted.
//! - [`netns`]: a host behind a router in network namespaces of its own, cut off and healed
//!   there (needs root and `ip`).
//!
//! Invariants: every test builds its own world from these pieces and tears it down on drop;
//! nothing reads `HOME` or touches `~/.murmur`. Waiting is by evidence, never by sleeping: a
//! state is polled under a generous deadline ([`wait_until`], [`within`], [`DEADLINE`]).
//! Fixtures that need root say so (`chown` to another uid, `setpriv`); the tests using them
//! are `#[ignore = "needs root: …"]`, so plain `cargo test` passes as any user.

// Each test binary uses its own subset of these fixtures.
#![allow(dead_code, unused_imports)]

use std::time::{Duration, Instant};

pub mod binary;
pub mod capsules;
#[cfg(feature = "fleet")]
pub mod certs;
pub mod doors;
#[cfg(feature = "fleet")]
pub mod etcd;
pub mod files;
#[cfg(feature = "fleet")]
pub mod fleet_members;
#[cfg(feature = "fleet")]
pub mod fleet_sim;
pub mod netns;
pub mod pidfds;
pub mod processes;
pub mod records;
pub mod served;
pub mod server;
pub mod sse;
pub mod steps;

pub use doors::*;
pub use files::*;
pub use processes::*;
pub use records::*;
pub use served::ServedBinary;
pub use sse::*;

/// The upper bound for anything a test waits on. Generous on purpose: it is never how long a
/// test takes, only how long a broken one takes to fail instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Poll `done` until it holds, panicking with `what` after `deadline`. The pause between polls
/// only paces the loop; correctness never depends on it.
pub fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < deadline,
            "gave up after {deadline:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Run `f` on its own thread and answer its result, failing the test if it takes longer than
/// `deadline` (for calls that would hang if the code under test were wrong, e.g. opening a FIFO).
pub fn within<T: Send + 'static>(
    what: &str,
    deadline: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(deadline) {
        Ok(value) => value,
        Err(e) => panic!("{what} did not finish within {deadline:?}: {e}"),
    }
}

/// The word a value is on the wire (its JSON string), e.g. `live` for `SessionState::Live`;
/// empty if it does not serialize to a string.
pub fn wire_word(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|word| word.as_str().map(str::to_owned))
        .unwrap_or_default()
}
