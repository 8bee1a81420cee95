//! One page of `GET /sessions` (`limit`, `cursor`): the sessions after the cursor, newest first,
//! verified, and the cursor of the next page.
//!
//! Invariants: layers 1–2 are read for every record (one shared directory pass: it is what
//! orders the list), but doors are probed only for the sessions the page answers, plus those
//! a filter turned away while filling it; a record whose capsule, or whose state as layers 1–2
//! settled it, the filter turns away is never probed. The page starts strictly after the
//! cursor's keys ([`listing_key`]), so a session present for the whole walk is on one page.
//! A verified page is a listing of its own: the registry's picture (`/metrics`) becomes the
//! sessions it verified, with the directory's unreadable entries.

use axum::response::Response;
use bytes::Bytes;

use super::AppState;
use super::error::ApiError;
use super::include::Includes;
use super::json_body::json_body;
use super::list_filter::ListFilter;
use super::paging::SessionsCursor;
use crate::registry::{Reading, ReadingCard, RegistryError, StateCounts, listing_key};
use crate::wire::{ListMembers, SessionList};

/// What a page was asked for.
pub(super) struct PageAsk {
    pub(super) limit: usize,
    pub(super) cursor: Option<SessionsCursor>,
    pub(super) probe: bool,
    pub(super) includes: Includes,
    pub(super) filter: ListFilter,
}

/// The page `ask` names, as a `SessionList` body with `next_cursor`.
pub(super) async fn page(state: &AppState, ask: PageAsk) -> Result<Response, ApiError> {
    let lean = state.registry().sessions(false).await?;
    let after = &lean.readings[page_start(&lean.readings, ask.cursor.as_ref())..];
    let (mut kept, mut cards, mut read) = (Vec::new(), Vec::new(), 0);
    let mut verified = StateCounts::default();
    // Each round verifies no more than the page still lacks, so no door past the page's last
    // session is asked.
    while kept.len() < ask.limit {
        let round = next_round(after, &mut read, ask.limit - kept.len(), &ask.filter);
        if round.is_empty() {
            break;
        }
        let (readings, round_cards) = match ask.probe {
            true => state.registry().verified(&round, ask.includes.card).await,
            false => (round, Vec::new()),
        };
        let mut round_cards = round_cards.into_iter();
        for reading in readings {
            verified.add(&reading);
            let card: Option<ReadingCard> = round_cards.next();
            if ask.filter.keeps(&reading) {
                kept.push(reading);
                cards.extend(card);
            }
        }
    }
    if ask.probe {
        // A page is a listing of the sessions it verified: `/metrics` shows them as the picture.
        (state.registry().tally()).pictured(verified, lean.unreadable.len());
    }
    let more = after[read..]
        .iter()
        .any(|reading| ask.filter.may_keep(reading));
    let next = match more {
        true => kept.last().map(|last| cursor_after(last).encode()),
        false => None,
    };
    let resources = match ask.includes.resources {
        true => Some(state.registry().resources(&kept).await),
        false => None,
    };
    let members = ListMembers {
        cards: ask.includes.card.then_some(&cards[..]),
        resources: resources.as_deref(),
    };
    let body = SessionList::encode(
        &kept,
        members,
        |_| true,
        lean.unreadable.len(),
        Some(next.as_deref()),
    )
    .map_err(|e| RegistryError::Task(format!("encoding a page of sessions: {e}")))?;
    Ok(json_body(Bytes::from(body)))
}

/// The next `want` readings of `after` from `*read` on that `filter` may keep, moving `*read`
/// past them (and past those it turns away).
fn next_round(
    after: &[Reading],
    read: &mut usize,
    want: usize,
    filter: &ListFilter,
) -> Vec<Reading> {
    let mut round = Vec::new();
    while round.len() < want && *read < after.len() {
        if filter.may_keep(&after[*read]) {
            round.push(after[*read].clone());
        }
        *read += 1;
    }
    round
}

/// Where the page after `cursor` starts in `readings` (newest first by [`listing_key`]): at the
/// first reading older than the cursor's keys; at the start without one.
fn page_start(readings: &[Reading], cursor: Option<&SessionsCursor>) -> usize {
    let Some(cursor) = cursor else { return 0 };
    let after = (cursor.started_at.as_str(), cursor.session_id.as_str());
    readings.partition_point(|reading| listing_key(&reading.record) >= after)
}

/// The cursor of the page that follows `last`.
fn cursor_after(last: &Reading) -> SessionsCursor {
    let (started_at, session_id) = listing_key(&last.record);
    SessionsCursor {
        started_at: started_at.to_owned(),
        session_id: session_id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::running::{ProcessState, RunningRecord};

    fn reading(started_at: &str, id: &str) -> Reading {
        let record: RunningRecord = serde_json::from_value(serde_json::json!({
            "session_id": id, "url": null, "pid": 1, "process_start": "7",
            "capsule_name": "c", "capsule_version": "1", "workdir": "/w",
            "outlives_launcher": false, "started_at": started_at
        }))
        .expect("a record");
        Reading {
            record: Arc::new(record),
            process: ProcessState::Alive,
            liveness: None,
            skills: Default::default(),
        }
    }

    #[test]
    fn a_page_starts_after_its_cursor_whether_or_not_that_session_is_still_there() {
        let readings = [
            reading("2026-12-02", "ses_b"),
            reading("2026-12-02", "ses_a"),
            reading("2026-12-01", "ses_c"),
        ];
        assert_eq!(page_start(&readings, None), 0);
        let at = |n: usize| page_start(&readings, Some(&cursor_after(&readings[n])));
        assert_eq!((at(0), at(1), at(2)), (1, 2, 3));
        // A session that left: its keys still say where the walk was.
        let gone = cursor_after(&reading("2026-12-02", "ses_aa"));
        assert_eq!(page_start(&readings, Some(&gone)), 1);
        let newer = cursor_after(&reading("2026-12-03", "ses_z"));
        assert_eq!(page_start(&readings, Some(&newer)), 0);
    }
}
