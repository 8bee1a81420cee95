//! The bound on MCP sessions (`--max-mcp-sessions`): rmcp's own session store, with room made
//! before each new session by closing the oldest idle one.
//!
//! Invariants kept here:
//! - At most the bound's sessions exist once a new one is made: a client that opens sessions
//!   and never closes them costs at most that many, never more.
//! - The session closed to make room is the one used least recently among those with no open
//!   stream; only when every session holds a stream is the least recently used one closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionManager};

/// rmcp's local sessions, at most `limit` of them.
#[derive(Debug)]
pub(super) struct BoundedSessions {
    inner: LocalSessionManager,
    limit: usize,
    use_of: Arc<Mutex<HashMap<SessionId, Use>>>,
}

/// When a session was last asked for something, and how many streams it holds open.
#[derive(Debug, Clone, Copy)]
struct Use {
    last: Instant,
    streams: usize,
}

impl BoundedSessions {
    /// A store keeping at most `limit` sessions (at least one).
    pub(super) fn new(limit: usize) -> Self {
        Self {
            inner: LocalSessionManager::default(),
            limit: limit.max(1),
            use_of: Arc::default(),
        }
    }

    fn uses(&self) -> MutexGuard<'_, HashMap<SessionId, Use>> {
        lock(&self.use_of)
    }

    /// Note that `id` was asked for something now.
    fn touch(&self, id: &SessionId) {
        if let Some(used) = self.uses().get_mut(id) {
            used.last = Instant::now();
        }
    }

    /// Close sessions until one more fits under the bound.
    async fn make_room(&self) -> Result<(), LocalSessionManagerError> {
        loop {
            let live: Vec<SessionId> = self.inner.sessions.read().await.keys().cloned().collect();
            if live.len() < self.limit {
                return Ok(());
            }
            let victim = {
                let mut uses = self.uses();
                // Sessions that ended on their own (idle timeout, DELETE) are forgotten here.
                uses.retain(|id, _| live.contains(id));
                oldest_idle(&uses, &live)
            };
            let Some(victim) = victim else {
                return Ok(());
            };
            tracing::info!(
                limit = self.limit,
                "closing the least recently used MCP session to make room (--max-mcp-sessions)"
            );
            lock(&self.use_of).remove(&victim);
            self.inner.close_session(&victim).await?;
        }
    }
}

/// The session to close for room: the least recently used without a stream, else the least
/// recently used. Sessions never seen here (none, in practice) count as the oldest.
fn oldest_idle(uses: &HashMap<SessionId, Use>, live: &[SessionId]) -> Option<SessionId> {
    let age = |id: &SessionId| uses.get(id).map(|used| used.last);
    let idle = live
        .iter()
        .filter(|id| uses.get(*id).is_none_or(|used| used.streams == 0))
        .min_by_key(|id| age(id));
    idle.or_else(|| live.iter().min_by_key(|id| age(id)))
        .cloned()
}

fn lock(uses: &Mutex<HashMap<SessionId, Use>>) -> MutexGuard<'_, HashMap<SessionId, Use>> {
    // A panic under this lock leaves only counters behind: they stay usable.
    uses.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts one open stream of a session for as long as it lives.
#[derive(Debug)]
struct OpenStream {
    id: SessionId,
    use_of: Arc<Mutex<HashMap<SessionId, Use>>>,
}

impl OpenStream {
    fn new(id: &SessionId, use_of: &Arc<Mutex<HashMap<SessionId, Use>>>) -> Self {
        if let Some(used) = lock(use_of).get_mut(id) {
            used.streams += 1;
            used.last = Instant::now();
        }
        Self {
            id: id.clone(),
            use_of: Arc::clone(use_of),
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Some(used) = lock(&self.use_of).get_mut(&self.id) {
            used.streams = used.streams.saturating_sub(1);
            used.last = Instant::now();
        }
    }
}

/// `stream`, holding `open` until it is dropped.
fn holding<S: Stream<Item = ServerSseMessage>>(
    stream: S,
    open: OpenStream,
) -> impl Stream<Item = ServerSseMessage> {
    stream.map(move |message| {
        let _held = &open;
        message
    })
}

impl SessionManager for BoundedSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.make_room().await?;
        let (id, transport) = self.inner.create_session().await?;
        self.uses().insert(
            id.clone(),
            Use {
                last: Instant::now(),
                streams: 0,
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.uses().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(holding(stream, OpenStream::new(id, &self.use_of)))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(holding(stream, OpenStream::new(id, &self.use_of)))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(holding(stream, OpenStream::new(id, &self.use_of)))
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // No session store: a session the registry dropped is gone, as after a restart.
        Ok(RestoreOutcome::NotSupported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, secs: u64, streams: usize) -> Use {
        Use {
            last: base + Duration::from_secs(secs),
            streams,
        }
    }

    #[test]
    fn the_oldest_session_without_a_stream_makes_room() {
        let base = Instant::now();
        let (a, b, c): (SessionId, SessionId, SessionId) = ("a".into(), "b".into(), "c".into());
        let uses = HashMap::from([
            (a.clone(), at(base, 1, 1)),
            (b.clone(), at(base, 2, 0)),
            (c.clone(), at(base, 3, 0)),
        ]);
        let live = [a.clone(), b.clone(), c.clone()];
        assert_eq!(oldest_idle(&uses, &live), Some(b));
        let busy = HashMap::from([(a.clone(), at(base, 1, 1)), (c.clone(), at(base, 0, 2))]);
        assert_eq!(oldest_idle(&busy, &[a, c.clone()]), Some(c));
    }
}
