use super::*;

fn frame_of(len: usize) -> Frame {
    Frame::event(1, EventName::SessionChanged, Bytes::from(vec![b'x'; len]))
}

fn text_of(frame: &Frame) -> String {
    frame
        .parts
        .iter()
        .map(|part| String::from_utf8_lossy(part))
        .collect()
}

#[test]
fn frames_are_written_as_sse_events_and_comments() {
    let event = Frame::event(7, EventName::Snapshot, Bytes::from_static(b"{\"a\":1}"));
    assert_eq!(
        text_of(&event),
        "id: 7\nevent: snapshot\ndata: {\"a\":1}\n\n"
    );
    assert_eq!(text_of(&Frame::comment("a\nb")), ": a b\n\n");
    assert_eq!(text_of(&Frame::keep_alive()), ":\n\n");
}

#[test]
fn shared_text_is_the_owners_text_without_a_copy() {
    let owner: Arc<str> = Arc::from("{\"sessions\":[]}");
    let bytes = shared_text(Arc::clone(&owner), |text| text);
    assert_eq!(&bytes[..], owner.as_bytes());
    assert_eq!(bytes.as_ptr(), owner.as_ptr(), "the same memory");
    assert_eq!(Arc::strong_count(&owner), 2, "held until the bytes go");
    drop(bytes);
    assert_eq!(Arc::strong_count(&owner), 1);
}

#[test]
fn a_frame_fits_within_the_budgets_or_alone() {
    assert!(fits(0, 0, STREAM_BUDGET * 8), "alone, any size");
    assert!(fits(1, 1, STREAM_BUDGET - 1));
    assert!(!fits(1, 1, STREAM_BUDGET));
    assert!(!fits(STREAM_BUDGET, 1, 1));
    assert!(!fits(usize::MAX, 1, 1));
    assert!(fits(100, FRAME_BUDGET - 1, 1));
    assert!(
        !fits(100, FRAME_BUDGET, 1),
        "no more frames than the event budget"
    );
}

#[tokio::test]
async fn a_queue_past_its_budget_refuses_and_ends_with_only_its_last_words() {
    let queue = Queue::default();
    let frame = frame_of(64 * 1024 - 40);
    let mut pushed = 0;
    while queue.push(frame.clone()) {
        pushed += 1;
    }
    assert_eq!(
        pushed,
        STREAM_BUDGET / frame.len() + 1,
        "the next, and as many as fit behind it"
    );
    let small = Queue::default();
    let mut pushed = 0;
    while small.push(frame_of(1)) {
        pushed += 1;
    }
    assert_eq!(pushed, FRAME_BUDGET, "as many frames as the event budget");
    assert!(queue.lock().bytes <= STREAM_BUDGET + frame.len());
    queue.replace_all(Frame::comment("stream ended: behind"));
    queue.finish();
    let last = queue.next().await.expect("the last words");
    assert_eq!(text_of(&last), ": stream ended: behind\n\n");
    assert!(queue.next().await.is_none(), "then the end");
    assert_eq!(queue.lock().bytes, 0);
}

#[tokio::test]
async fn a_frame_larger_than_the_budget_goes_out_and_the_budget_counts_behind_it() {
    let queue = Queue::default();
    assert!(queue.push(frame_of(STREAM_BUDGET * 2)));
    // The changes that come while a large snapshot waits to be taken.
    let half = frame_of(STREAM_BUDGET / 2 - 100);
    assert!(queue.push(half.clone()));
    assert!(queue.push(half.clone()));
    let rest = STREAM_BUDGET - 2 * half.len();
    assert!(!queue.push(frame_of(rest)), "behind it, the budget");
    assert!(
        !queue.push(frame_of(STREAM_BUDGET * 2)),
        "a second one does not join"
    );
    assert!(queue.next().await.is_some());
    assert!(
        queue.push(frame_of(1)),
        "once taken, the budget is what is behind the next"
    );
}
