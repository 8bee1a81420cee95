//! The fleet: every host's verified sessions in one place, on etcd.
//!
//! Each host's registry stays the only reader of its running directory and `/proc`; with
//! `--fleet-etcd` it also publishes its verified picture to etcd under a lease its verification
//! loop keeps alive, and serves every host's picture from a cache fed by one prefix watch.
//!
//! This module is the vocabulary and the pure parts (host ids, the key layout, the values),
//! compiled in every build so the HTTP contract is the same with the `fleet` feature on or off;
//! only what talks to etcd needs the feature.
//!
//! Invariants:
//! - Nothing secret is published: a value is built from the public session view only (no
//!   `door_token`, no credential, no registry token) and a card's skill ids and tags, never
//!   the card itself.
//! - Keys are built and parsed in one place ([`keys`]), so a reader never trusts a key it
//!   could not have written.

pub mod cache;
#[cfg(feature = "fleet")]
pub mod etcd;
mod figures;
// Pure, so built and tested in every build; only the publisher (feature `fleet`) uses it.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
mod held_keys;
pub mod history;
mod host_id;
pub mod keys;
#[cfg(feature = "fleet")]
mod keys_watch;
pub mod model;
#[cfg(feature = "fleet")]
mod own_host;
#[cfg(feature = "fleet")]
mod pages_parsing;
// Pure, so built and tested in every build; only the publisher (feature `fleet`) uses it.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub mod plan;
#[cfg(feature = "fleet")]
pub mod publisher;
#[cfg(feature = "fleet")]
pub mod publishing;
pub(crate) mod refusals;
#[cfg(test)]
pub(crate) mod sample;
pub mod view;
// Pure, so built and tested in every build; only the watcher (feature `fleet`) acts on it.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
mod watch_step;
#[cfg(feature = "fleet")]
pub mod watcher;

pub use figures::PublishFigures;
pub use host_id::{HOST_ID_RULE, HostId};
#[cfg(feature = "fleet")]
pub use model::check_advertise_url;
pub use model::{DoorScope, HostEntry, SessionEntry};
pub use view::{FleetUnavailable, FleetView};

use std::time::Duration;

/// Where fleet keys live in etcd unless `--fleet-prefix` says otherwise.
pub const DEFAULT_PREFIX: &str = "/murmur/registry/v1";
/// How long a host's keys outlive its last renewal unless `--fleet-ttl` says otherwise.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// How often a host's entry is written again with its load read afresh: a fleet at rest
/// writes one small put per host this often, beside the renewals.
pub const HOST_LOAD_REFRESH: Duration = Duration::from_secs(30);
