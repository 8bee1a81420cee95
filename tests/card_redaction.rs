//! A card is redacted of the record's secrets wherever a door puts them, numbers included: a
//! real live process, a real door on `127.0.0.1` echoing its all-digit credentials unquoted, and
//! the registry served in-process answering `GET /sessions/{id}/card` and
//! `GET /sessions?include=card`.

mod common;

use common::server::TestServer;
use common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_digit_credential_a_door_echoes_as_a_number_never_reaches_a_card() {
    const PIN: &str = "8675309";
    const ZEROED: &str = "08675309";
    // Thirty digits fit no integer: a parser prints them back as a float, not as they came.
    const LONG: &str = "123456789012345678901234567890";
    let server = TestServer::start().await;
    let process = TestProcess::sleeping();
    let record = process.record();
    let id = record.session_id();
    // The spec card's fields written by hand, so that the numbers are exactly these tokens.
    let card = format!(
        r#"{{"name": "test-capsule", "version": "0.1.0", "session_id": "{id}",
            "pin": {PIN}, "pins": [{PIN}, -{PIN}, 42], "fraction": 0.{ZEROED},
            "long": {LONG}, "said": "pin {PIN}"}}"#
    );
    let door = DoorServer::start(DoorMode::CardText(card));
    let record = record.url(door.url()).set(
        "credentials",
        json!({"pin": PIN, "zeroed": ZEROED, "long": LONG}),
    );
    record.write_in(server.dir());

    let (status, alone) = server.get_text(&format!("/sessions/{id}/card")).await;
    assert_eq!(status, 200, "{alone}");
    let (status, listed) = server.get_text("/sessions?include=card").await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    let listed_card = &listed["sessions"][0]["card"];
    let alone: Value = serde_json::from_str(&alone).expect("JSON");
    for card in [&alone, listed_card] {
        let text = card.to_string();
        for secret in [PIN, LONG, "12345678901234567"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(card["session_id"], id.as_str(), "{text}");
        assert_eq!(card["pin"], "[redacted]", "{text}");
        assert_eq!(card["pins"], json!(["[redacted]", "-[redacted]", 42]));
        assert_eq!(card["fraction"], "0.[redacted]", "{text}");
        assert_eq!(card["long"], "[redacted]", "{text}");
        assert_eq!(card["said"], "pin [redacted]", "{text}");
    }
}
