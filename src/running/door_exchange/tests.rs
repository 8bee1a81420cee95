use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{DoorRequest, ExchangeFailure, Holder, exchange, holder};
use crate::running::Secret;
use crate::running::door_address::door_address;
use crate::socket_owner::FarEnd;

#[test]
fn requests_are_written_whole_and_carry_what_they_must() {
    let address = door_address("127.0.0.1:4100").expect("a door address");
    let get = DoorRequest::get(&address, "/.well-known/agent-card.json");
    let text = String::from_utf8(get.bytes.clone()).expect("ASCII");
    assert!(
        text.starts_with("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1:4100\r\n")
    );
    assert!(text.contains("\r\nA2A-Version: 1.0\r\nConnection: close\r\n"));
    assert!(text.ends_with("\r\n\r\n") && !text.contains("Authorization"));

    let token = Secret::new("tok-123".to_owned());
    let post = DoorRequest::post_json(&address, b"{\"a\":1}", Some(&token)).expect("a request");
    let text = String::from_utf8(post.bytes.clone()).expect("ASCII");
    assert!(text.starts_with("POST / HTTP/1.1\r\n"));
    assert!(text.contains("\r\nAuthorization: Bearer tok-123\r\n"));
    assert!(text.ends_with("Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"));
    assert_eq!(format!("{post:?}"), "DoorRequest(..)");
}

#[test]
fn a_token_that_cannot_be_a_header_value_is_never_sent() {
    let address = door_address("localhost:4100").expect("a door address");
    for token in ["a\r\nX-Evil: 1", "a\nb", "nul\0", "del\x7f"] {
        let token = Secret::new(token.to_owned());
        let refused = DoorRequest::post_json(&address, b"{}", Some(&token));
        assert!(refused.is_err(), "{:?} was accepted", token.expose());
    }
    // Tab, space and bytes past ASCII may be in a field value, as hyper's own check allows.
    let sendable = Secret::new("a\tb c é".to_owned());
    assert!(DoorRequest::post_json(&address, b"{}", Some(&sendable)).is_ok());
}

#[test]
fn only_an_accepted_socket_of_the_records_owner_may_carry_a_request() {
    assert_eq!(
        holder(Ok(FarEnd::Accepted { uid: 1000 }), 1000),
        Holder::Owner
    );
    assert_eq!(holder(Ok(FarEnd::Accepted { uid: 0 }), 0), Holder::Owner);
    let Holder::Refused(why) = holder(Ok(FarEnd::Accepted { uid: 65534 }), 1000) else {
        panic!("another user's door is refused");
    };
    assert_eq!(
        why,
        "is held by uid 65534, not by the records' owner (uid 1000)"
    );
    // Root's door is no door of an unprivileged owner's.
    let Holder::Refused(why) = holder(Ok(FarEnd::Accepted { uid: 0 }), 1000) else {
        panic!("root's door is refused to another owner");
    };
    assert!(why.contains("held by uid 0"), "{why}");
    // Not accepted yet: no owner to compare, whoever the records' owner is (root included).
    for owner in [0, 1000] {
        assert_eq!(
            holder(Ok(FarEnd::NotYetAccepted), owner),
            Holder::NotYetAccepted
        );
    }
    assert!(matches!(
        holder(Ok(FarEnd::Absent), 1000),
        Holder::Refused(why) if why.contains("closed the connection")
    ));
    let failed = std::io::Error::other("no sock_diag here");
    assert!(matches!(
        holder(Err(failed), 1000),
        Holder::Refused(why) if why.contains("could not be checked") && why.contains("no sock_diag here")
    ));
}

#[test]
fn a_withheld_request_says_whether_the_token_was_kept_back() {
    let withheld = |token| ExchangeFailure::Withheld {
        why: "is held by uid 7, not by the records' owner (uid 8)".to_owned(),
        token,
    };
    assert_eq!(
        withheld(true).to_string(),
        "is held by uid 7, not by the records' owner (uid 8); the token was not sent"
    );
    assert!(withheld(false).to_string().ends_with("; nothing was sent"));
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// A connection to a fresh listener on loopback, and the listener.
async fn connection() -> (TcpListener, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a listener");
    let stream = TcpStream::connect(listener.local_addr().expect("its address"))
        .await
        .expect("a connection");
    (listener, stream)
}

#[tokio::test]
async fn a_door_of_another_owner_is_sent_nothing_and_the_failure_says_whose_it_is() {
    let (listener, stream) = connection().await;
    let door = tokio::spawn(async move {
        let (mut accepted, _) = listener.accept().await.expect("accepted");
        let mut received = Vec::new();
        accepted.read_to_end(&mut received).await.map(|_| received)
    });
    let address = door_address("127.0.0.1:4100").expect("a door address");
    let token = Secret::new("tok-SECRET".to_owned());
    let request = DoorRequest::post_json(&address, b"{}", Some(&token)).expect("a request");
    // The listener is ours: as a door of any other owner, it must get nothing.
    let failed = exchange(stream, &request, 1024, me().wrapping_add(1))
        .await
        .expect_err("not the owner's door");
    assert_eq!(
        failed.to_string(),
        format!(
            "is held by uid {}, not by the records' owner (uid {}); the token was not sent",
            me(),
            me().wrapping_add(1)
        )
    );
    let received = door.await.expect("the door ran").expect("read to the end");
    assert!(received.is_empty(), "{received:?}");
}

#[tokio::test]
async fn a_door_that_accepts_late_is_waited_for_and_sent_nothing_before() {
    let (listener, stream) = connection().await;
    let address = door_address("127.0.0.1:4100").expect("a door address");
    let request = DoorRequest::get(&address, "/card");
    let mut exchanging = std::pin::pin!(exchange(stream, &request, 1024, me()));
    // One look at the far end: not accepted yet, so the exchange waits.
    assert!((&mut exchanging).now_or_never().is_none());
    let (mut accepted, _) = listener.accept().await.expect("accepted");
    let mut room = [0u8; 4096];
    // Loopback delivers a write within the call: bytes written before the accept would be here.
    let early = accepted.try_read(&mut room);
    assert!(
        early
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "{early:?}"
    );
    let door = async {
        let read = accepted.read(&mut room).await.expect("the request");
        accepted
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            .await
            .expect("answered");
        read
    };
    let (answer, read) = tokio::join!(exchanging, door);
    assert_eq!(answer.expect("an answer").as_ref(), b"{}");
    assert!(room[..read].starts_with(b"GET /card HTTP/1.1\r\n"));
}
