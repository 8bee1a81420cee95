//! What of a door's answer may be shown: every secret of the record replaced by `[redacted]`
//! (in reasons, and in every string and key of a card), and a door's own words quoted only
//! briefly and without control characters.

use serde_json::Value;

use super::RunningRecord;
use super::skills::{Skill, skills_of};

/// A card that verified its session, with every secret of its record replaced by `[redacted]`:
/// fit to show to anyone allowed to list sessions.
///
/// Made only by the probe, after redaction. It is the door's data, so its `Debug` names its
/// kind and nothing of its content: a card never reaches a log.
pub struct RedactedCard(Value);

impl RedactedCard {
    /// `card` with every secret of `record` replaced, in every string (keys included).
    pub(crate) fn redacted(mut card: Value, record: &RunningRecord) -> Self {
        redact_secrets_in(&mut card, record);
        Self(card)
    }

    /// A card as a registry served it: redacted there, by the registry that read the record.
    pub(crate) fn served(card: Value) -> Self {
        Self(card)
    }

    /// The card as JSON.
    pub fn json(&self) -> &Value {
        &self.0
    }

    /// The skills it lists (ids and tags, bounded: [`skills_of`]).
    pub fn skills(&self) -> Vec<Skill> {
        skills_of(&self.0)
    }
}

impl std::fmt::Debug for RedactedCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedactedCard(..)")
    }
}

/// `reason` with every secret of `record` replaced, in case a door echoed one back.
pub(crate) fn redact_secrets(mut reason: String, record: &RunningRecord) -> String {
    let mut secrets: Vec<&str> = (record.door_token.iter().chain(record.credentials.values()))
        .map(|secret| secret.expose())
        .filter(|secret| !secret.is_empty())
        .collect();
    // Longest first: a secret that holds another must go whole, not leave its remainder.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        reason = reason.replace(secret, "[redacted]");
    }
    reason
}

/// Replace every secret of `record` inside every string (keys included) of `value`. A door's
/// answer holds any number that carries a secret as a string of its source text
/// ([`parse_door_json`]), so this covers numbers too.
pub(crate) fn redact_secrets_in(value: &mut Value, record: &RunningRecord) {
    let has_secret = |text: &str| {
        record
            .door_token
            .iter()
            .chain(record.credentials.values())
            .any(|secret| !secret.expose().is_empty() && text.contains(secret.expose()))
    };
    match value {
        Value::String(text) if has_secret(text) => {
            *text = redact_secrets(std::mem::take(text), record);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_secrets_in(v, record)),
        Value::Object(members) => {
            if members.keys().any(|k| has_secret(k)) {
                *members = std::mem::take(members)
                    .into_iter()
                    .map(|(k, v)| (redact_secrets(k, record), v))
                    .collect();
            }
            members
                .values_mut()
                .for_each(|v| redact_secrets_in(v, record));
        }
        _ => {}
    }
}

/// Someone else's text, cut short and stripped of control characters, fit for a reason string.
pub(crate) fn quote_briefly(text: &str) -> String {
    let cleaned: String = text.chars().filter(|c| !c.is_control()).take(80).collect();
    if cleaned.len() < text.len() && text.chars().count() > 80 {
        format!("{cleaned:?}…")
    } else {
        format!("{cleaned:?}")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::json;

    #[test]
    fn a_card_shown_for_another_record_is_redacted_for_its_secrets_too() {
        let record = |credential: &str| -> RunningRecord {
            serde_json::from_value(json!({
                "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "7",
                "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
                "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
                "door_token": "tok", "credentials": {"peer": credential}
            }))
            .expect("a record")
        };
        let (a, b) = (record("alpha"), record("beta"));
        let card = json!({"name": "tok alpha beta", "alpha": ["beta"]});
        let card = Arc::new(RedactedCard::redacted(card, &a));
        assert_eq!(
            *card.json(),
            json!({"name": "[redacted] [redacted] beta", "[redacted]": ["beta"]})
        );
        assert_eq!(
            RedactedCard::redacted(card.json().clone(), &b).json()["name"],
            "[redacted] [redacted] [redacted]"
        );
        assert_eq!(format!("{card:?}"), "RedactedCard(..)");
    }

    #[test]
    fn a_secret_that_holds_another_is_redacted_whole() {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": "ses_a", "url": "127.0.0.1:1", "pid": 1, "process_start": "1",
            "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
            "door_token": "tok", "credentials": {"api": "tokXYZ"}
        }))
        .expect("a record");
        let said = redact_secrets("sent tokXYZ and tok".to_owned(), &record);
        assert_eq!(said, "sent [redacted] and [redacted]");
    }

    #[test]
    fn quotes_are_short_and_clean() {
        let quoted = quote_briefly(&format!("a\nb{}", "z".repeat(200)));
        assert!(!quoted.contains('\n'));
        assert!(quoted.chars().count() < 90);
    }
}
