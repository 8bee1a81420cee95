//! The body of `GET /sessions`: every session, newest first, written one session at a time.
//!
//! Invariant: the bytes written are those serde_json gives for [`SessionList`] (its tests hold
//! them equal), so the document and the body cannot part.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::session::{ProcessStatus, ResourcesView, SessionState, SessionView, reason_of};
use crate::registry::{Reading, Resources};
use crate::running::{RedactedCard, RunningRecord};

/// Every session, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    /// The sessions that match the filter, newest first.
    pub sessions: Vec<SessionView>,
    /// How many `*.json` entries in the running directory are not valid records.
    #[schema(example = 0)]
    pub unreadable: usize,
    /// With `limit`: the `cursor` of the next page, `null` on the last. Absent without `limit`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    #[schema(value_type = Option<String>, nullable)]
    pub next_cursor: Option<Option<String>>,
}

/// The optional members of every session in a list body (`include=`), each indexed like the
/// listing's readings; `None` leaves the member out of every session.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListMembers<'a> {
    /// `card`: each reading's card, `None` where there is none to show.
    pub cards: Option<&'a [Option<Arc<RedactedCard>>]>,
    /// `resources`: each reading's figures, `None` where the process is not confirmed.
    pub resources: Option<&'a [Option<Resources>]>,
}

impl SessionList {
    /// The JSON a [`SessionList`] of `readings` (those `keep` admits) encodes to, written one
    /// session at a time: each record's public fields are encoded once and kept with the
    /// record (shared records are unchanged while their file is), and only the verification
    /// is encoded afresh. A listing of 10,000 neither copies its records nor holds their views
    /// beside its body.
    ///
    /// Each session carries the optional members `members` holds (`include=`), and no others;
    /// the body ends with `next_cursor` when it is a page (`Some`).
    pub fn encode(
        readings: &[Reading],
        members: ListMembers<'_>,
        keep: impl Fn(&Reading) -> bool,
        unreadable: usize,
        next_cursor: Option<Option<&str>>,
    ) -> serde_json::Result<Vec<u8>> {
        // About what a session's view takes, so the body is seldom grown and copied.
        const VIEW_BYTES: usize = 400;
        let mut body = Vec::with_capacity(64 + readings.len() * VIEW_BYTES);
        // serde_json's compact form of `SessionList`, member by member (a test holds the
        // bytes equal).
        body.extend_from_slice(b"{\"sessions\":[");
        let kept = (readings.iter().enumerate()).filter(|(_, reading)| keep(reading));
        for (n, (at, reading)) in kept.enumerate() {
            if n > 0 {
                body.push(b',');
            }
            body.extend_from_slice(reading.record.encoded_once(encode_record_fields)?);
            serde_json::to_writer(&mut body, &LivenessViewOf::of(reading))?;
            if let Some(cards) = members.cards {
                body.extend_from_slice(b",\"card\":");
                let card = cards.get(at).and_then(Option::as_deref);
                serde_json::to_writer(&mut body, &card.map(RedactedCard::json))?;
            }
            if let Some(resources) = members.resources {
                let figure = resources.get(at).copied().flatten();
                body.extend_from_slice(b",\"resources\":");
                serde_json::to_writer(&mut body, &figure.as_ref().map(ResourcesView::from))?;
            }
            body.push(b'}');
        }
        body.extend_from_slice(b"],\"unreadable\":");
        serde_json::to_writer(&mut body, &unreadable)?;
        if let Some(next) = next_cursor {
            body.extend_from_slice(b",\"next_cursor\":");
            serde_json::to_writer(&mut body, &next)?;
        }
        body.push(b'}');
        Ok(body)
    }
}

/// A session view up to its verification: `{` and every member before `liveness`, then
/// `"liveness":`, as serde_json writes [`SessionView`].
fn encode_record_fields(record: &RunningRecord) -> serde_json::Result<Vec<u8>> {
    let mut fields = serde_json::to_vec(&RecordFieldsOf::of(record))?;
    // `session_id` is always there, so the object is never empty: its `}` gives way to the
    // next member.
    fields.pop();
    fields.extend_from_slice(b",\"liveness\":");
    Ok(fields)
}

/// The members of [`SessionView`] before `liveness`, borrowed from the record: the same
/// members, in the same order, under the same conditions.
#[derive(Serialize)]
struct RecordFieldsOf<'a> {
    session_id: &'a str,
    url: Option<&'a str>,
    pid: u32,
    process_start: &'a str,
    capsule_name: &'a str,
    capsule_version: &'a str,
    workdir: Cow<'a, str>,
    outlives_launcher: bool,
    started_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    formation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    formation_member: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spawned_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records_dir: Option<Cow<'a, str>>,
}

impl<'a> RecordFieldsOf<'a> {
    fn of(r: &'a RunningRecord) -> Self {
        Self {
            session_id: &r.session_id,
            url: r.url.as_deref(),
            pid: r.pid,
            process_start: &r.process_start,
            capsule_name: &r.capsule_name,
            capsule_version: &r.capsule_version,
            workdir: r.workdir.to_string_lossy(),
            outlives_launcher: r.outlives_launcher,
            started_at: &r.started_at,
            formation_id: r.formation_id.as_deref(),
            formation_member: r.formation_member.as_deref(),
            spawned_by: r.spawned_by.as_deref(),
            records_dir: r.records_dir.as_deref().map(Path::to_string_lossy),
        }
    }
}

/// [`LivenessView`] borrowing its reading's reason, made by the same rules.
#[derive(Serialize)]
struct LivenessViewOf<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<SessionState>,
    process: ProcessStatus,
    reason: Option<&'a str>,
}

impl<'a> LivenessViewOf<'a> {
    fn of(reading: &'a Reading) -> Self {
        Self {
            state: reading.liveness.as_ref().map(SessionState::from),
            process: ProcessStatus::from(&reading.process),
            reason: reason_of(reading),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::running::{Liveness, ProcessState};

    fn reading(n: u32, liveness: Option<Liveness>) -> Reading {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": format!("ses_{n:032x}"), "url": "127.0.0.1:1", "pid": n,
            "process_start": "7", "capsule_name": "c", "capsule_version": "1",
            "workdir": "/w", "outlives_launcher": false, "started_at": "2026-11-30T00:00:00Z",
            "formation_id": "frm_1", "records_dir": "/r"
        }))
        .expect("a record");
        Reading {
            record: record.into(),
            process: ProcessState::Alive,
            liveness,
            skills: Default::default(),
        }
    }

    #[test]
    fn encoding_one_view_at_a_time_gives_the_bytes_of_the_list() {
        let readings = vec![
            reading(1, Some(Liveness::Live)),
            reading(2, None),
            reading(3, Some(Liveness::Live)),
        ];
        let live = |reading: &Reading| reading.liveness == Some(Liveness::Live);
        for keep in [&(|_: &Reading| true) as &dyn Fn(&Reading) -> bool, &live] {
            let whole = SessionList {
                sessions: readings
                    .iter()
                    .filter(|r| keep(r))
                    .map(SessionView::of)
                    .collect(),
                unreadable: 4,
                next_cursor: None,
            };
            let streamed = SessionList::encode(&readings, ListMembers::default(), keep, 4, None)
                .expect("encodes");
            assert_eq!(
                String::from_utf8(streamed).expect("utf-8"),
                serde_json::to_string(&whole).expect("encodes")
            );
        }
        let none =
            SessionList::encode(&[], ListMembers::default(), |_| true, 0, None).expect("encodes");
        assert_eq!(none, br#"{"sessions":[],"unreadable":0}"#);
        for next in [None, Some("6162")] {
            let page = SessionList {
                sessions: vec![SessionView::of(&readings[0])],
                unreadable: 1,
                next_cursor: Some(next.map(str::to_owned)),
            };
            let written = SessionList::encode(
                &readings[..1],
                ListMembers::default(),
                |_| true,
                1,
                Some(next),
            )
            .expect("encodes");
            assert_eq!(written, serde_json::to_vec(&page).expect("encodes"));
        }
    }

    #[test]
    fn a_listing_with_cards_gives_the_bytes_of_its_views() {
        let readings = vec![
            reading(1, Some(Liveness::Live)),
            reading(2, None),
            reading(3, Some(Liveness::Live)),
        ];
        let card = serde_json::json!({"name": "c", "skills": [{"id": "s", "tags": ["t"]}]});
        let card = Arc::new(RedactedCard::redacted(card, &readings[0].record));
        let cards = vec![None, Some(card), None];
        let whole = SessionList {
            sessions: (readings.iter().zip(&cards))
                .skip(1)
                .map(|(reading, card)| SessionView {
                    card: Some(card.clone()),
                    ..SessionView::of(reading)
                })
                .collect(),
            unreadable: 0,
            next_cursor: None,
        };
        let not_first = |r: &Reading| !Arc::ptr_eq(&r.record, &readings[0].record);
        let with_cards = ListMembers {
            cards: Some(&cards),
            resources: None,
        };
        let written =
            SessionList::encode(&readings, with_cards, not_first, 0, None).expect("encodes");
        assert_eq!(
            String::from_utf8(written).expect("utf-8"),
            serde_json::to_string(&whole).expect("encodes")
        );
        let all = SessionList::encode(&readings, with_cards, |_| true, 0, None).expect("encodes");
        let all: serde_json::Value = serde_json::from_slice(&all).expect("JSON");
        assert_eq!(all["sessions"][0]["card"], serde_json::Value::Null);
        assert_eq!(all["sessions"][1]["card"]["skills"][0]["id"], "s");
    }

    /// Every member that may be absent, every verdict, strings that need escaping, and each
    /// record listed twice (its fields then come from what the first listing kept).
    #[test]
    fn a_listing_written_from_kept_record_fields_gives_the_bytes_of_the_list() {
        let odd: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": "ses_odd", "url": null, "pid": 9, "process_start": "",
            "capsule_name": "q\"uote\\back\u{1}ctl", "capsule_version": "\u{e9}\u{1f600}",
            "workdir": "/w/\u{2028}", "outlives_launcher": true, "started_at": "x",
            "formation_member": "m", "spawned_by": "ses_0", "formation_id": "frm_2"
        }))
        .expect("a record");
        let odd = Arc::new(odd);
        let with = |process: ProcessState, liveness: Option<Liveness>| Reading {
            record: Arc::clone(&odd),
            process,
            liveness,
            skills: Default::default(),
        };
        let gone = "no process holds pid 9 \"quoted\"".to_owned();
        let readings = vec![
            with(
                ProcessState::Gone {
                    reason: gone.clone(),
                },
                Some(Liveness::Gone { reason: gone }),
            ),
            with(
                ProcessState::Unverified {
                    reason: "cannot read /proc/9/stat".to_owned(),
                },
                None,
            ),
            with(
                ProcessState::Alive,
                Some(Liveness::Unreachable {
                    reason: "door at 127.0.0.1:1 refused".to_owned(),
                }),
            ),
            reading(4, Some(Liveness::Live)),
        ];
        let whole = SessionList {
            sessions: readings.iter().map(SessionView::of).collect(),
            unreadable: 0,
            next_cursor: None,
        };
        for _ in 0..2 {
            let written = SessionList::encode(&readings, ListMembers::default(), |_| true, 0, None)
                .expect("encodes");
            assert_eq!(
                String::from_utf8(written).expect("utf-8"),
                serde_json::to_string(&whole).expect("encodes")
            );
        }
    }
}
