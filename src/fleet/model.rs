//! The values fleet keys hold, as etcd stores them and the fleet endpoints serve them.
//!
//! Invariants: these are the only shapes written under a fleet prefix, and every field is public
//! by construction: a session entry carries the session view `GET /sessions` serves (built by
//! the caller from the public view only), never a record's `door_token` or any credential.
//! Every value is at most [`MAX_VALUE_BYTES`] with at most [`MAX_SKILLS`] skills of at most
//! [`MAX_TAGS`] tags: a writer fits its entries within these caps ([`SessionEntry::encode`]),
//! and a reader refuses any value beyond them ([`check_value_size`], [`SessionEntry::check`]),
//! the same caps on both sides, so an honest host's entry is always accepted.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::running::{MAX_SKILLS, MAX_TAGS, Skill};
pub use crate::wire::{DoorScope, HostEntry};

/// The most bytes a fleet value may hold. The largest honest entry is a session with a card of
/// 64 skills of 16 tags, each 128 characters (about 140 KB of skills alone) and paths of
/// `PATH_MAX`: its session view alone stays under 16 KiB, so a writer fits any honest entry by
/// leaving out skills ([`SessionEntry::skills_omitted`]); a thousand sessions at the cap are
/// 64 MiB, a fleet read stays within gRPC's and etcd's limits (1.5 MiB a request).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Whether a value of `len` bytes is within [`MAX_VALUE_BYTES`]: checked before it is parsed.
pub fn check_value_size(len: usize) -> Result<(), String> {
    if len > MAX_VALUE_BYTES {
        return Err(format!(
            "its value is {len} bytes, over the {MAX_VALUE_BYTES} a fleet value may hold"
        ));
    }
    Ok(())
}

/// The longest `--advertise-url` taken: URLs longer than this are not links a browser or proxy
/// keeps whole, and the host entry that carries it must stay far below [`MAX_VALUE_BYTES`].
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub const MAX_ADVERTISE_URL: usize = 2048;

/// Whether `url` may be advertised in this host's entry: an absolute `http://` or `https://`
/// URL with a host, at most [`MAX_ADVERTISE_URL`] bytes, nothing a URL parser would rewrite
/// (spaces, control characters), since readers show it as it was written.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub fn check_advertise_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_ADVERTISE_URL {
        return Err(format!(
            "--advertise-url is {} bytes, over the {MAX_ADVERTISE_URL} taken",
            url.len()
        ));
    }
    // The operator's own value, shown escaped (`{:?}`); its length is already bounded.
    let shown = format!("{url:?}");
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "--advertise-url {shown} must be an http:// or https:// URL"
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--advertise-url {shown} holds a space or control character"
        ));
    }
    match url.parse::<axum::http::Uri>() {
        Ok(parsed) if parsed.host().is_some_and(|host| !host.is_empty()) => Ok(()),
        Ok(_) => Err(format!("--advertise-url {shown} names no host")),
        Err(error) => Err(format!("--advertise-url {shown} is not a URL: {error}")),
    }
}

impl DoorScope {
    /// The scope of a door at `url` (`host:port`, as records write it).
    pub fn of(url: &str) -> Self {
        let host = match url.rsplit_once(':') {
            Some((host, _port)) => host,
            None => url,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback { Self::Host } else { Self::Network }
    }
}

/// The members of a session a fleet entry carries on: those `GET /sessions` serves (its
/// session view, checked against that view's schema by a test). A reader drops any other.
pub const SESSION_MEMBERS: [&str; 16] = [
    "session_id",
    "url",
    "pid",
    "process_start",
    "capsule_name",
    "capsule_version",
    "workdir",
    "outlives_launcher",
    "started_at",
    "formation_id",
    "formation_member",
    "spawned_by",
    "records_dir",
    "liveness",
    "card",
    "resources",
];

/// `<prefix>/sessions/<host_id>/<session_id>`: one session as its host verified it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The host whose registry verified it.
    pub host_id: String,
    /// When its verdict last changed, as its host saw it (RFC 3339, UTC).
    pub changed_at: String,
    /// From where its door can be reached; `null` for a session without a door.
    pub door_scope: Option<DoorScope>,
    /// The skills its verified card lists (ids and tags only; empty unless live), in the card's
    /// order, the first ones only when `skills_omitted` says so.
    pub skills: Vec<Skill>,
    /// How many skills of the card, the last ones, were left out to fit the entry within
    /// [`MAX_VALUE_BYTES`]; absent when none were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skills_omitted: usize,
    /// The session object `GET /sessions` serves for it, field for field: as read, only the
    /// members of [`SESSION_MEMBERS`].
    #[serde(flatten)]
    pub session: Map<String, Value>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Why a session entry cannot be published.
#[derive(Debug, thiserror::Error)]
pub enum Unpublishable {
    /// serde could not encode it (not for these types; never assumed).
    #[error("cannot be encoded: {0}")]
    Encoding(#[from] serde_json::Error),
    /// Even without its skills it is larger than a fleet value may be.
    #[error(
        "without its skills it is {0} bytes, over the {MAX_VALUE_BYTES} a fleet value may hold"
    )]
    TooLarge(usize),
}

impl SessionEntry {
    /// Its value as published, within the caps every reader applies: at most [`MAX_SKILLS`]
    /// skills of at most [`MAX_TAGS`] tags (as a card is read), and as many of them, from the
    /// first, as fit in [`MAX_VALUE_BYTES`]; `skills` and `skills_omitted` say what went out.
    pub fn encode(&mut self) -> Result<Vec<u8>, Unpublishable> {
        let mut all = std::mem::take(&mut self.skills);
        let omitted = self.skills_omitted + all.len().saturating_sub(MAX_SKILLS);
        all.truncate(MAX_SKILLS);
        for skill in &mut all {
            skill.tags.truncate(MAX_TAGS);
        }
        let whole = self.keeping(&all, omitted, all.len())?;
        if whole.len() <= MAX_VALUE_BYTES {
            return Ok(whole);
        }
        let mut best = self.keeping(&all, omitted, 0)?;
        if best.len() > MAX_VALUE_BYTES {
            return Err(Unpublishable::TooLarge(best.len()));
        }
        // The most skills that fit, in a handful of encodings: `fit` fits, `over` does not.
        let (mut fit, mut over) = (0, all.len());
        while over - fit > 1 {
            let kept = (fit + over) / 2;
            let value = self.keeping(&all, omitted, kept)?;
            if value.len() <= MAX_VALUE_BYTES {
                (fit, best) = (kept, value);
            } else {
                over = kept;
            }
        }
        self.skills = all[..fit].to_vec();
        self.skills_omitted = omitted + all.len() - fit;
        Ok(best)
    }

    /// Its encoding with the first `kept` of `all`, the rest (and `omitted` more) left out.
    fn keeping(
        &mut self,
        all: &[Skill],
        omitted: usize,
        kept: usize,
    ) -> Result<Vec<u8>, serde_json::Error> {
        self.skills = all[..kept].to_vec();
        self.skills_omitted = omitted + all.len() - kept;
        serde_json::to_vec(self)
    }

    /// Whether a reader may hold it: at most [`MAX_SKILLS`] skills of at most [`MAX_TAGS`]
    /// tags (its size was checked before it was parsed).
    pub fn check(&self) -> Result<(), String> {
        if self.skills.len() > MAX_SKILLS {
            return Err(format!(
                "it lists {} skills, over the {MAX_SKILLS} a fleet entry may",
                self.skills.len()
            ));
        }
        if self.skills.iter().any(|skill| skill.tags.len() > MAX_TAGS) {
            return Err(format!(
                "a skill has more than the {MAX_TAGS} tags a fleet entry may"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_doors_are_reachable_from_their_host_only() {
        for url in [
            "127.0.0.1:8080",
            "127.9.9.9:1",
            "[::1]:80",
            "localhost:3000",
            "LOCALHOST:1",
        ] {
            assert_eq!(DoorScope::of(url), DoorScope::Host, "{url}");
        }
        for url in [
            "10.0.0.5:8080",
            "[2001:db8::1]:80",
            "0.0.0.0:80",
            "box.lan:9000",
        ] {
            assert_eq!(DoorScope::of(url), DoorScope::Network, "{url}");
        }
    }

    #[test]
    fn a_session_entry_round_trips_with_the_session_fields_at_top_level() {
        let text = r#"{"host_id":"a","changed_at":"2026-12-01T00:00:00Z","door_scope":"host",
            "skills":[{"id":"plan","tags":["x"]}],"session_id":"ses_1","pid":7}"#;
        let entry: SessionEntry = serde_json::from_str(text).expect("parses");
        assert_eq!(entry.session["session_id"], "ses_1");
        assert_eq!(entry.door_scope, Some(DoorScope::Host));
        let again: Value = serde_json::to_value(&entry).expect("encodes");
        assert_eq!(again, serde_json::from_str::<Value>(text).expect("parses"));
    }

    fn entry_with_skills(skills: usize, tags: usize, text: usize) -> SessionEntry {
        let session = serde_json::json!({"session_id": "ses_1", "workdir": "/w"});
        let Value::Object(session) = session else {
            unreachable!("an object literal")
        };
        SessionEntry {
            host_id: "a".to_owned(),
            changed_at: "2026-12-01T00:00:00Z".to_owned(),
            door_scope: None,
            skills: (0..skills)
                .map(|i| Skill {
                    id: format!("{i:0>text$}"),
                    tags: (0..tags).map(|t| format!("{t:0>text$}")).collect(),
                })
                .collect(),
            skills_omitted: 0,
            session,
        }
    }

    #[test]
    fn the_largest_honest_card_is_published_within_the_cap_as_its_first_skills() {
        // 64 skills of 16 tags of 128 characters: about 140 KB of skills.
        let mut entry = entry_with_skills(MAX_SKILLS, MAX_TAGS, 128);
        let value = entry.encode().expect("publishable");
        assert!(value.len() <= MAX_VALUE_BYTES, "{}", value.len());
        let kept = entry.skills.len();
        assert!(kept > 0 && kept < MAX_SKILLS, "{kept}");
        assert_eq!(entry.skills_omitted, MAX_SKILLS - kept);
        // As many as fit: one more would not.
        let mut one_more = entry_with_skills(kept + 1, MAX_TAGS, 128);
        assert!(serde_json::to_vec(&one_more).expect("encodes").len() > MAX_VALUE_BYTES);
        // What went out is what a reader reads back, and accepts.
        let read: SessionEntry = serde_json::from_slice(&value).expect("parses");
        assert_eq!(read, entry);
        assert_eq!(check_value_size(value.len()), Ok(()));
        assert_eq!(read.check(), Ok(()));
        // A small entry goes out whole, without the member.
        let mut small = entry_with_skills(2, 2, 8);
        let value = small.encode().expect("publishable");
        assert_eq!(small.skills.len(), 2);
        assert!(!String::from_utf8_lossy(&value).contains("skills_omitted"));
        one_more.skills.truncate(1);
        assert_eq!(
            one_more.encode().map(|v| v.len() < MAX_VALUE_BYTES).ok(),
            Some(true)
        );
    }

    #[test]
    fn more_skills_or_tags_than_a_card_may_give_are_cut_on_writing_and_refused_on_reading() {
        let wide = entry_with_skills(MAX_SKILLS + 5, MAX_TAGS + 1, 1);
        assert!(wide.check().is_err());
        let mut written = wide.clone();
        written.encode().expect("publishable");
        assert_eq!(written.skills.len(), MAX_SKILLS);
        assert_eq!(written.skills_omitted, 5);
        assert!(written.skills.iter().all(|s| s.tags.len() == MAX_TAGS));
        assert_eq!(written.check(), Ok(()));
        assert!(entry_with_skills(1, MAX_TAGS + 1, 1).check().is_err());
    }

    #[test]
    fn an_entry_too_large_without_skills_is_not_published() {
        let mut entry = entry_with_skills(1, 1, 1);
        entry.session.insert(
            "workdir".to_owned(),
            Value::String("w".repeat(MAX_VALUE_BYTES)),
        );
        assert!(matches!(entry.encode(), Err(Unpublishable::TooLarge(n)) if n > MAX_VALUE_BYTES));
        assert!(check_value_size(MAX_VALUE_BYTES + 1).is_err());
        assert!(check_value_size(MAX_VALUE_BYTES).is_ok());
    }
}
