//! The door answer: bytes served over a real loopback socket to the door probe (hyper's client
//! connection parses HTTP; this drives our code around it: the owner check, framing caps, the
//! card's session match, `door_json` and redaction).
//!
//! Checks: the probe never panics and ends within its deadline; a card is answered (`live`)
//! only when the status was 2xx, the body within the cap, and the body (read here by
//! serde_json, apart from the probe) names the record's session; no secret of the record
//! appears in the card or the reason.
//!
//! Input: byte 0 picks the record (bit 0: with a door token, so the extended card is asked
//! for), a 1xx head first (bit 1), the framing (bits 2-3: raw bytes as the whole answer,
//! `Content-Length`, chunked, or closed) and the chunk size (bits 4-7); byte 1 the status;
//! byte 2 a repeat count for the body (to cross the size cap); the rest is the body.
#![no_main]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use murmur_registry::running::{DoorProbe, MURMUR_CAPSULE_EXTENSION, RunningRecord};
use serde_json::Value;

const SESSION: &str = "ses_0123456789abcdef0123456789abcdef";
const TOKEN: &str = "tok-Secret-4242";
const CREDENTIAL: &str = "86753090";
const MAX_CARD_BYTES: usize = 256 * 1024;
const STATUSES: [u16; 10] = [200, 201, 204, 299, 100, 101, 301, 401, 404, 500];

struct Door {
    listener: TcpListener,
    runtime: tokio::runtime::Runtime,
}

fn door() -> &'static Door {
    static DOOR: OnceLock<Door> = OnceLock::new();
    DOOR.get_or_init(|| Door {
        listener: TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime"),
    })
}

fn record(port: u16, with_token: bool) -> RunningRecord {
    let token = if with_token {
        format!(r#","door_token":"{TOKEN}""#)
    } else {
        String::new()
    };
    let text = format!(
        r#"{{"session_id":"{SESSION}","url":"127.0.0.1:{port}","pid":1,"process_start":"5",
        "capsule_name":"c","capsule_version":"1","workdir":"/w","outlives_launcher":true,
        "started_at":"2026-11-30T00:00:00Z","credentials":{{"k":"{CREDENTIAL}"}}{token}}}"#
    );
    RunningRecord::parse(text.as_bytes()).expect("the fuzz record parses")
}

/// The answer served, and the body as the client should see it when the framing is ours.
fn answer(data: &[u8]) -> (Vec<u8>, Option<(u16, Vec<u8>)>) {
    let Some((&[mode, status, repeat], body)) = data.split_first_chunk::<3>() else {
        return (data.to_vec(), None);
    };
    let framing = (mode >> 2) & 3;
    if framing == 0 {
        return (data[1..].to_vec(), None);
    }
    let status = STATUSES[usize::from(status) % STATUSES.len()];
    let times = if repeat > 250 {
        (MAX_CARD_BYTES / body.len().max(1)) + usize::from(repeat - 250)
    } else {
        1
    };
    let whole = body.repeat(times);
    let mut out = Vec::new();
    if mode & 2 != 0 {
        out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    out.extend_from_slice(
        format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n").as_bytes(),
    );
    match framing {
        1 => {
            out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", whole.len()).as_bytes());
            out.extend_from_slice(&whole);
        }
        2 => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            // A body past the cap comes in chunks of 1-16 KiB, not bytes: a quarter of a
            // million one-byte chunks took seconds an input and starved the search.
            let unit = if times > 1 { 1024 } else { 1 };
            let size = (usize::from(mode >> 4) + 1) * unit;
            for chunk in whole.chunks(size) {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
        }
        _ => {
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            out.extend_from_slice(&whole);
        }
    }
    (out, Some((status, whole)))
}

/// Serve `bytes` to the one connection the probe makes: read its request head, answer, close.
fn serve_once(listener: &TcpListener, bytes: &[u8]) {
    let Ok((mut stream, _)) = listener.accept() else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    drain(stream);
}

fn drain(mut stream: TcpStream) {
    let mut buf = [0u8; 4096];
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// Whether `body` names `SESSION`, read by serde_json alone (the probe's reading apart).
fn names_session(body: &[u8], with_token: bool) -> bool {
    let Ok(mut card) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    if with_token {
        if card.get("error").is_some() {
            return false;
        }
        match card.get_mut("result") {
            Some(result) if result.is_object() => card = result.take(),
            _ => return false,
        }
    }
    let top = card.get("session_id").and_then(Value::as_str);
    let extension = card
        .pointer("/capabilities/extensions")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|e| e.get("uri").and_then(Value::as_str) == Some(MURMUR_CAPSULE_EXTENSION))
        })
        .and_then(|e| e.pointer("/params/sessionId"))
        .and_then(Value::as_str);
    top.or(extension) == Some(SESSION)
}

fn holds_secret(text: &str) -> bool {
    text.contains(TOKEN) || text.contains(CREDENTIAL)
}

fuzz_target!(|data: &[u8]| {
    let door = door();
    let port = door.listener.local_addr().expect("a bound port").port();
    let with_token = data.first().is_some_and(|mode| mode & 1 != 0);
    let record = record(port, with_token);
    let (served, framed) = answer(data);
    let probe = DoorProbe::with_deadlines(Duration::from_secs(2), Duration::from_secs(2));
    let started = std::time::Instant::now();
    let verdict = std::thread::scope(|scope| {
        scope.spawn(|| serve_once(&door.listener, &served));
        door.runtime.block_on(probe.card(&record))
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the probe outran its deadlines"
    );
    match verdict {
        Ok(card) => {
            let text = card.to_string();
            assert!(!holds_secret(&text), "a secret in the card: {text}");
            if let Some((status, body)) = framed {
                assert!((200..300).contains(&status), "live on HTTP {status}");
                assert!(
                    body.len() <= MAX_CARD_BYTES,
                    "live past the cap: {}",
                    body.len()
                );
                assert!(
                    names_session(&body, with_token),
                    "live on a card naming no session"
                );
            }
        }
        Err(reason) => assert!(!holds_secret(&reason), "a secret in the reason: {reason}"),
    }
});
