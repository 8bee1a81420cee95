//! Scenario `fleet` (feature `fleet`, etcd at `/usr/bin/etcd`): the fleet's figures against a
//! one-member etcd this scenario starts on free loopback ports with a private data directory:
//! `GET /fleet/sessions` over 10 hosts × 1,000 sessions, what a publishing pass costs etcd, and
//! how soon a killed host leaves another registry's view.
//!
//! Invariant: without the feature or without etcd the scenario prints why and files a
//! `skipped` row (never `met`), so a run never looks as if it measured the fleet when it did
//! not. Each part uses its own prefix and stops its registries before the next starts, so
//! etcd's counters see one part at a time.

use crate::figures::{Row, add};

/// What the skipped row and the line on the terminal say.
fn skipped(rows: &mut Vec<Row>, why: &str) {
    eprintln!("fleet: SKIPPED: {why}");
    add(
        rows,
        Row {
            scenario: "fleet: SKIPPED".to_owned(),
            measured: why.to_owned(),
            target: "-".to_owned(),
            baseline: "-".to_owned(),
            ratio: "-".to_owned(),
            met: false,
        },
    );
}

#[cfg(not(feature = "fleet"))]
pub async fn fleet_figures(rows: &mut Vec<Row>) {
    skipped(
        rows,
        "built without the `fleet` feature (cargo bench --features fleet --bench registry -- \
         --only fleet)",
    );
}

#[cfg(feature = "fleet")]
pub async fn fleet_figures(rows: &mut Vec<Row>) {
    use crate::etcd::{ETCD, Etcd};
    use crate::fleet_departure::killed_host_departure;
    use crate::fleet_listing::fleet_listing;
    use crate::fleet_publishing::publishing_passes;

    if !std::path::Path::new(ETCD).exists() {
        skipped(rows, &format!("no etcd at {ETCD} (Debian's etcd-server)"));
        return;
    }
    let etcd = Etcd::start().await;
    step!(fleet_listing(rows, &etcd));
    step!(publishing_passes(rows, &etcd));
    step!(killed_host_departure(rows, &etcd));
}

/// The flags that put a registry in the fleet under `prefix` as `host_id`.
#[cfg(feature = "fleet")]
pub fn fleet_flags(
    etcd: &crate::etcd::Etcd,
    prefix: &str,
    host_id: &str,
    more: &[&str],
) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--fleet-etcd",
        &etcd.endpoint(),
        "--fleet-prefix",
        prefix,
        "--host-id",
        host_id,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    flags.extend(more.iter().map(|s| (*s).to_owned()));
    flags
}

/// A polling loop's deadline: `while !done { deadline.tick().await }`.
#[cfg(feature = "fleet")]
pub struct Deadline {
    what: &'static str,
    within: std::time::Duration,
    until: std::time::Instant,
}

#[cfg(feature = "fleet")]
impl Deadline {
    /// `what` must come true `within` this long.
    pub fn new(what: &'static str, within: std::time::Duration) -> Self {
        let until = std::time::Instant::now() + within;
        Self {
            what,
            within,
            until,
        }
    }

    /// Wait 10 ms before looking again; panics, saying what, once the deadline has passed.
    pub async fn tick(&self) {
        let (what, within) = (self.what, self.within);
        assert!(
            std::time::Instant::now() < self.until,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
