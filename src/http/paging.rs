//! Paging of the two lists (`GET /sessions`, `GET /fleet/sessions`): the `limit` a page takes
//! and the opaque `cursor` that says where the next one starts.
//!
//! Invariants: a cursor is made and read here only; it names the last session a page held by
//! the keys the list is ordered by (so a session present for the whole walk is on exactly one
//! page, whatever came or went), and a text this module did not make, or made for the other
//! list, is a 400 `invalid-cursor`, never a guess. A `limit` outside 1–[`MAX_PAGE`] is a 400.

use serde::{Deserialize, Serialize};

use super::error::{ApiError, Problem, ProblemType};
use crate::fleet::HostId;

/// The most sessions one page holds.
pub const MAX_PAGE: usize = 10_000;

/// The longest cursor read: far over any this module makes (two ids of at most 128 characters
/// and a timestamp), so a client's megabyte is refused before it is decoded.
const MAX_CURSOR_CHARS: usize = 4096;

/// How many sessions a page holds: `limit` when given and within 1–[`MAX_PAGE`]; `None` (the
/// whole list) without one. A cursor without a limit is refused: the walk it belongs to was
/// paged.
pub(crate) fn page_size(
    limit: Option<u32>,
    cursor: Option<&str>,
) -> Result<Option<usize>, ApiError> {
    match (limit, cursor) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ApiError::bad_query(
            "cursor continues a paged walk: give it with limit",
        )),
        (Some(limit), _) => match usize::try_from(limit) {
            Ok(size @ 1..=MAX_PAGE) => Ok(Some(size)),
            _ => Err(ApiError::bad_query(format!(
                "limit takes 1 to {MAX_PAGE} sessions a page"
            ))),
        },
    }
}

/// Where the next page of `GET /sessions` starts: after the session with these keys (the list
/// is newest first by `started_at`, then `session_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionsCursor {
    pub(crate) started_at: String,
    pub(crate) session_id: String,
}

/// Where the next page of `GET /fleet/sessions` starts: after this host's session (the list is
/// by host, then session id), in a walk begun at `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FleetCursor {
    /// The etcd revision of the walk's first page.
    pub(crate) revision: i64,
    pub(crate) host_id: HostId,
    pub(crate) session_id: String,
}

/// A cursor as its text holds it: which list, then that list's keys.
#[derive(Serialize, Deserialize)]
#[serde(tag = "l", deny_unknown_fields)]
enum Held {
    #[serde(rename = "s")]
    Sessions { a: String, s: String },
    #[serde(rename = "f")]
    Fleet { r: i64, h: String, s: String },
}

impl SessionsCursor {
    /// Its text, to hand to the client.
    pub(crate) fn encode(&self) -> String {
        encode(&Held::Sessions {
            a: self.started_at.clone(),
            s: self.session_id.clone(),
        })
    }

    /// The cursor `text` names, or a 400 `invalid-cursor`.
    pub(crate) fn decode(text: &str) -> Result<Self, ApiError> {
        match decode(text) {
            Some(Held::Sessions { a, s }) => Ok(Self {
                started_at: a,
                session_id: s,
            }),
            _ => Err(invalid("GET /sessions")),
        }
    }
}

impl FleetCursor {
    /// Its text, to hand to the client.
    pub(crate) fn encode(&self) -> String {
        encode(&Held::Fleet {
            r: self.revision,
            h: self.host_id.to_string(),
            s: self.session_id.clone(),
        })
    }

    /// The cursor `text` names, or a 400 `invalid-cursor`.
    pub(crate) fn decode(text: &str) -> Result<Self, ApiError> {
        match decode(text) {
            Some(Held::Fleet { r, h, s }) if r > 0 => match h.parse() {
                Ok(host_id) => Ok(Self {
                    revision: r,
                    host_id,
                    session_id: s,
                }),
                Err(_) => Err(invalid("GET /fleet/sessions")),
            },
            _ => Err(invalid("GET /fleet/sessions")),
        }
    }
}

/// The 410 of a fleet cursor whose walk began at a revision etcd no longer holds.
pub(crate) fn expired(revision: i64) -> ApiError {
    Problem::new(
        ProblemType::CursorExpired,
        format!(
            "this cursor's walk began at etcd revision {revision}, which etcd has compacted \
             away: start again without a cursor"
        ),
    )
    .into()
}

fn invalid(list: &str) -> ApiError {
    Problem::new(
        ProblemType::InvalidCursor,
        format!(
            "cursor is not one {list} handed out: pass next_cursor as it came, or start again \
             without one"
        ),
    )
    .into()
}

/// The JSON of `held`, as lowercase hex: opaque, and safe in a query string as it is.
fn encode(held: &Held) -> String {
    // Strings and integers only: serde_json cannot fail on them.
    let json = serde_json::to_vec(held).unwrap_or_default();
    let mut text = String::with_capacity(json.len() * 2);
    for byte in json {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn decode(text: &str) -> Option<Held> {
    if text.len() > MAX_CURSOR_CHARS || !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).filter(|_| !c.is_ascii_uppercase());
    let json = (text.as_bytes().chunks(2))
        .map(|pair| Some((digit(pair[0])? << 4 | digit(pair[1])?) as u8))
        .collect::<Option<Vec<u8>>>()?;
    serde_json::from_slice(&json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet_text(revision: i64) -> String {
        fleet_text_of(revision, "h")
    }

    fn fleet_text_of(revision: i64, host: &str) -> String {
        encode(&Held::Fleet {
            r: revision,
            h: host.to_owned(),
            s: "s".to_owned(),
        })
    }

    #[test]
    fn cursors_read_back_as_they_were_made_and_only_for_their_own_list() {
        let sessions = SessionsCursor {
            started_at: "2026-12-01T00:00:00Z".to_owned(),
            session_id: "ses_\"odd\"\n".to_owned(),
        };
        let text = sessions.encode();
        assert!(text.bytes().all(|b| HEX.contains(&b)), "{text}");
        assert_eq!(SessionsCursor::decode(&text).ok(), Some(sessions));
        assert!(FleetCursor::decode(&text).is_err());
        let fleet = FleetCursor {
            revision: 42,
            host_id: "web01".parse().expect("a host id"),
            session_id: "ses_1".to_owned(),
        };
        assert_eq!(FleetCursor::decode(&fleet.encode()).ok(), Some(fleet));
        assert!(
            FleetCursor::decode(&fleet_text(0)).is_err(),
            "no revision 0"
        );
        assert!(
            FleetCursor::decode(&fleet_text_of(1, "../x")).is_err(),
            "not a host id"
        );
        assert!(SessionsCursor::decode(&fleet_text(1)).is_err());
    }

    #[test]
    fn texts_not_made_here_are_refused() {
        let made = SessionsCursor {
            started_at: "a".to_owned(),
            session_id: "b".to_owned(),
        }
        .encode();
        let upper = made.to_uppercase();
        let odd = &made[1..];
        let long = "0".repeat(MAX_CURSOR_CHARS + 2);
        for text in ["", "zz", "7b7d", odd, &upper, &long] {
            assert!(SessionsCursor::decode(text).is_err(), "{text:?}");
            assert!(FleetCursor::decode(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_limit_is_one_to_ten_thousand_and_a_cursor_needs_one() {
        assert_eq!(page_size(None, None).ok(), Some(None));
        assert_eq!(page_size(Some(1), None).ok(), Some(Some(1)));
        assert_eq!(page_size(Some(10_000), Some("x")).ok(), Some(Some(10_000)));
        for limit in [0, 10_001, u32::MAX] {
            assert!(page_size(Some(limit), None).is_err(), "{limit}");
        }
        assert!(page_size(None, Some("x")).is_err());
    }
}
