//! How this registry reaches etcd: endpoints, deadlines, and (for real clusters) TLS and a
//! username/password.
//!
//! Invariant: no call to etcd can wait longer than its deadline, and a connection that goes
//! silent (a frozen or partitioned server) is noticed by HTTP/2 keepalive within a third of
//! the lease's TTL, so neither publishing nor reading ever rests on a dead connection.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// Where etcd is and how to talk to it (`--fleet-etcd` and the TLS and credential flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSettings {
    /// `http://host:port` or `https://host:port`, one per member.
    pub endpoints: Vec<String>,
}

/// A client for `settings`, whose deadlines fit a lease of `ttl`.
///
/// Every request and the HTTP/2 keepalive answer within `ttl / 3`, so a silent server is
/// noticed, and a lease can still be renewed in time, well within one TTL.
pub async fn connect(settings: &EtcdSettings, ttl: Duration) -> Result<Client, etcd_client::Error> {
    let deadline = (ttl / 3).max(Duration::from_millis(200));
    let options = ConnectOptions::new()
        .with_connect_timeout(deadline)
        .with_timeout(deadline)
        .with_keep_alive(deadline / 2, deadline)
        .with_keep_alive_while_idle(true);
    Client::connect(settings.endpoints.clone(), Some(options)).await
}
