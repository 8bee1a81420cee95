//! The agent card and skills reader with redaction: any door answer, any record secrets of at
//! least 8 bytes.
//!
//! Checks: no secret appears in any output (the card's JSON text, every string and key of it
//! decoded, its skills, a reason quoting the answer), before or after JSON decoding.
//!
//! Secrets hold no JSON punctuation, quote, backslash or white space (else the JSON text of any
//! card could spell one out of its own structure: `","` is no secret a door can leak), and none
//! is part of the marker `[redacted]` (which no replacement could then hide).
//!
//! Input: two secrets (the door token, a credential) then the answer, split at 0xFF bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use murmur_registry::running::RunningRecord;
use murmur_registry::test_support::{redacted_door_card, redacted_reason};
use serde_json::{Value, json};

fn secret(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let plain =
        !text.contains(|c: char| c.is_whitespace() || c.is_control() || "\"\\{}[]:,".contains(c));
    (text.len() >= 8 && plain && !"[redacted]".contains(text)).then_some(text)
}

fn strings_of(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(all) => all.iter().for_each(|v| strings_of(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings_of(v, out);
        }),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0xFF);
    let (Some(token), Some(credential), Some(body)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let (Some(token), Some(credential)) = (secret(token), secret(credential)) else {
        return;
    };
    let record = json!({"session_id": "ses_0", "url": "127.0.0.1:1", "pid": 1,
        "process_start": "5", "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
        "outlives_launcher": true, "started_at": "2026-11-30T00:00:00Z",
        "door_token": token, "credentials": {"k": credential}});
    let record = RunningRecord::parse(record.to_string().as_bytes()).expect("the record parses");
    let leaks = |text: &str| text.contains(token) || text.contains(credential);
    let reason = redacted_reason(String::from_utf8_lossy(body).into_owned(), &record);
    assert!(!leaks(&reason), "a secret in a reason");
    let Some((card, skills)) = redacted_door_card(body, &record) else {
        return;
    };
    assert!(
        !leaks(&card.to_string()),
        "a secret in the card's JSON text"
    );
    let mut strings = Vec::new();
    strings_of(&card, &mut strings);
    assert!(
        !strings.iter().any(|s| leaks(s)),
        "a secret in a decoded string or key"
    );
    let skills = serde_json::to_string(&skills).expect("skills encode");
    assert!(!leaks(&skills), "a secret in the skills");
    let decoded: Value = serde_json::from_str(&skills).expect("skills decode");
    let mut strings = Vec::new();
    strings_of(&decoded, &mut strings);
    assert!(
        !strings.iter().any(|s| leaks(s)),
        "a secret in a decoded skill"
    );
});
