//! The view's states and its listeners: snapshot first, no gap, bounded, ended with a reason.

use super::*;
use crate::fleet::sample;

/// This registry's host: none of the samples in etcd are its (see `own_host_*` for those).
fn own() -> HostId {
    "z".parse().expect("a host id")
}

fn current_view() -> FleetView {
    let view = FleetView::new(own());
    view.read(sample::cache(
        7,
        &[
            sample::host("a"),
            sample::session("a", "ses_1", 1, "live", "plan"),
        ],
    ));
    view
}

fn put<'a>(revision: i64, (key, value): &'a (Vec<u8>, Vec<u8>)) -> (i64, WatchChange<'a>) {
    (revision, WatchChange::Put { key, value })
}

/// The next thing a listener gets, which must come at once.
fn next_now(subscription: &mut FleetSubscription) -> Result<FleetNext, String> {
    let waker = futures_util::task::noop_waker();
    let mut context = std::task::Context::from_waker(&waker);
    let mut next = std::pin::pin!(subscription.next());
    match next.as_mut().poll(&mut context) {
        std::task::Poll::Ready(next) => next,
        std::task::Poll::Pending => panic!("nothing to receive"),
    }
}

fn event_id(next: Result<FleetNext, String>) -> u64 {
    match next {
        Ok(FleetNext::Event(event)) => event.id,
        other => panic!("an event: {other:?}"),
    }
}

use std::future::Future;

#[test]
fn not_configured_and_unread_views_serve_nothing_and_say_why() {
    let none = FleetView::not_configured();
    assert_eq!(none.own_host(), None);
    assert_eq!(
        none.current().map(|_| ()),
        Err(FleetUnavailable::NotConfigured)
    );
    assert!(matches!(
        none.subscribe(),
        Err(FleetUnavailable::NotConfigured)
    ));
    let unread = FleetView::new(own());
    assert_eq!(unread.own_host(), Some(&own()));
    let Err(FleetUnavailable::Unavailable(why)) = unread.current() else {
        panic!("unavailable");
    };
    assert!(why.contains("not been read"), "{why}");
    // Events before the first read are not applied: the read brings everything.
    unread.apply([put(3, &sample::host("b"))]);
    assert!(unread.current().is_err());
}

#[test]
fn a_read_makes_the_view_current_with_the_revision_and_own_host() {
    let view = current_view();
    let picture = view.current().expect("current");
    assert_eq!((picture.id, picture.revision), (0, 7));
    assert_eq!(picture.host_id, own());
    assert_eq!(picture.hosts.len(), 1);
    assert_eq!(picture.sessions.len(), 1);
    view.advance(9);
    assert_eq!(view.current().expect("current").revision, 9);
}

#[test]
fn a_listener_gets_the_snapshot_then_each_change_with_growing_ids() {
    let view = current_view();
    let (snapshot, mut listener) = view.subscribe().expect("current");
    assert_eq!(snapshot.id, 0);
    let b = sample::host("b");
    let s2 = sample::session("b", "ses_2", 2, "live", "plan");
    view.apply([put(8, &b), put(8, &s2)]);
    assert_eq!(event_id(next_now(&mut listener)), 1);
    assert_eq!(event_id(next_now(&mut listener)), 2);
    // A newcomer's snapshot includes both, and the next change follows it without a gap.
    let (snapshot, mut late) = view.subscribe().expect("current");
    assert_eq!((snapshot.id, snapshot.revision), (2, 8));
    let sessions: Vec<_> = snapshot.sessions.iter().map(|s| s.session_id()).collect();
    assert_eq!(sessions, ["ses_2", "ses_1"], "newest first");
    view.apply([(9, WatchChange::Delete { key: &s2.0 })]);
    assert_eq!(event_id(next_now(&mut late)), 3);
    assert_eq!(event_id(next_now(&mut listener)), 3);
}

#[test]
fn a_session_overwritten_with_a_refused_value_is_removed_for_listeners_too() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    let (key, _) = sample::session("a", "ses_1", 1, "live", "plan");
    view.apply([(
        8,
        WatchChange::Put {
            key: &key,
            value: b"{}",
        },
    )]);
    match next_now(&mut listener) {
        Ok(FleetNext::Event(event)) => assert!(
            matches!(&event.change, FleetChange::SessionRemoved { session_id, .. } if session_id == "ses_1"),
            "{:?}",
            event.change
        ),
        other => panic!("a removal: {other:?}"),
    }
    let served = view.current().expect("current");
    assert_eq!(served.sessions.len(), 0, "not served either");
}

#[test]
fn a_re_read_while_current_sends_the_differences() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    view.read(sample::cache(
        20,
        &[
            sample::host("a"),
            sample::session("a", "ses_1", 1, "gone", "plan"),
        ],
    ));
    match next_now(&mut listener) {
        Ok(FleetNext::Event(event)) => {
            assert!(matches!(event.change, FleetChange::SessionChanged { .. }));
        }
        other => panic!("a change: {other:?}"),
    }
    assert_eq!(view.current().expect("current").revision, 20);
    // A re-read that finds nothing changed still moves the revision served.
    view.read(sample::cache(
        25,
        &[
            sample::host("a"),
            sample::session("a", "ses_1", 1, "gone", "plan"),
        ],
    ));
    assert_eq!(view.current().expect("current").revision, 25);
}

#[test]
fn many_changes_at_once_go_out_as_one_snapshot() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    let entries: Vec<_> = (0..=SNAPSHOT_OVER)
        .map(|n| sample::session("b", &format!("ses_b{n}"), 5, "live", "x"))
        .collect();
    view.apply(entries.iter().map(|entry| put(8, entry)));
    match next_now(&mut listener) {
        Ok(FleetNext::Snapshot(snapshot)) => {
            assert_eq!(snapshot.id, 1, "one id for the lot");
            assert_eq!(snapshot.sessions.len(), SNAPSHOT_OVER + 2);
        }
        other => panic!("a snapshot: {other:?}"),
    }
    view.apply([(9, WatchChange::Delete { key: &entries[0].0 })]);
    assert_eq!(event_id(next_now(&mut listener)), 2);
}

#[test]
fn a_listener_too_far_behind_is_ended() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    // One at a time (each within the snapshot threshold), past the buffer.
    for n in 0..=EVENT_BUFFER {
        let entry = sample::session("b", &format!("ses_b{n}"), 5, "live", "x");
        view.apply([put(8, &entry)]);
    }
    let why = next_now(&mut listener).expect_err("ended");
    assert!(why.contains("fell more than 1024 events behind"), "{why}");
}

#[test]
fn going_unavailable_ends_streams_with_the_reason_and_serves_nothing_until_read_again() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    view.unavailable("etcd refused the connection".to_owned());
    let why = next_now(&mut listener).expect_err("ended");
    assert_eq!(
        why,
        "the fleet became unavailable: etcd refused the connection"
    );
    assert_eq!(
        view.current().map(|_| ()),
        Err(FleetUnavailable::Unavailable(
            "etcd refused the connection".to_owned()
        ))
    );
    assert!(view.subscribe().is_err());
    view.read(sample::cache(30, &[sample::host("a")]));
    let (snapshot, mut again) = view.subscribe().expect("current again");
    assert_eq!(snapshot.revision, 30);
    assert!(snapshot.sessions.is_empty(), "no ghost of ses_1");
    view.apply([put(31, &sample::host("c"))]);
    assert!(event_id(next_now(&mut again)) > 0);
}

#[test]
fn closing_ends_streams_and_refuses_new_ones() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    view.close();
    assert_eq!(
        next_now(&mut listener).expect_err("ended"),
        "the registry is shutting down"
    );
    assert!(matches!(view.subscribe(), Err(FleetUnavailable::Closing)));
}

#[test]
fn a_host_leaves_after_its_sessions_within_one_revision() {
    let view = current_view();
    let (_, mut listener) = view.subscribe().expect("current");
    let host = sample::host("a");
    let session = sample::session("a", "ses_1", 1, "live", "plan");
    let back = sample::host("a");
    // A lease revoked at 8 (etcd sends the host key first), the host back at 9.
    view.apply([
        (8, WatchChange::Delete { key: &host.0 }),
        (8, WatchChange::Delete { key: &session.0 }),
        put(9, &back),
    ]);
    let mut order = Vec::new();
    for _ in 0..3 {
        match next_now(&mut listener) {
            Ok(FleetNext::Event(event)) => order.push(match &event.change {
                FleetChange::SessionRemoved { .. } => "removed",
                FleetChange::HostLeft { .. } => "left",
                FleetChange::HostJoined(_) => "joined",
                other => panic!("{other:?}"),
            }),
            other => panic!("an event: {other:?}"),
        }
    }
    assert_eq!(order, ["removed", "left", "joined"]);
}

/// Host `z`, this registry's own, as its publisher published it: one session `ses_1`.
fn own_published() -> FleetCache {
    sample::cache(
        0,
        &[
            sample::host("z"),
            sample::session("z", "ses_1", 1, "live", "plan"),
        ],
    )
}

fn capsules(snapshot: &FleetSnapshot) -> Vec<(&str, &str, &str)> {
    (snapshot.sessions.iter())
        .map(|s| {
            let capsule = s.capsule_name().unwrap_or("");
            (s.host_id().as_str(), s.session_id(), capsule)
        })
        .collect()
}

/// A forged entry under this host's id (another capsule, pid 1), put in etcd by anyone.
fn forged(session_id: &str) -> (Vec<u8>, Vec<u8>) {
    let (key, value) = sample::session("z", session_id, 9, "live", "plan");
    let mut value: serde_json::Value = serde_json::from_slice(&value).expect("a sample");
    value["capsule_name"] = "scratch-test (safe to stop)".into();
    value["pid"] = 1.into();
    (key, value.to_string().into_bytes())
}

#[test]
fn own_host_comes_from_its_publisher_never_from_etcd() {
    let view = FleetView::new(own());
    view.read(sample::cache(
        7,
        &[
            sample::host("a"),
            sample::host("z"),
            forged("ses_1"),
            forged("ses_9"),
        ],
    ));
    // No lease held yet: this host is not shown at all, whatever etcd holds under its id.
    let picture = view.current().expect("current");
    assert!(picture.sessions.is_empty(), "{:?}", capsules(&picture));
    let hosts: Vec<&str> = picture.hosts.iter().map(|h| h.host_id.as_str()).collect();
    assert_eq!(hosts, ["a"]);
    let (_, mut listener) = view.subscribe().expect("current");
    view.own(Some(own_published()));
    let picture = view.current().expect("current");
    assert_eq!(capsules(&picture), [("z", "ses_1", "c")]);
    assert_same_hosts(&view, &picture);
    assert!(matches!(
        next_now(&mut listener).map(|n| match n {
            FleetNext::Event(e) => e.change.clone(),
            FleetNext::Snapshot(_) => panic!("an event"),
        }),
        Ok(FleetChange::HostJoined(_))
    ));
    event_id(next_now(&mut listener));
    // Forged again while held: no event, and the picture keeps what the publisher published.
    let again = forged("ses_1");
    view.apply([
        put(8, &again),
        (
            8,
            WatchChange::Delete {
                key: &sample::host("z").0,
            },
        ),
    ]);
    assert_eq!(
        capsules(&view.current().expect("current")),
        [("z", "ses_1", "c")]
    );
    // The lease lost: the session leaves, then the host.
    view.own(None);
    let removed = next_now(&mut listener).expect("an event");
    let left = next_now(&mut listener).expect("an event");
    let change = |next: FleetNext| match next {
        FleetNext::Event(event) => event.change.clone(),
        FleetNext::Snapshot(_) => panic!("an event"),
    };
    assert!(matches!(
        change(removed),
        FleetChange::SessionRemoved { .. }
    ));
    assert!(matches!(change(left), FleetChange::HostLeft { .. }));
    let picture = view.current().expect("current");
    assert!(picture.sessions.is_empty());
    assert_same_hosts(&view, &picture);
}

/// `view.hosts()` is the picture's hosts, at its revision, and names this host.
fn assert_same_hosts(view: &FleetView, picture: &FleetSnapshot) {
    let FleetHostsNow {
        revision,
        own,
        hosts,
    } = view.hosts().expect("current");
    assert_eq!(Some(&own), view.own_host());
    let ids = |hosts: &[Arc<HostEntry>]| -> Vec<String> {
        hosts.iter().map(|h| h.host_id.clone()).collect()
    };
    assert_eq!(revision, picture.revision);
    assert_eq!(ids(&hosts), ids(&picture.hosts));
    assert!(
        hosts
            .iter()
            .zip(&picture.hosts)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
}

/// A picture large enough to be let go apart, and one of its sessions, held: the picture's
/// the only other hold on it.
fn large_picture() -> (FleetSnapshot, Arc<CachedSession>) {
    let entries: Vec<_> = (0..LET_GO_APART_FROM)
        .map(|n| sample::session("a", &format!("ses_{n}"), (n % 60) as u32, "live", "plan"))
        .collect();
    let cache = sample::cache(7, &entries);
    let picture = snapshot_of(&cache, None, 0, &own());
    let held = Arc::clone(&picture.sessions[0]);
    (picture, held)
}

#[test]
fn a_large_picture_is_let_go_off_a_runtime_and_on_one() {
    let (picture, held) = large_picture();
    drop(picture);
    assert_eq!(Arc::strong_count(&held), 1, "let go where it was dropped");
    let (picture, held) = large_picture();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async move { drop(picture) });
    // The runtime's end waits for its blocking pool, or drops what it had not started.
    drop(runtime);
    assert_eq!(Arc::strong_count(&held), 1, "let go on the blocking pool");
}

#[test]
fn with_etcd_away_the_fleet_is_unavailable_even_with_its_own_picture() {
    let view = FleetView::new(own());
    view.own(Some(own_published()));
    assert!(matches!(
        view.current(),
        Err(FleetUnavailable::Unavailable(_))
    ));
    view.read(sample::cache(7, &[sample::host("a")]));
    assert_eq!(view.current().expect("current").sessions.len(), 1);
    view.unavailable("etcd refused the connection".to_owned());
    assert!(matches!(
        view.current(),
        Err(FleetUnavailable::Unavailable(_))
    ));
}
