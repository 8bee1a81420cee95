//! The thread the live view's loops run on: a runtime of one thread per monitor, so that a loop,
//! its door probes, their connections and its timers all wake that one thread, instead of
//! handing work back and forth between the server's workers (on an idle registry, those
//! wake-ups cost about as much as the probes themselves).
//!
//! Invariants:
//! - One thread per monitor, started with its first loop and ending once the monitor is gone:
//!   a task a loop started (a door probe a listing shares) runs to its end on it, whatever the
//!   loop does meanwhile.
//! - A loop always runs: where the thread cannot be had, it runs on the caller's runtime.
//! - A caller on a runtime of one thread already has everything on one thread: its loops run
//!   there, as they always did, with no thread of their own.

use std::pin::Pin;

use tokio::sync::mpsc;

/// A loop, ready to run.
pub(super) type LoopTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a monitor's loops run; the thread is started with the first one.
#[derive(Debug, Default)]
pub(super) struct LoopThread {
    loops: Option<mpsc::UnboundedSender<LoopTask>>,
}

impl LoopThread {
    /// Run `task` on the thread, starting it if it is not running; on the caller's runtime if
    /// that has one thread, or if the thread cannot be started. Call it inside a runtime.
    pub(super) fn run(&mut self, task: LoopTask) {
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        if flavor == tokio::runtime::RuntimeFlavor::CurrentThread {
            tokio::spawn(task);
            return;
        }
        let task = match &self.loops {
            Some(loops) => match loops.send(task) {
                Ok(()) => return,
                // The thread is gone (it cannot end while this sender lives, unless it
                // panicked): start another.
                Err(mpsc::error::SendError(task)) => task,
            },
            None => task,
        };
        self.loops = start();
        let task = match &self.loops {
            Some(loops) => match loops.send(task) {
                Ok(()) => return,
                Err(mpsc::error::SendError(task)) => task,
            },
            None => task,
        };
        tokio::spawn(task);
    }
}

/// Start the thread and its runtime; `None` (with a warning) if either cannot be had.
fn start() -> Option<mpsc::UnboundedSender<LoopTask>> {
    let (loops, mut received) = mpsc::unbounded_channel::<LoopTask>();
    let (built, was_built) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("live-view".to_owned())
        .spawn(move || {
            // Built here, not handed in: a spawn that fails drops its closure on the caller's
            // async worker, and a runtime dropped there panics.
            let built_now = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let runtime = match built_now {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = built.send(Err(error));
                    return;
                }
            };
            let _ = built.send(Ok(()));
            // Until the monitor is gone: its sender goes with it.
            runtime.block_on(async move {
                while let Some(task) = received.recv().await {
                    tokio::spawn(task);
                }
            });
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the live view's thread; it shares the server's");
        return None;
    }
    // Waits for the runtime to be built only (well under a millisecond): a loop sent to a
    // thread whose runtime failed would be lost.
    match was_built.recv() {
        Ok(Ok(())) => Some(loops),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot start the live view's runtime; it shares the server's");
            None
        }
        Err(_) => {
            tracing::warn!("the live view's thread ended before its runtime was built");
            None
        }
    }
}
