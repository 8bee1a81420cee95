//! Directory passes shared by the listings that ask for one at the same moment.
//!
//! A pass is one scan of the running directory with layers 1–2 read for every record. When
//! many clients list at once (dashboards and agents polling), each doing its own pass would
//! read the same files and the same `/proc` entries side by side; here, the listings that
//! arrive while a pass is running wait for the *next* one and all take its result.
//!
//! Invariants kept here:
//! - Nobody is answered with a reading older than their question: a caller takes the result of
//!   a pass only if that pass started after the caller arrived. A caller that arrives while a
//!   pass runs never joins it (it may have read the directory already); it waits for the pass
//!   after, which one of the waiters starts as soon as the running one ends. So sharing makes
//!   no answer staler than a pass of the caller's own, and nothing is cached: a result is
//!   handed only to callers that were already waiting when it was published, and let go of
//!   when the last of them has taken it.
//! - At most one pass runs at a time, so concurrent listings cost one pass in flight plus one
//!   waiting, whatever their number.
//! - A leader that goes away mid-pass (its client hung up) hands over: the pass is marked
//!   ended without a result and the waiters wake, so one of them leads a pass of its own.
//!   Nobody waits on a pass that nobody runs.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Passes over one directory, one at a time, each result shared by everyone who waited for it.
pub(super) struct SharedPasses<T> {
    state: Mutex<State<T>>,
    /// Woken whenever a pass ends, with a result or abandoned.
    ended: Notify,
}

struct State<T> {
    /// Whether a pass is running now.
    running: bool,
    /// How many passes have started; the running one (if any) is number `started`.
    started: u64,
    /// Callers waiting for a pass to end (not the one running it).
    waiting: usize,
    /// The newest pass's number and result, while callers wait that may take it.
    latest: Option<(u64, T)>,
}

impl<T> Default for SharedPasses<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                running: false,
                started: 0,
                waiting: 0,
                latest: None,
            }),
            ended: Notify::new(),
        }
    }
}

impl<T> std::fmt::Debug for SharedPasses<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("SharedPasses")
            .field("running", &state.running)
            .field("started", &state.started)
            .finish()
    }
}

impl<T: Clone> SharedPasses<T> {
    /// The result of a pass that starts no earlier than this call: `pass` run now if no pass
    /// is running, else the result of the next pass, which this caller may end up running.
    ///
    /// `pass` is run at most once, by this caller, and only when this caller leads.
    pub(super) async fn run<F, Fut>(&self, pass: F) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        // Any pass numbered above the ones started so far starts after this moment.
        let first_acceptable = self.lock().started + 1;
        let mut waiter = Waiter {
            passes: self,
            counted: false,
        };
        loop {
            // Registered before the state is read, so an end published in between still wakes us.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let step = {
                let mut state = self.lock();
                match &state.latest {
                    Some((number, result)) if *number >= first_acceptable => {
                        Step::Take(result.clone())
                    }
                    _ if state.running => {
                        if !waiter.counted {
                            waiter.counted = true;
                            state.waiting += 1;
                        }
                        Step::Wait
                    }
                    _ => {
                        state.running = true;
                        state.started += 1;
                        Step::Lead(state.started)
                    }
                }
            };
            match step {
                Step::Take(result) => return result,
                Step::Wait => ended.await,
                Step::Lead(number) => {
                    // A leader waits no more: the result it makes needs no keeping for it.
                    drop(waiter);
                    let mut lead = Lead {
                        passes: self,
                        number,
                        result: None,
                    };
                    let result = pass().await;
                    lead.result = Some(result.clone());
                    drop(lead);
                    return result;
                }
            }
        }
    }
}

impl<T> SharedPasses<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // No code that can panic runs under the lock while the state is half-written, so a
        // poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a caller does next.
enum Step<T> {
    /// A pass that started after the caller arrived has ended: its result is the answer.
    Take(T),
    /// A pass is running: wait for it to end.
    Wait,
    /// No pass is running: run pass number `.0`.
    Lead(u64),
}

/// A caller counted among the waiting until it leaves, however it leaves (answered, leading,
/// or dropped by its own caller). The last one to leave lets go of the latest result.
struct Waiter<'a, T> {
    passes: &'a SharedPasses<T>,
    counted: bool,
}

impl<T> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut state = self.passes.lock();
        state.waiting -= 1;
        if state.waiting == 0 {
            state.latest = None;
        }
    }
}

/// The running pass, ended when dropped: published if it has a result, else abandoned.
struct Lead<'a, T> {
    passes: &'a SharedPasses<T>,
    number: u64,
    result: Option<T>,
}

impl<T> Drop for Lead<'_, T> {
    fn drop(&mut self) {
        {
            let mut state = self.passes.lock();
            state.running = false;
            // Only callers already waiting may take it; with none, nothing is kept.
            if state.waiting > 0
                && let Some(result) = self.result.take()
            {
                state.latest = Some((self.number, result));
            }
        }
        self.passes.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn a_lone_caller_runs_its_own_pass_every_time() {
        let passes = SharedPasses::<u64>::default();
        let runs = AtomicU64::new(0);
        for expected in 1..=3 {
            let got = passes
                .run(|| async { runs.fetch_add(1, Ordering::SeqCst) + 1 })
                .await;
            assert_eq!(got, expected, "no result is reused for a later caller");
        }
        assert!(
            passes.lock().latest.is_none(),
            "nobody waited: nothing is kept"
        );
    }

    #[tokio::test]
    async fn callers_arriving_during_a_pass_share_the_next_one_not_the_running_one() {
        let passes = Arc::new(SharedPasses::<&'static str>::default());
        let (release, hold) = oneshot::channel::<()>();
        let (started, running) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let passes = Arc::clone(&passes);
            async move {
                passes
                    .run(|| async move {
                        let _ = started.send(());
                        let _ = hold.await;
                        "first"
                    })
                    .await
            }
        });
        running.await.expect("the first pass started");
        let runs = Arc::new(AtomicU64::new(0));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let passes = Arc::clone(&passes);
                let runs = Arc::clone(&runs);
                tokio::spawn(async move {
                    passes
                        .run(|| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            "second"
                        })
                        .await
                })
            })
            .collect();
        // The test runtime has one thread: yielding lets every spawned waiter run up to its
        // wait, so all of them arrive before the first pass ends.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        release.send(()).expect("the first pass waits");
        assert_eq!(leader.await.expect("leader"), "first");
        for waiter in waiters {
            assert_eq!(waiter.await.expect("waiter"), "second");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the waiters shared one pass"
        );
        let state = passes.lock();
        assert_eq!(state.waiting, 0);
        assert!(state.latest.is_none(), "no result is kept once taken");
    }

    #[tokio::test]
    async fn a_leader_that_goes_away_hands_the_pass_to_a_waiter() {
        let passes = Arc::new(SharedPasses::<&'static str>::default());
        let (started, running) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let passes = Arc::clone(&passes);
            async move {
                passes
                    .run(|| async move {
                        let _ = started.send(());
                        std::future::pending::<&'static str>().await
                    })
                    .await
            }
        });
        running.await.expect("the first pass started");
        let waiter = tokio::spawn({
            let passes = Arc::clone(&passes);
            async move { passes.run(|| async { "own" }).await }
        });
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        leader.abort();
        assert!(leader.await.expect_err("aborted").is_cancelled());
        assert_eq!(waiter.await.expect("waiter"), "own");
        assert!(!passes.lock().running, "no pass is left marked running");
    }
}
