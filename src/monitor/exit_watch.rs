//! The kernel's reports of pinned processes' exits ([`Registry::process_exits`]), handed to the
//! verification loop.
//!
//! The registry's [`ProcessExits`] is not `Send` (its epoll event buffer holds raw pointers),
//! while the loop is a spawned task that must be. So the watch runs on a blocking thread of the
//! runtime, awaiting the exits through the runtime's reactor, and forwards each batch over a
//! channel. If `ProcessExits` becomes `Send`, the loop can hold it directly and this file goes.
//!
//! Invariants:
//! - The watch lives as long as its receiver: the loop ending (or its runtime shutting down)
//!   ends it, whether or not an exit comes.
//! - No watch (no pidfds, no epoll) is a receiver that never yields: the periodic pass finds
//!   exits, as it did before pidfds.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::registry::{ExitedProcess, ProcessExits, Registry};

/// Batches of exits not yet taken by the loop; past it the watch waits (the kernel keeps them).
const BATCHES_WAITING: usize = 16;

/// The loop's end of the exit watch.
pub(super) struct ExitWatch {
    exits: mpsc::Receiver<Vec<ExitedProcess>>,
}

impl ExitWatch {
    /// Start watching the exits of the processes `registry` pins. Call it inside the runtime.
    pub(super) fn start(registry: Arc<Registry>) -> Self {
        let (sender, exits) = mpsc::channel(BATCHES_WAITING);
        tokio::task::spawn_blocking(move || {
            let Some(mut watch) = registry.process_exits() else {
                // Without pidfds, said once in the log by the registry; the sender drops.
                return;
            };
            tokio::runtime::Handle::current().block_on(forward(&mut watch, &sender));
        });
        Self { exits }
    }

    /// The next batch of exits; never resolves when there is no watch. Cancel-safe.
    pub(super) async fn next(&mut self) -> Vec<ExitedProcess> {
        match self.exits.recv().await {
            Some(exited) => exited,
            None => std::future::pending().await,
        }
    }
}

/// Hand every batch of exits to `sender` until its receiver is gone.
async fn forward(watch: &mut ProcessExits, sender: &mpsc::Sender<Vec<ExitedProcess>>) {
    loop {
        tokio::select! {
            () = sender.closed() => return,
            // Cancel-safe: exits are taken from the kernel only once `next` resolves.
            exited = watch.next() => {
                if sender.send(exited).await.is_err() {
                    return;
                }
            }
        }
    }
}
