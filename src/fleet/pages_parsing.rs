//! The pages of a cold read being parsed on the blocking pool while etcd serves the next.
//!
//! Invariants: pages come back in the order they were handed in, so the cache is the one the
//! pages taken in turn make; at most one a core (and 8) are parsing at once; dropped with its
//! read (a failed page, the read's future dropped), it cancels the parses not yet begun, as
//! [`super::etcd`]'s asked pages abandon their requests.

use std::collections::VecDeque;
use std::sync::LazyLock;

use tokio::task::JoinHandle;

use super::cache::ParsedPage;
use super::etcd::ReadFailed;

/// The parses of one read, oldest first.
#[derive(Default)]
pub(crate) struct PagesParsing(VecDeque<JoinHandle<ParsedPage>>);

impl PagesParsing {
    /// How many pages are parsed at once: one a core, as parsing is most of a read's work (at
    /// 100,000 sessions on 2 cores, one page at a time left the cores idle 40 % of the read:
    /// see benches/README.md); pages beyond that would only wait, held in memory. At most 8,
    /// so that a read on a many-core machine leaves the blocking pool (32 threads) to requests.
    const AT_ONCE_MOST: usize = 8;

    /// Parse `page` on the blocking pool.
    pub(crate) fn push(&mut self, page: impl FnOnce() -> ParsedPage + Send + 'static) {
        self.0.push_back(tokio::task::spawn_blocking(page));
    }

    /// Whether as many pages are parsing as may be at once.
    pub(crate) fn full(&self) -> bool {
        self.0.len() >= *AT_ONCE
    }

    /// The oldest page, once parsed; `None` when none is left.
    pub(crate) async fn oldest(&mut self) -> Option<Result<ParsedPage, ReadFailed>> {
        let parsing = self.0.front_mut()?;
        let parsed = match parsing.await {
            Ok(page) => Ok(page),
            Err(failed) => match failed.try_into_panic() {
                // A bug in the parse, carried on as if the parse had run on this task.
                Ok(panic) => std::panic::resume_unwind(panic),
                // Only a runtime shutting down cancels a blocking task once begun.
                Err(_) => Err(ReadFailed::Stopped),
            },
        };
        self.0.pop_front();
        Some(parsed)
    }
}

impl Drop for PagesParsing {
    fn drop(&mut self) {
        for parsing in &self.0 {
            parsing.abort();
        }
    }
}

/// [`PagesParsing::AT_ONCE_MOST`] or the cores, whichever is fewer; read once, as the count
/// comes from cgroup files.
static AT_ONCE: LazyLock<usize> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    cores.min(PagesParsing::AT_ONCE_MOST)
});

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};

    use super::*;
    use crate::fleet::cache::ColdRead;
    use crate::fleet::keys::FleetKeys;

    /// Pages of one host key, page `n` giving version `n`: the cache keeps the last page's
    /// version only if the pages are taken in in the order handed in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_are_taken_in_the_order_handed_in_though_they_finish_in_reverse() {
        const PAGES: usize = 6;
        let keys = FleetKeys::new("/p");
        let mut parsing = PagesParsing::default();
        // Page n finishes only after page n + 1 has: the last finishes first.
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..PAGES).map(|_| mpsc::channel()).unzip();
        // Page n + 1 tells page n on channel n; the first page tells no one.
        let mut tells: Vec<_> = senders.into_iter().map(Some).collect();
        tells.pop();
        tells.insert(0, None);
        for (n, (wait_for, done)) in receivers.into_iter().zip(tells).enumerate() {
            let keys = keys.clone();
            parsing.push(move || {
                if n + 1 < PAGES {
                    wait_for.recv().expect("the next page finished");
                }
                let value = format!(
                    r#"{{"host_id":"h","version":"{n}","started_at":"t","registry_url":null}}"#
                );
                let page = ParsedPage::of(&keys, [(b"/p/hosts/h".as_slice(), value.as_bytes())]);
                if let Some(done) = done {
                    let _ = done.send(());
                }
                page
            });
        }
        let mut read = ColdRead::new(keys, 1);
        while let Some(page) = parsing.oldest().await {
            read.take(page.expect("parsed"));
        }
        let (cache, skipped) = read.finish();
        assert!(skipped.is_empty(), "{skipped:?}");
        let versions: Vec<&str> = cache.hosts().map(|h| h.version.as_str()).collect();
        assert_eq!(versions, [(PAGES - 1).to_string()]);
    }

    /// With one blocking thread, held by the first page: the second is queued when the read
    /// is dropped, and is never parsed.
    #[test]
    fn a_dropped_read_cancels_the_parses_not_begun() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .build()
            .expect("a runtime");
        let parsed_second = Arc::new(AtomicBool::new(false));
        let (release, held) = mpsc::channel::<()>();
        runtime.block_on(async {
            let mut parsing = PagesParsing::default();
            parsing.push(move || {
                held.recv().expect("released");
                ParsedPage::default()
            });
            let parsed = parsed_second.clone();
            parsing.push(move || {
                parsed.store(true, Ordering::SeqCst);
                ParsedPage::default()
            });
            drop(parsing);
            release.send(()).expect("the first page waits");
            // Queued after the second on the one thread: once it has run, the second would
            // have too.
            tokio::task::spawn_blocking(|| ()).await.expect("ran");
        });
        assert!(!parsed_second.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panicking_parse_panics_the_read_that_takes_it() {
        let mut parsing = PagesParsing::default();
        parsing.push(|| panic!("a bug in the parse"));
        let taken = tokio::spawn(async move { parsing.oldest().await.map(|p| p.is_ok()) });
        let failed = taken.await.expect_err("the panic carried on");
        assert!(failed.is_panic());
    }
}
