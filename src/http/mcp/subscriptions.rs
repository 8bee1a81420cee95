//! Resource subscriptions: `resources/subscribe` (2025-11-25) and `subscriptions/listen`
//! (2026-07-28), both fed by the live view's feed, the one `/events` reads.
//!
//! Invariants kept here:
//! - Driven by the monitor's feed, never by polling: a subscribed MCP session is one more
//!   listener of the same loop (and, like an `/events` listener, keeps the live view running,
//!   which prunes records found gone on the same evidence).
//! - `notifications/resources/updated` names a subscribed URI whose content the event changed
//!   (the listing on any change; a session on its own); `notifications/resources/list_changed`
//!   goes out as sessions come and go. A snapshot in place of many changes, or a listener that
//!   fell behind, updates every subscribed URI and the list.
//! - A session's subscriptions end with it: its follower is aborted when its handler is
//!   dropped, and ends by itself when its client can no longer be told.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionSink;
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::resources::{Named, SESSIONS_URI, session_uri};
use crate::monitor::{EventKind, Monitor, Next, Snapshot, SubscribeError, Subscription};
use crate::running::Liveness;

/// The URIs one MCP session (or one `subscriptions/listen` request) follows.
pub(super) type Wanted = Arc<Mutex<HashSet<String>>>;

fn wanted_now(wanted: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    // Only a set of strings is kept under it: still whole after a panic elsewhere.
    wanted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where a follower's notifications go.
pub(super) enum Listener {
    /// A 2025-11-25 session: its own stream of server notifications.
    Session(Peer<RoleServer>),
    /// A 2026-07-28 `subscriptions/listen` request's stream; `list_changed` when the client
    /// asked for the list's changes.
    Listen {
        sink: SubscriptionSink,
        list_changed: bool,
    },
}

/// The client can no longer be told: the follower ends.
struct Gone;

impl Listener {
    async fn list_changed(&self) -> Result<(), Gone> {
        match self {
            Self::Session(peer) => peer.notify_resource_list_changed().await.map_err(|_| Gone),
            Self::Listen {
                sink,
                list_changed: true,
            } => sink.notify_resource_list_changed().await.map_err(|_| Gone),
            Self::Listen { .. } => Ok(()),
        }
    }

    async fn updated(&self, uri: String) -> Result<(), Gone> {
        match self {
            Self::Session(peer) => peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .map_err(|_| Gone),
            Self::Listen { sink, .. } => sink.notify_resource_updated(uri).await.map_err(|_| Gone),
        }
    }
}

/// A listener of the live view, as `/events` gets one; its failure as MCP's error.
pub(super) async fn listen_to(monitor: &Monitor) -> Result<Subscription, ErrorData> {
    monitor.subscribe().await.map_err(|error| {
        let detail = match &error {
            SubscribeError::Unavailable(error) => super::super::error::problem_for(error).detail,
            SubscribeError::Closing => error.to_string(),
        };
        ErrorData::internal_error(detail, None)
    })
}

/// Tell `listener` of every change to what `wanted` names, until the live view ends or the
/// client can no longer be told.
pub(super) async fn follow(
    monitor: Monitor,
    mut subscription: Subscription,
    wanted: Wanted,
    listener: Listener,
) {
    // Subscribed before the live view's first picture was taken (2026-07-28 acknowledges a
    // listen before the handler runs): a session the picture no longer holds ended meanwhile.
    let ended = ended_before(&subscription.snapshot, &wanted);
    if !ended.is_empty() && tell(&listener, ended, true).await.is_err() {
        return;
    }
    loop {
        // The picture is not kept: a notification only says what to read again.
        drop(std::mem::take(&mut subscription.snapshot));
        let mut closing = subscription.closing.clone();
        let lagged = loop {
            let received = tokio::select! {
                biased;
                () = crate::monitor::closed(&mut closing) => return,
                received = subscription.recv() => received,
            };
            let (uris, list_changed) = match received {
                Ok(Next::Event(event)) => affected(&event.kind, &wanted),
                Ok(Next::Snapshot(_)) => (wanted_now(&wanted).iter().cloned().collect(), true),
                Err(RecvError::Lagged(_)) => break true,
                Err(RecvError::Closed) => return,
            };
            if tell(&listener, uris, list_changed).await.is_err() {
                return;
            }
        };
        if lagged {
            // A listener that fell behind is dropped by the feed's rule; this one takes a
            // fresh place and has everything read again.
            drop(subscription);
            let everything = wanted_now(&wanted).iter().cloned().collect();
            if tell(&listener, everything, true).await.is_err() {
                return;
            }
            subscription = match monitor.subscribe().await {
                Ok(subscription) => subscription,
                Err(_) => return,
            };
        }
    }
}

async fn tell(listener: &Listener, uris: Vec<String>, list_changed: bool) -> Result<(), Gone> {
    if list_changed {
        listener.list_changed().await?;
    }
    for uri in uris {
        listener.updated(uri).await?;
    }
    Ok(())
}

/// The subscribed session URIs whose session `snapshot` does not hold, or holds as gone.
fn ended_before(snapshot: &Snapshot, wanted: &Mutex<HashSet<String>>) -> Vec<String> {
    let present: HashSet<String> = snapshot
        .readings
        .iter()
        .filter(|reading| !matches!(reading.liveness, Some(Liveness::Gone { .. })))
        .map(|reading| session_uri(&reading.record.session_id))
        .collect();
    wanted_now(wanted)
        .iter()
        .filter(|uri| matches!(Named::parse(uri), Some(Named::Session(_))))
        .filter(|uri| !present.contains(*uri))
        .cloned()
        .collect()
}

/// The subscribed URIs an event changes, and whether the list of resources changed.
fn affected(kind: &EventKind, wanted: &Mutex<HashSet<String>>) -> (Vec<String>, bool) {
    let list_changed = matches!(kind, EventKind::Added(_) | EventKind::Removed { .. });
    let own = session_uri(kind.session_id());
    let wanted = wanted_now(wanted);
    let uris = [SESSIONS_URI.to_owned(), own]
        .into_iter()
        .filter(|uri| wanted.contains(uri))
        .collect();
    (uris, list_changed)
}

/// The 2025-11-25 subscriptions of one MCP session: the URIs, and the follower while any is
/// wanted.
#[derive(Debug, Default)]
pub(super) struct SessionSubscriptions {
    wanted: Wanted,
    follower: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl SessionSubscriptions {
    /// Follow `uri` (already known to name a resource) for the session behind `peer`; the
    /// first subscription starts its follower, after the live view's first picture.
    pub(super) async fn subscribe(
        &self,
        monitor: &Monitor,
        uri: String,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut follower = self.follower.lock().await;
        // Wanted before the follower starts: a change right after the answer is told.
        let added = wanted_now(&self.wanted).insert(uri.clone());
        if follower.as_ref().is_none_or(JoinHandle::is_finished) {
            let subscription = match listen_to(monitor).await {
                Ok(subscription) => subscription,
                Err(error) => {
                    if added {
                        wanted_now(&self.wanted).remove(&uri);
                    }
                    return Err(error);
                }
            };
            let (monitor, wanted) = (monitor.clone(), Arc::clone(&self.wanted));
            let listener = Listener::Session(peer);
            *follower = Some(tokio::spawn(follow(
                monitor,
                subscription,
                wanted,
                listener,
            )));
        }
        Ok(())
    }

    /// Stop following `uri`; the last one stops the follower (the live view's listener).
    pub(super) async fn unsubscribe(&self, uri: &str) {
        let none_left = {
            let mut wanted = wanted_now(&self.wanted);
            wanted.remove(uri);
            wanted.is_empty()
        };
        if none_left && let Some(follower) = self.follower.lock().await.take() {
            follower.abort();
        }
    }
}

impl Drop for SessionSubscriptions {
    fn drop(&mut self) {
        if let Some(follower) = self.follower.get_mut().take() {
            follower.abort();
        }
    }
}
