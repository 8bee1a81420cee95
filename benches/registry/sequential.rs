//! Upstream's way of verifying, the baseline of the first scenarios: the same probes with the
//! same deadlines, one record after another, in this process and without HTTP.
//!
//! Invariant: these use the crate's own layer functions, so a difference in a verdict is the
//! registry's doing, never a second implementation's.

use std::path::Path;

use murmur_registry::running::{self, DoorProbe, Liveness};

/// Upstream's `GET /sessions`: scan, then all three layers record after record.
pub async fn sequential_verify(dir: &Path, records: Option<usize>) -> Vec<(String, Liveness)> {
    let listed = running::list(dir).expect("scan");
    let door = DoorProbe::new();
    let mut verdicts = Vec::new();
    for record in listed.iter().take(records.unwrap_or(usize::MAX)) {
        verdicts.push((
            record.session_id.clone(),
            running::verify(record, &door).await,
        ));
    }
    verdicts
}

/// Upstream's `probe=false`: scan, then layers 1–2 record after record.
pub fn sequential_layers_1_2(dir: &Path) -> usize {
    running::list(dir)
        .expect("scan")
        .iter()
        .map(running::process_state)
        .filter(|state| *state == running::ProcessState::Alive)
        .count()
}
