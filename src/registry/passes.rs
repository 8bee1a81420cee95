//! Directory passes shared by the listings that ask for one at the same moment. A pass is one
//! scan of the running directory with layers 1–2 read for every record.
//!
//! Invariants kept here:
//! - No answer is older than its question: a caller takes only the result of a pass that
//!   started after it arrived; one arriving mid-pass waits for the next pass and shares it.
//! - Nothing is cached: a result is held only while its waiters take it, then let go.
//! - At most one pass runs at a time, as a task of its own, to its end, whoever started it: a
//!   caller that goes away takes nothing from those still waiting.
//! - A pass that panics ends with the failure its caller supplied, so its waiters are answered.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::FutureExt;
use tokio::sync::Notify;

/// Passes over one directory, one at a time, each result shared by everyone who waited for it.
pub(super) struct SharedPasses<T> {
    state: Mutex<State<T>>,
    /// Woken whenever a pass ends.
    ended: Notify,
}

struct State<T> {
    /// Whether a pass is running now.
    running: bool,
    /// How many passes have started; the running one (if any) is number `started`.
    started: u64,
    /// Callers waiting for a pass to end.
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
            .field("waiting", &state.waiting)
            .finish()
    }
}

impl<T: Clone + Send + 'static> SharedPasses<T> {
    /// The result of a pass that starts no earlier than this call: one started now if no pass
    /// is running, else the next one, started as soon as the running one ends.
    ///
    /// `pass` makes the pass when this caller is the one to start it; it runs as a task of its
    /// own. `failed` makes the result of a pass that panicked, from the panic's message.
    pub(super) async fn run<Fut>(
        self: &Arc<Self>,
        pass: impl Fn() -> Fut,
        failed: fn(String) -> T,
    ) -> T
    where
        Fut: Future<Output = T> + Send + 'static,
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
            let lead = {
                let mut state = self.lock();
                if let Some((number, result)) = &state.latest
                    && *number >= first_acceptable
                {
                    return result.clone();
                }
                if !waiter.counted {
                    waiter.counted = true;
                    state.waiting += 1;
                }
                if state.running {
                    None
                } else {
                    state.running = true;
                    state.started += 1;
                    // Made under the lock, so the pass is marked ended whatever happens next.
                    Some(Lead {
                        passes: Arc::clone(self),
                        number: state.started,
                        result: None,
                    })
                }
            };
            if let Some(lead) = lead {
                let work = pass();
                tokio::spawn(async move {
                    let result = AssertUnwindSafe(work)
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|panic| failed(panic_message(panic.as_ref())));
                    lead.publish(result);
                });
            }
            ended.await;
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

/// What a panic said, for the failure its pass ends with.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a directory pass panicked".to_owned())
}

/// A caller counted among the waiting until it leaves, however it leaves (answered, or dropped
/// by its own caller). The last one to leave lets go of the latest result.
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

/// The running pass, ended when dropped: its result published if it has one (it has none
/// only if its task was dropped unfinished, as when the runtime shuts down).
struct Lead<T> {
    passes: Arc<SharedPasses<T>>,
    number: u64,
    result: Option<T>,
}

impl<T> Lead<T> {
    /// End the pass with `result`.
    fn publish(mut self, result: T) {
        self.result = Some(result);
        // Dropped here: the end is published by `drop`, which also covers a pass that never
        // gets this far.
    }
}

impl<T> Drop for Lead<T> {
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
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    fn failed(why: String) -> String {
        format!("failed: {why}")
    }

    /// A pass that counts how many passes started and answers `answer` once `release` fires.
    fn held(
        runs: &Arc<AtomicU64>,
        release: &Arc<tokio::sync::Semaphore>,
        answer: &'static str,
    ) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = String> + Send>> + Send + use<> {
        let (runs, release) = (Arc::clone(runs), Arc::clone(release));
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
            let release = Arc::clone(&release);
            Box::pin(async move {
                let _held = release.acquire().await;
                answer.to_owned()
            })
        }
    }

    /// Let every spawned task run up to where it waits (the test runtime has one thread).
    async fn settle() {
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_caller_runs_its_own_pass_every_time() {
        let passes = Arc::new(SharedPasses::<String>::default());
        let runs = Arc::new(AtomicU64::new(0));
        for expected in 1..=3 {
            let runs = Arc::clone(&runs);
            let got = passes
                .run(
                    move || {
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        async move { n.to_string() }
                    },
                    failed,
                )
                .await;
            assert_eq!(got, expected.to_string(), "no result is reused");
        }
        assert!(passes.lock().latest.is_none(), "nothing is kept");
    }

    #[tokio::test]
    async fn callers_arriving_during_a_pass_share_the_next_one_not_the_running_one() {
        let passes = Arc::new(SharedPasses::<String>::default());
        let runs = Arc::new(AtomicU64::new(0));
        let first_gate = Arc::new(tokio::sync::Semaphore::new(0));
        let open = Arc::new(tokio::sync::Semaphore::new(100));
        let leader = tokio::spawn({
            let (passes, pass) = (Arc::clone(&passes), held(&runs, &first_gate, "first"));
            async move { passes.run(pass, failed).await }
        });
        settle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the first pass started");
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (passes, pass) = (Arc::clone(&passes), held(&runs, &open, "second"));
                tokio::spawn(async move { passes.run(pass, failed).await })
            })
            .collect();
        settle().await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "nobody starts a pass beside it"
        );
        first_gate.add_permits(1);
        assert_eq!(leader.await.expect("leader"), "first");
        for waiter in waiters {
            assert_eq!(waiter.await.expect("waiter"), "second");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the waiters shared one pass"
        );
        let state = passes.lock();
        assert_eq!(state.waiting, 0);
        assert!(state.latest.is_none(), "no result is kept once taken");
    }

    #[tokio::test]
    async fn a_pass_outlives_the_caller_that_started_it_and_is_never_run_twice_at_once() {
        let passes = Arc::new(SharedPasses::<String>::default());
        let runs = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let leader = tokio::spawn({
            let (passes, pass) = (Arc::clone(&passes), held(&runs, &gate, "first"));
            async move { passes.run(pass, failed).await }
        });
        settle().await;
        let waiter = tokio::spawn({
            let (passes, pass) = (Arc::clone(&passes), held(&runs, &gate, "second"));
            async move { passes.run(pass, failed).await }
        });
        settle().await;
        leader.abort();
        assert!(leader.await.expect_err("aborted").is_cancelled());
        settle().await;
        assert!(passes.lock().running, "the pass runs on without its caller");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "and nobody starts another beside it"
        );
        gate.add_permits(2);
        assert_eq!(waiter.await.expect("waiter"), "second");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(!passes.lock().running);
    }

    #[tokio::test]
    async fn a_pass_that_panics_answers_its_waiters_with_the_failure() {
        let passes = Arc::new(SharedPasses::<String>::default());
        // Bounded: a panic that ended the pass without an answer would have the caller start
        // it again and again, and the test would hang instead of failing.
        let got = tokio::time::timeout(
            Duration::from_secs(10),
            passes.run(
                || async {
                    panic!("the disk caught fire");
                    #[allow(unreachable_code)]
                    String::new()
                },
                failed,
            ),
        )
        .await
        .expect("a panicking pass answers");
        assert_eq!(got, "failed: the disk caught fire");
        assert!(!passes.lock().running, "the pass is over");
        let again = passes.run(|| async { "fine".to_owned() }, failed).await;
        assert_eq!(again, "fine", "the next caller runs a pass of its own");
    }
}
