//! The feed's ids, batches and the snapshot that replaces a batch too big for the ring.

use tokio::sync::broadcast::error::TryRecvError;

use super::*;
use crate::registry::RemovalCause;

fn removal(n: usize) -> EventKind {
    EventKind::Removed {
        session_id: format!("ses_{n:032x}"),
        cause: RemovalCause::RecordRemoved,
        detail: None,
    }
}

/// A feed with a ring and one listener on it.
fn listened() -> (Feed, broadcast::Receiver<Published>) {
    let mut feed = Feed::default();
    feed.open();
    let (snapshot, receiver) = feed.subscribe();
    assert_eq!(snapshot.id, 0, "no event yet");
    (feed, receiver)
}

/// One step's batch of `count` events, flushed.
fn flush_batch(feed: &mut Feed, count: usize) {
    feed.begin_batch();
    for n in 0..count {
        feed.publish(removal(n));
    }
    feed.flush();
}

fn drain(receiver: &mut broadcast::Receiver<Published>) -> Vec<Published> {
    let mut published = Vec::new();
    loop {
        match receiver.try_recv() {
            Ok(next) => published.push(next),
            Err(TryRecvError::Empty) => return published,
            Err(error) => panic!("{error:?}"),
        }
    }
}

fn ids(published: &[Published]) -> Vec<u64> {
    published
        .iter()
        .map(|p| match p {
            Published::Event(event) => event.id,
            Published::Snapshot(link) => link.id,
        })
        .collect()
}

#[test]
fn a_batch_waits_for_its_flush_and_goes_out_event_by_event_with_growing_ids() {
    let (mut feed, mut receiver) = listened();
    feed.begin_step();
    feed.begin_batch();
    feed.publish(removal(1));
    feed.publish(removal(2));
    assert!(drain(&mut receiver).is_empty(), "nothing before the flush");
    feed.flush();
    let published = drain(&mut receiver);
    assert!(published.iter().all(|p| matches!(p, Published::Event(_))));
    assert_eq!(ids(&published), [1, 2]);
    assert_eq!(
        feed.subscribe().0.id,
        2,
        "a newcomer's snapshot includes them"
    );
}

#[test]
fn a_batch_of_exactly_half_the_ring_still_goes_out_as_events() {
    let (mut feed, mut receiver) = listened();
    feed.begin_step();
    flush_batch(&mut feed, SNAPSHOT_OVER);
    assert_eq!(drain(&mut receiver).len(), SNAPSHOT_OVER);
}

#[test]
fn a_batch_over_half_the_ring_goes_out_as_one_snapshot_with_one_id() {
    let (mut feed, mut receiver) = listened();
    feed.begin_step();
    flush_batch(&mut feed, SNAPSHOT_OVER + 1);
    let published = drain(&mut receiver);
    let [Published::Snapshot(link)] = &published[..] else {
        panic!("one snapshot: {} entries", published.len());
    };
    assert_eq!(link.id, 1);
    assert_eq!(
        link.upgrade().map(|s| s.id),
        Some(1),
        "held until the next one"
    );
    // The next event follows the snapshot's id: no gap, no repeat.
    feed.publish(removal(0));
    assert_eq!(ids(&drain(&mut receiver)), [2]);
}

#[test]
fn the_threshold_counts_the_whole_step_not_each_flush() {
    let (mut feed, mut receiver) = listened();
    feed.begin_step();
    flush_batch(&mut feed, SNAPSHOT_OVER - 10);
    flush_batch(&mut feed, 11);
    let published = drain(&mut receiver);
    assert_eq!(published.len(), SNAPSHOT_OVER - 10 + 1);
    assert!(matches!(published.last(), Some(Published::Snapshot(_))));

    // A new step starts from nothing on the ring.
    feed.begin_step();
    flush_batch(&mut feed, 11);
    let published = drain(&mut receiver);
    assert_eq!(published.len(), 11);
    assert!(published.iter().all(|p| matches!(p, Published::Event(_))));
}

#[test]
fn only_the_latest_mid_stream_snapshot_stays_alive() {
    let (mut feed, mut receiver) = listened();
    for _ in 0..2 {
        feed.begin_step();
        flush_batch(&mut feed, SNAPSHOT_OVER + 1);
    }
    let published = drain(&mut receiver);
    let [Published::Snapshot(first), Published::Snapshot(second)] = &published[..] else {
        panic!("two snapshots: {} entries", published.len());
    };
    assert!(first.upgrade().is_none(), "superseded");
    assert_eq!(second.upgrade().map(|s| s.id), Some(2));
    feed.close();
    assert!(
        second.upgrade().is_none(),
        "a stopped loop holds no picture"
    );
    assert!(matches!(receiver.try_recv(), Err(TryRecvError::Closed)));
}
