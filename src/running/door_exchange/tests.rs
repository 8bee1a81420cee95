use super::DoorRequest;
use crate::running::Secret;
use crate::running::door::door_address;

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
