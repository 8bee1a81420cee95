//! `GET /events` (and `GET /fleet/events`, [`super::fleet`]) as a stream of typed events that
//! outlives the connection: when it drops, the client connects again (finding the registry again through its discovery file when it was
//! found that way: a restarted registry has a new port) and the registry's first event, a
//! snapshot, says where things stand.
//!
//! Invariant: every connection starts with a [`Event::Snapshot`]; a consumer that replaces its
//! picture on each snapshot is never left with a stale one, whatever it missed in between.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::Stream;

use super::sse::Frames;
use super::{Client, Error};
use crate::wire::{
    EventName, EventsQuery, ResourcesEvent, SessionAdded, SessionChanged, SessionList,
    SessionRemoved,
};

/// The first wait before connecting again after a failed attempt; doubled up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between attempts.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// One event of `GET /events`.
#[derive(Debug)]
pub enum Event {
    /// The whole picture (the first event of every connection): replace everything.
    Snapshot(SessionList),
    /// A new session.
    SessionAdded(SessionAdded),
    /// A session's state or record changed.
    SessionChanged(SessionChanged),
    /// A session left.
    SessionRemoved(SessionRemoved),
    /// What every confirmed session's process costs (`include=resources`).
    Resources(ResourcesEvent),
}

/// An event of one stream, read from its `event:` name and its data.
pub(super) trait StreamEvent: Sized {
    /// The event named `name` with `data`; `None` for a name this stream does not send.
    fn decode(name: &str, data: &str) -> Result<Option<Self>, serde_json::Error>;
}

impl StreamEvent for Event {
    fn decode(name: &str, data: &str) -> Result<Option<Self>, serde_json::Error> {
        Ok(Some(match EventName::parse(name) {
            Some(EventName::Snapshot) => Self::Snapshot(serde_json::from_str(data)?),
            Some(EventName::SessionAdded) => Self::SessionAdded(serde_json::from_str(data)?),
            Some(EventName::SessionChanged) => Self::SessionChanged(serde_json::from_str(data)?),
            Some(EventName::SessionRemoved) => Self::SessionRemoved(serde_json::from_str(data)?),
            Some(EventName::Resources) => Self::Resources(serde_json::from_str(data)?),
            _ => return Ok(None),
        }))
    }
}

/// Where a followed stream stands.
struct Follow<E> {
    client: Client,
    /// The stream's path, as segments.
    path: &'static [&'static str],
    /// Its query parameters.
    query: Vec<(&'static str, String)>,
    open: Option<(reqwest::Response, Frames)>,
    ready: VecDeque<E>,
    /// How long to wait before the next attempt, after one failed.
    wait: Option<Duration>,
    /// Whether a connection was made before (the next one finds the registry again).
    reconnecting: bool,
}

impl Client {
    /// `GET /events`, followed: typed events, across dropped connections and restarts of the
    /// registry. An item is an `Err` when an attempt to connect failed (the stream tries again,
    /// waiting up to 2 s between attempts) or an event could not be read; it ends only when
    /// dropped.
    pub fn events(&self, query: &EventsQuery) -> impl Stream<Item = Result<Event, Error>> + use<> {
        let include = query.include.clone().map(|words| ("include", words));
        self.follow(&["events"], include.into_iter().collect())
    }

    /// The stream at `path` with `query`, followed as [`Client::events`] says.
    pub(super) fn follow<E: StreamEvent>(
        &self,
        path: &'static [&'static str],
        query: Vec<(&'static str, String)>,
    ) -> impl Stream<Item = Result<E, Error>> + use<E> {
        let follow = Follow {
            client: self.clone(),
            path,
            query,
            open: None,
            ready: VecDeque::new(),
            wait: None,
            reconnecting: false,
        };
        futures_util::stream::unfold(follow, |mut follow| async move {
            let next = follow.next().await;
            Some((next, follow))
        })
    }
}

impl<E: StreamEvent> Follow<E> {
    async fn next(&mut self) -> Result<E, Error> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            let Some((answer, frames)) = &mut self.open else {
                self.connect().await?;
                continue;
            };
            match answer.chunk().await {
                Ok(Some(chunk)) => {
                    for frame in frames.push(&chunk) {
                        let event = E::decode(&frame.name, &frame.data);
                        if let Some(event) = event.map_err(Error::Decode)? {
                            self.ready.push_back(event);
                        }
                    }
                }
                Ok(None) | Err(_) => self.open = None,
            }
        }
    }

    /// Connect (after the wait a failed attempt set), finding the registry again first when
    /// it was discovered.
    async fn connect(&mut self) -> Result<(), Error> {
        if let Some(wait) = self.wait {
            tokio::time::sleep(wait).await;
        }
        let attempt = self.attempt().await;
        self.wait = match &attempt {
            Ok(()) => None,
            Err(_) => Some(self.wait.map_or(FIRST_WAIT, |w| (w * 2).min(MAX_WAIT))),
        };
        attempt
    }

    async fn attempt(&mut self) -> Result<(), Error> {
        if self.reconnecting
            && let Some(dir) = self.client.found_in.clone()
        {
            self.client = Client::discover_in(&dir).await?;
        }
        let mut url = self.client.at(self.path);
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        let request = self
            .client
            .http
            .get(url)
            .bearer_auth(&self.client.token.0)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let answer = self.client.send(request).await?;
        self.open = Some((answer, Frames::default()));
        self.reconnecting = true;
        Ok(())
    }
}
