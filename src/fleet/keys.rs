//! The key layout in etcd, built and parsed here only.
//!
//! ```text
//! <prefix>/hosts/<host_id>                  -> HostEntry     (one per registry process)
//! <prefix>/sessions/<host_id>/<session_id>  -> SessionEntry  (one per session it verified)
//! ```
//! Every key a registry writes hangs off its one lease, so a host that stops renewing leaves
//! with all its sessions at once. Sessions sit under their host so one range read or delete
//! covers a host, and host ids and session ids can hold no `/`, so parsing is exact.
//!
//! Invariant: [`FleetKeys::parse`] accepts exactly the keys the builders make.

use super::HostId;
use crate::running::is_valid_session_id;

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetKey {
    /// A host's entry.
    Host(HostId),
    /// One session of a host.
    Session {
        /// Whose.
        host: HostId,
        /// Which.
        session_id: String,
    },
}

/// The keys under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetKeys {
    /// The prefix without a trailing `/`.
    prefix: String,
}

impl FleetKeys {
    /// The layout under `prefix` (`--fleet-prefix`); trailing slashes are ignored.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// Every fleet key starts with this: the range one watch covers.
    pub fn all(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// The host's own entry.
    pub fn host(&self, host: &HostId) -> String {
        format!("{}/hosts/{host}", self.prefix)
    }

    /// The prefix of every session key of `host`.
    pub fn sessions_of(&self, host: &HostId) -> String {
        format!("{}/sessions/{host}/", self.prefix)
    }

    /// One session of `host`.
    pub fn session(&self, host: &HostId, session_id: &str) -> String {
        format!("{}/sessions/{host}/{session_id}", self.prefix)
    }

    /// What `key` names, or `None` for anything these builders could not have made.
    pub fn parse(&self, key: &[u8]) -> Option<FleetKey> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        if let Some(host) = rest.strip_prefix("hosts/") {
            return host.parse().ok().map(FleetKey::Host);
        }
        let (host, session_id) = rest.strip_prefix("sessions/")?.split_once('/')?;
        if !is_valid_session_id(session_id) {
            return None;
        }
        Some(FleetKey::Session {
            host: host.parse().ok()?,
            session_id: session_id.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: &str) -> HostId {
        id.parse().expect("a valid host id")
    }

    #[test]
    fn every_built_key_parses_back_to_what_it_names() {
        let keys = FleetKeys::new("/murmur/registry/v1/");
        let a = host("a");
        assert_eq!(keys.host(&a), "/murmur/registry/v1/hosts/a");
        assert_eq!(
            keys.parse(keys.host(&a).as_bytes()),
            Some(FleetKey::Host(a.clone()))
        );
        let session = keys.session(&a, "ses_01");
        assert_eq!(session, "/murmur/registry/v1/sessions/a/ses_01");
        assert!(session.starts_with(&keys.sessions_of(&a)));
        assert!(session.starts_with(&keys.all()));
        assert_eq!(
            keys.parse(session.as_bytes()),
            Some(FleetKey::Session {
                host: a,
                session_id: "ses_01".to_owned()
            })
        );
    }

    #[test]
    fn keys_no_builder_makes_are_refused() {
        let keys = FleetKeys::new("/p");
        for key in [
            "/p",
            "/p/",
            "/px/hosts/a",
            "/p/hosts/",
            "/p/hosts/a/b",
            "/p/hosts/.a",
            "/p/sessions/a",
            "/p/sessions/a/",
            "/p/sessions/a/b/c",
            "/p/sessions/-a/ses_1",
            "/p/other/a",
            "/other/hosts/a",
        ] {
            assert_eq!(keys.parse(key.as_bytes()), None, "{key}");
        }
        assert_eq!(keys.parse(b"/p/hosts/\xff"), None);
    }
}
