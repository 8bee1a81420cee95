//! A door's JSON answer, read so that no secret of the record can hide in a number: a number
//! whose source text holds one of the record's secrets is read as a string of that very text,
//! which the redaction of strings ([`super::door_redaction::redact_secrets_in`]) then covers. A door may
//! echo an all-digit credential (`8675309`) unquoted, in a card as anywhere else.
//!
//! Invariants kept here:
//! - A number is judged by its source text, never by a value printed again from it: `1e3`,
//!   `0.08675309` past a float's precision, or thirty digits that fit no integer print
//!   otherwise, and would slip a secret past a comparison of the printed value. A number whose
//!   printed form holds a secret its source does not (a huge integer read as a float) is read
//!   as a string of its source too: the printed form is never shown.
//! - The answer is JSON exactly when `serde_json` says it is: the bytes are parsed as they came
//!   first, and only an answer that parsed is rewritten, each chosen number token into a string
//!   token of the same characters (which need no escaping). Everything else reads as it was.
//! - Without a secret made only of the characters a number can hold (the usual case), the
//!   answer is parsed once and not scanned at all.

use std::ops::Range;

use serde_json::Value;

use super::RunningRecord;

/// `body` as JSON, each number whose source text holds one of `record`'s secrets read as a
/// string of that text (for the redaction of strings to replace the secret in).
pub(crate) fn parse_door_json(body: &[u8], record: &RunningRecord) -> serde_json::Result<Value> {
    let value = serde_json::from_slice(body)?;
    let secrets: Vec<&[u8]> = (record.door_token.iter())
        .chain(record.credentials.values())
        .map(|secret| secret.expose().as_bytes())
        .filter(|secret| could_be_in_a_number(secret))
        .collect();
    if secrets.is_empty() {
        return Ok(value);
    }
    let holding: Vec<Range<usize>> = number_tokens(body)
        .into_iter()
        .filter(|token| {
            let source = &body[token.clone()];
            // Printed again, a number may spell what its source does not (a huge integer is
            // read as a float: `8675867530008088..` prints as `8.675867530008089e+..`).
            let printed = serde_json::from_slice::<Value>(source)
                .map(|number| number.to_string())
                .unwrap_or_default();
            secrets
                .iter()
                .any(|s| holds(source, s) || holds(printed.as_bytes(), s))
        })
        .collect();
    if holding.is_empty() {
        return Ok(value);
    }
    serde_json::from_slice(&quoted(body, &holding))
}

/// Whether a number token could hold `secret`: it is not empty and made only of the characters
/// of JSON's number grammar.
fn could_be_in_a_number(secret: &[u8]) -> bool {
    !secret.is_empty() && secret.iter().copied().all(is_number_byte)
}

fn is_number_byte(byte: u8) -> bool {
    matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

fn holds(text: &[u8], secret: &[u8]) -> bool {
    text.windows(secret.len()).any(|window| window == secret)
}

/// The byte ranges of every number token of `json`, which must be valid JSON. Outside strings
/// only a number starts with `-` or a digit (`true`, `false` and `null` hold neither), and a
/// number runs until the first byte its grammar cannot hold.
fn number_tokens(json: &[u8]) -> Vec<Range<usize>> {
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(&byte) = json.get(at) {
        match byte {
            b'"' => at = string_end(json, at + 1),
            b'-' | b'0'..=b'9' => {
                let start = at;
                while json.get(at).copied().is_some_and(is_number_byte) {
                    at += 1;
                }
                tokens.push(start..at);
            }
            _ => at += 1,
        }
    }
    tokens
}

/// The index just past the `"` that closes the string whose contents start at `at`. Neither
/// `"` nor `\` occurs inside a multi-byte UTF-8 character, so bytes are enough.
fn string_end(json: &[u8], mut at: usize) -> usize {
    while let Some(&byte) = json.get(at) {
        match byte {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    json.len()
}

/// `json` with each of `tokens` (in order, not overlapping) put between quotes.
fn quoted(json: &[u8], tokens: &[Range<usize>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 2 * tokens.len());
    let mut copied = 0;
    for token in tokens {
        out.extend_from_slice(&json[copied..token.start]);
        out.push(b'"');
        out.extend_from_slice(&json[token.clone()]);
        out.push(b'"');
        copied = token.end;
    }
    out.extend_from_slice(&json[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record_with(credentials: &[&str]) -> RunningRecord {
        let credentials: serde_json::Map<String, Value> = (credentials.iter().enumerate())
            .map(|(n, secret)| (format!("c{n}"), json!(secret)))
            .collect();
        serde_json::from_value(json!({
            "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "1",
            "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": true, "started_at": "2026-11-30T00:00:00Z",
            "credentials": credentials,
        }))
        .expect("a record")
    }

    #[test]
    fn a_number_holding_a_secret_reads_as_its_source_text_and_nothing_else_changes() {
        let record = record_with(&["8675309", "08675309", "123456789012345678901234567890"]);
        let body = br#"{"pin": 8675309, "pins": [-8675309, 18675309e2, 867530],
            "frac": 0.08675309, "long": 123456789012345678901234567890,
            "text": "8675309 \" 8675309", "esc\\": 8675309, "plain": 42, "ok": true}"#;
        let value = parse_door_json(body, &record).expect("JSON");
        assert_eq!(
            value,
            json!({"pin": "8675309", "pins": ["-8675309", "18675309e2", 867_530],
                "frac": "0.08675309", "long": "123456789012345678901234567890",
                "text": "8675309 \" 8675309", "esc\\": "8675309", "plain": 42, "ok": true})
        );
    }

    /// Found by the `card_redaction` fuzz target.
    #[test]
    fn a_number_whose_printed_form_spells_a_secret_reads_as_its_source_text() {
        let record = record_with(&["7530008089e+1"]);
        let source = format!("86758675300080{}{}1", "8".repeat(73), "0".repeat(17));
        let card = parse_door_json(format!("{{\"n\":{source}}}").as_bytes(), &record).unwrap();
        assert_eq!(card["n"], Value::String(source));
    }

    #[test]
    fn an_answer_without_a_secret_a_number_could_hold_reads_as_it_is() {
        let body = br#"{"n": 8675309, "x": 1e3}"#;
        for record in [record_with(&[]), record_with(&["tok-8675309", ""])] {
            let value = parse_door_json(body, &record).expect("JSON");
            assert_eq!(value, serde_json::from_slice::<Value>(body).expect("JSON"));
        }
    }

    #[test]
    fn what_is_not_json_stays_not_json() {
        let record = record_with(&["08675309"]);
        // A leading zero: the rewrite would make it a valid string, but it is no JSON number.
        for body in [&b"{\"pin\": 08675309}"[..], b"8675309 x", b""] {
            assert!(parse_door_json(body, &record).is_err(), "{body:?}");
        }
    }

    #[test]
    fn number_tokens_are_found_outside_strings_only() {
        let json = br#"{"a-1": [-1.5e+3, 0], "b": "x\"2", "c": null, "d3": true}"#;
        let texts: Vec<&[u8]> = number_tokens(json)
            .into_iter()
            .map(|token| &json[token])
            .collect();
        assert_eq!(texts, [&b"-1.5e+3"[..], b"0"]);
    }
}
