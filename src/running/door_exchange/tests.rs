use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{DoorRequest, ExchangeFailure, MAX_HEAD_BYTES, exchange};
use crate::running::Secret;
use crate::running::door_address::door_address;

#[test]
fn requests_carry_what_they_must() {
    let address = door_address("127.0.0.1:4100").expect("a door address");
    let get = DoorRequest::get(&address, "/.well-known/agent-card.json").expect("a request");
    let header = |request: &DoorRequest, name: &str| {
        request
            .request
            .headers()
            .get(name)
            .map(|v| v.as_bytes().to_vec())
    };
    assert_eq!(get.request.uri(), "/.well-known/agent-card.json");
    assert_eq!(header(&get, "host"), Some(b"127.0.0.1:4100".to_vec()));
    assert_eq!(header(&get, "a2a-version"), Some(b"1.0".to_vec()));
    assert_eq!(header(&get, "connection"), Some(b"close".to_vec()));
    assert_eq!(header(&get, "authorization"), None);

    let token = Secret::new("tok-123".to_owned());
    let post = DoorRequest::post_json(&address, b"{\"a\":1}", Some(&token)).expect("a request");
    assert_eq!(post.request.method(), "POST");
    assert_eq!(
        header(&post, "authorization"),
        Some(b"Bearer tok-123".to_vec())
    );
    assert!(post.request.headers()["authorization"].is_sensitive());
    assert_eq!(
        header(&post, "content-type"),
        Some(b"application/json".to_vec())
    );
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
    let failed = exchange(stream, request, 1024, me().wrapping_add(1))
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

/// What a door answering `answer` (after reading the request's head) gives an exchange whose
/// cap is 1,024 bytes; and how many bytes the door could write before the exchange ended.
async fn exchanged(answer: Vec<u8>) -> (Result<bytes::Bytes, ExchangeFailure>, usize) {
    let (listener, stream) = connection().await;
    let door = tokio::spawn(async move {
        let (mut accepted, _) = listener.accept().await.expect("accepted");
        let mut room = [0u8; 4096];
        let _ = accepted.read(&mut room).await;
        let mut written = 0;
        for piece in answer.chunks(1024) {
            if accepted.write_all(piece).await.is_err() {
                break;
            }
            written += piece.len();
        }
        written
    });
    let address = door_address("127.0.0.1:4100").expect("a door address");
    let request = DoorRequest::get(&address, "/card").expect("a request");
    let answer = exchange(stream, request, 1024, me()).await;
    (answer, door.await.expect("the door ran"))
}

#[tokio::test]
async fn answers_are_read_however_http_frames_them_within_the_caps() {
    let (answer, _) = exchanged(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec()).await;
    assert_eq!(answer.expect("an answer").as_ref(), b"{}");

    let chunked = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
                    X-Folded: a\r\n b\r\n\r\n1;ext=1\r\n{\r\n1\r\n}\r\n0\r\nTrailer: t\r\n\r\n";
    let (answer, _) = exchanged(chunked.to_vec()).await;
    assert_eq!(answer.expect("an answer").as_ref(), b"{}");

    let (answer, _) =
        exchanged(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n".to_vec()).await;
    assert_eq!(answer, Err(ExchangeFailure::Status(401)));
}

#[tokio::test]
async fn a_door_answering_too_much_is_cut_not_buffered() {
    let said_length = b"HTTP/1.1 200 OK\r\nContent-Length: 1025\r\n\r\n".to_vec();
    let (answer, _) = exchanged(said_length).await;
    assert_eq!(
        answer,
        Err(ExchangeFailure::Broken(
            "answered more than 1024 bytes".into()
        ))
    );

    let mut endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4096 {
        endless.extend_from_slice(b"400\r\n");
        endless.extend_from_slice(&[b'x'; 1024]);
        endless.extend_from_slice(b"\r\n");
    }
    let (answer, written) = exchanged(endless).await;
    assert_eq!(
        answer,
        Err(ExchangeFailure::Broken(
            "answered more than 1024 bytes".into()
        ))
    );
    assert!(written < 4096 * 1024, "the door wrote all {written} bytes");

    let mut huge_head = b"HTTP/1.1 200 OK\r\n".to_vec();
    while huge_head.len() <= MAX_HEAD_BYTES {
        huge_head.extend_from_slice(b"X-Padding: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n");
    }
    let (answer, _) = exchanged(huge_head).await;
    let failure = answer.expect_err("a head past the cap").to_string();
    assert!(
        failure.starts_with("answered a head larger than"),
        "{failure}"
    );
}
