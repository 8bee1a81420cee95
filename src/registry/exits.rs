//! The exits of pinned processes, as the kernel reports them: the epoll set of every held pidfd,
//! watched through the runtime's reactor, so a death is known without polling.
//!
//! Invariants kept here:
//! - An exit is a hint to read again, not a verdict: the caller re-reads the records naming the
//!   process ([`super::Registry::verify`]), whose pin then reads `Gone`, and anything
//!   removed is removed on the evidence rules of every other prune.
//! - Each pidfd is watched one-shot: its exit is reported once, and a process pinned again
//!   after a sweep is watched again.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::io::Errno;
use tokio::io::unix::AsyncFd;

use super::Registry;
use super::pins::{EXITS_PER_READ, Pins, take_ready};
use super::process_key::ExitedProcess;

/// The exit watch of one listener (the live view): [`ProcessExits::next`] waits for the next
/// exits of processes the registry holds pidfds for.
pub struct ProcessExits {
    /// A duplicate of the pins' epoll set, registered with the reactor (a duplicate, so that a
    /// watch ending while the next begins never registers one descriptor twice).
    epoll: AsyncFd<OwnedFd>,
    pins: Arc<Pins>,
}

impl std::fmt::Debug for ProcessExits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessExits").finish_non_exhaustive()
    }
}

impl Drop for ProcessExits {
    fn drop(&mut self) {
        self.pins.watching(false);
    }
}

impl ProcessExits {
    /// A watch of `epoll` (a duplicate of the pins' set), registered with the reactor.
    pub(super) fn over(epoll: OwnedFd, pins: Arc<Pins>) -> Option<Self> {
        // Registering needs a reactor; outside one, there is no watch to give.
        tokio::runtime::Handle::try_current().ok()?;
        // SAFETY: an `OwnedFd` is a valid open descriptor, always answers the same number, and
        // is closed only when the `AsyncFd` that owns it is dropped.
        let registered =
            unsafe { AsyncFd::register_with_interest(epoll, tokio::io::Interest::READABLE) };
        let epoll = registered
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch pidfd exits: exits are seen at the next pass");
            })
            .ok()?;
        pins.watching(true);
        Some(Self { epoll, pins })
    }

    /// The processes that exited since the last call, at least one; waits until there is one.
    ///
    /// Cancel-safe: exits are taken from the kernel only after the wait, in one step.
    pub async fn next(&mut self) -> Vec<ExitedProcess> {
        loop {
            // Exits a reading saw first: it closed their pidfds, and the kernel's reports with
            // them.
            let closed = self.pins.take_closed_exits();
            if !closed.is_empty() {
                return closed;
            }
            let ready = tokio::select! {
                ready = self.epoll.readable() => ready,
                () = self.pins.exit_closed() => continue,
            };
            let Ok(mut ready) = ready else {
                // The reactor is gone (the runtime is shutting down): no exit will come.
                return std::future::pending().await;
            };
            let ids = match take_ready(ready.get_inner()) {
                Ok(ids) => ids,
                Err(Errno::INTR) => continue,
                Err(errno) => {
                    tracing::warn!(%errno, "cannot read pidfd exits: exits are seen at the next pass");
                    return std::future::pending().await;
                }
            };
            // A full read may have left exits behind: stay ready for them.
            if ids.len() < EXITS_PER_READ {
                ready.clear_ready();
            }
            let exited = self.pins.exited(ids.into_iter());
            if !exited.is_empty() {
                return exited;
            }
        }
    }
}

impl Registry {
    /// A watch of the exits of the processes this registry pins, for a live view that wants
    /// them at once; `None` where pidfds or epoll are unavailable (a reading then finds an exit
    /// when it next looks). Call it inside the runtime.
    pub fn process_exits(&self) -> Option<ProcessExits> {
        let epoll = self.reader.pins.epoll()?.try_clone().ok()?;
        ProcessExits::over(epoll, Arc::clone(&self.reader.pins))
    }
}
