//! murmur-registry: the verified picture of which murmur capsules run on this machine.
//!
//! The crate is layered so each part can be tested alone; arrows point down
//! (`cli` → `http` → `monitor` → `registry` → `running` → `private_fs`, `process_identity`).
//!
//! - [`running`]: the records murmur leaves in `~/.murmur/running/` and the three layers that
//!   verify them. Knows nothing of HTTP.
//! - [`registry`]: the async operations (list, verify concurrently, prune, signal, stop) that
//!   the service and the CLI share. Blocking work runs off the async workers (listing a small
//!   directory on a local filesystem excepted, and the token file's one `lstat` per request);
//!   door probes of one record are shared by concurrent callers.
//! - [`private_fs`]: private directories, atomic writes, and removal only of the file judged.
//! - `process_identity`: what `/proc` says of a pid (held, by which process, in what state):
//!   bottom floor, beside `private_fs`, which names its quarantined entries by owner with it.
//! - `socket_owner`: who holds the far end of one of our TCP connections, asked of the kernel
//!   (bottom floor, beside `private_fs`: the doors ask it before a secret is written).
//! - [`token`]: the bearer token file, created private and checked in constant time.
//! - [`discovery`]: the discovery file (`server.json`) `serve` writes beside its token and
//!   other commands find it by, trusted only on layers 1–2 of its writer and `/healthz`.
//! - `monitor`: the live view behind `/events`: one verification loop publishing every change
//!   to any number of listeners.
//! - `fleet`: every host's verified sessions on etcd: the key layout and values (always),
//!   publishing under a lease and the watch-fed cache (feature `fleet`).
//! - [`wire`]: every body, query and event the HTTP API carries, one type each, serialized by
//!   the server and read by the client (and documented in the OpenAPI spec) alike.
//! - [`http`]: the axum service, its auth gates and its OpenAPI document.
//! - [`control_chars`]: the one rule that makes control characters visible in text a person
//!   reads (the CLI's output, the text log); it depends on nothing.
//! - `test_support`: what tests, the bench and fuzz targets reach that is no part of the API.
//! - [`client`]: the typed client of the HTTP API (reqwest, no proxy), speaking [`wire`]'s
//!   types; what `health`, `status` and capsules written in Rust use.
//! - [`cli`]: the command line; the only place that reads `HOME` or binds a port, and that sets
//!   process-wide policy (the open-files limit, the heap's, in `heap`) for `serve`.

// Issue 23: no function of the library over 80 lines (the threshold is in clippy.toml).
#![warn(clippy::too_many_lines)]

#[cfg(feature = "server")]
pub mod cli;
#[cfg(feature = "client")]
pub mod client;
pub mod control_chars;
#[cfg(feature = "client")]
pub mod discovery;
#[cfg(feature = "server")]
pub(crate) mod fleet;
#[cfg(feature = "server")]
mod heap;
#[cfg(feature = "server")]
pub(crate) mod host_load;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub(crate) mod monitor;
pub mod private_fs;
mod process_identity;
// The client alone builds the verification (its wire types are made from it) without the
// service that calls all of it.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub mod registry;
pub mod running;
mod socket_owner;
#[cfg(test)]
mod test_records;
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod test_support;
pub mod token;
pub mod wire;
