//! Single-flight door probes: however many callers verify the same record at once, its door is
//! asked once, and every one of them gets that probe's answer.
//!
//! Invariants kept here:
//! - A flight is keyed by everything the probe depends on (session id, pid, start token, door
//!   address and door token), so a record rewritten in any of them gets a probe of its own and
//!   never another record's answer.
//! - No answer outlives its probe: a flight leaves the table *before* it publishes its answer,
//!   so a caller that arrives after the door answered starts a fresh probe. Only callers that
//!   joined while the probe was still running share its answer.
//! - A caller that goes away (a client hung up) takes nothing from the others: the probe runs in
//!   its own task, owned jointly by its waiters, and is stopped only when the last waiter
//!   leaves.
//! - Reasons are shared unredacted inside the registry only; each waiter redacts the answer with
//!   its own record's secrets before anyone sees it.
//! - A flight keeps the card its door served only when a waiter asked for it before the door
//!   answered (a listing with `include=card`); it is shared by `Arc` among the waiters and gone
//!   with the last of them. Any other flight keeps the card's skills alone.

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::watch;

use crate::running::{DoorProbe, RedactedCard, RunningRecord, Secret, Skill};

/// What one probe answered: `Ok` when the door named the session, else why not (unredacted).
type Answer = Result<Verified, String>;

/// What a probe learnt from the card that verified the session.
#[derive(Debug, Clone)]
pub(super) struct Verified {
    /// The skills the card lists (ids and tags), redacted as the card is.
    pub(super) skills: Arc<[Skill]>,
    /// The card itself, redacted for the secrets every waiter shares (they key the flight);
    /// only when a waiter asked for it.
    pub(super) card: Option<Arc<RedactedCard>>,
}

/// Everything a door probe of a record depends on: the record, compared and hashed by its
/// session id, pid, start token, door address and secrets alone. The secrets are the ones an
/// answer is redacted of, so every waiter of a flight has its answer redacted for its own.
#[derive(Debug, Clone)]
struct ProbeKey(Arc<RunningRecord>);

type ProbeParts<'a> = (
    &'a str,
    u32,
    &'a str,
    Option<&'a str>,
    Option<&'a Secret>,
    &'a BTreeMap<String, Secret>,
);

impl ProbeKey {
    fn parts(&self) -> ProbeParts<'_> {
        let record = &*self.0;
        (
            &record.session_id,
            record.pid,
            &record.process_start,
            record.url.as_deref(),
            record.door_token.as_ref(),
            &record.credentials,
        )
    }
}

impl PartialEq for ProbeKey {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for ProbeKey {}

impl std::hash::Hash for ProbeKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

type Table = Mutex<HashMap<ProbeKey, Entry>>;

struct Entry {
    id: u64,
    flight: Weak<Flight>,
    /// A waiter wants the card: set under the table's lock, read as the flight leaves it.
    card_wanted: bool,
}

/// The probes in flight, by what they probe.
#[derive(Default)]
pub(super) struct Flights {
    table: Arc<Table>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Flights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("in_flight", &lock(&self.table).len())
            .finish()
    }
}

/// One probe in flight. Held by its waiters; the last one to drop it stops the probe.
pub(super) struct Flight {
    key: ProbeKey,
    id: u64,
    table: Weak<Table>,
    answer: watch::Receiver<Option<Answer>>,
    task: tokio::task::JoinHandle<()>,
}

impl Flights {
    /// The flight probing `record`'s door: the one already in the air for an identical record,
    /// or a new one started now with `door`. With `want_card`, its answer holds the card.
    pub(super) fn join(
        &self,
        record: &Arc<RunningRecord>,
        door: &DoorProbe,
        want_card: bool,
    ) -> Arc<Flight> {
        let mut table = lock(&self.table);
        // One lookup finds the flight in the air or the place for a new one.
        let mut slot = table.entry(ProbeKey(Arc::clone(record)));
        if let Slot::Occupied(occupied) = &mut slot
            && let Some(flight) = occupied.get().flight.upgrade()
        {
            // Still in the table, so the door's answer is not taken apart yet: this is seen.
            occupied.get_mut().card_wanted |= want_card;
            return flight;
        }
        let key = slot.key().clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (publish, answer) = watch::channel(None);
        let task = {
            let table = Arc::downgrade(&self.table);
            let key = key.clone();
            let record = Arc::clone(record);
            let door = door.clone();
            // The table lock is held until the entry is in, so the task cannot leave the table
            // before it has joined it.
            tokio::spawn(async move {
                let answer = door.probe_unredacted(&record).await;
                // Once out of the table nobody else joins, so whether the card is wanted is
                // settled.
                let card_wanted = table
                    .upgrade()
                    .and_then(|table| leave(&table, &key, id))
                    .is_some_and(|entry| entry.card_wanted);
                let answer = answer.map(|card| Verified {
                    skills: card.skills().into(),
                    card: card_wanted.then(|| Arc::new(card)),
                });
                // Every waiter may have gone meanwhile; then nobody needs the answer.
                let _ = publish.send(Some(answer));
            })
        };
        let flight = Arc::new(Flight {
            key: key.clone(),
            id,
            table: Arc::downgrade(&self.table),
            answer,
            task,
        });
        let entry = Entry {
            id,
            flight: Arc::downgrade(&flight),
            card_wanted: want_card,
        };
        match slot {
            Slot::Occupied(mut occupied) => {
                occupied.insert(entry);
            }
            Slot::Vacant(vacant) => {
                vacant.insert(entry);
            }
        }
        flight
    }

    /// How many probes are in the air, and how many callers wait on them in all.
    pub(super) fn in_flight(&self) -> (usize, usize) {
        lock(&self.table)
            .values()
            .map(|entry| entry.flight.strong_count())
            .filter(|waiters| *waiters > 0)
            .fold((0, 0), |(probes, waiters), n| (probes + 1, waiters + n))
    }
}

impl Flight {
    /// The probe's answer, unredacted, once the door has given it.
    pub(super) async fn answer(&self) -> Answer {
        let mut answer = self.answer.clone();
        match answer.wait_for(Option::is_some).await {
            Ok(published) => published
                .clone()
                .unwrap_or_else(|| Err("the door probe gave no answer".to_owned())),
            Err(_) => Err("the door probe failed".to_owned()),
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        // The last waiter left: nobody wants this probe any more.
        self.task.abort();
        if let Some(table) = self.table.upgrade() {
            leave(&table, &self.key, self.id);
        }
    }
}

/// Take flight `id` out of the table, leaving any newer flight of the same key in place; its
/// entry, if it was still there.
fn leave(table: &Table, key: &ProbeKey, id: u64) -> Option<Entry> {
    match lock(table).entry(key.clone()) {
        Slot::Occupied(occupied) if occupied.get().id == id => Some(occupied.remove()),
        _ => None,
    }
}

fn lock(table: &Table) -> std::sync::MutexGuard<'_, HashMap<ProbeKey, Entry>> {
    // The table holds no invariant a panicking holder could break halfway.
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
